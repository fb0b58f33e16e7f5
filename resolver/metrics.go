package resolver

import (
	"errors"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/resolver/dnswire"
)

// DurationBuckets are the bounds of towerd's latency histograms, in seconds:
// from 50 µs (a cache hit on a busy node) to 5 s (a whole upstream budget),
// dense around the 1 ms–100 ms where upstream round trips live.
var DurationBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 1.8, 2.5, 5,
}

// qtypeLabels are the query types that get a label value of their own; all
// others are "other". A closed set, so a client asking odd types cannot blow
// up the number of series.
var qtypeLabels = map[uint16]string{
	dns.TypeA: "A", dns.TypeAAAA: "AAAA", dns.TypeCNAME: "CNAME",
	dns.TypeHTTPS: "HTTPS", dns.TypeMX: "MX", dns.TypeNS: "NS",
	dns.TypePTR: "PTR", dns.TypeSOA: "SOA", dns.TypeSRV: "SRV",
	dns.TypeSVCB: "SVCB", dns.TypeTXT: "TXT", dns.TypeANY: "ANY",
}

// QtypeLabel returns the label value of a query type in towerd's metrics.
func QtypeLabel(qtype uint16) string {
	if l, ok := qtypeLabels[qtype]; ok {
		return l
	}
	return "other"
}

// Metrics counts answered queries for Prometheus. It implements Observer;
// hand it to NewHandler, then Instrument the handler and its server so the
// gauges that are read at scrape time can find them.
//
// No metric is labelled by query name: names are unbounded and a client
// could create series at will. Zone labels are the configured zones only.
type Metrics struct {
	reg        prometheus.Registerer
	requests   *prometheus.CounterVec
	responses  *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	prefetches prometheus.Counter

	// series remembers the counters and histogram of each label set seen, so
	// that a query costs one lock-free map lookup instead of three label
	// lookups in the vectors (hashing, a read lock each), which weighed on
	// the fast path's hit (docs/benchmarks.md). The map is replaced, never
	// changed, under seriesMu; label values come from closed sets (see
	// QtypeLabel, dnswire.RcodeName, configured zones), so it stays small.
	series   atomic.Pointer[map[seriesKey]*querySeries]
	seriesMu sync.Mutex
}

type seriesKey struct {
	proto, qtype, zone, source string
	rcode                      int
}

type querySeries struct {
	requests, responses prometheus.Counter
	duration            prometheus.Observer
}

var _ Observer = (*Metrics)(nil)

// NewMetrics creates the query metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "towerd_requests_total",
			Help: "DNS queries answered, by transport (udp, tcp) and query type (common types by name, others as \"other\").",
		}, []string{"proto", "qtype"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "towerd_responses_total",
			Help: "DNS answers sent, by zone, by where the answer came from (cache, stale, upstream, consul, local) and by rcode.",
		}, []string{"zone", "source", "rcode"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "towerd_request_duration_seconds",
			Help:    "Time from reading a query to its answer being ready to send, by source of the answer.",
			Buckets: DurationBuckets,
		}, []string{"source"}),
		prefetches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "towerd_cache_prefetches_total",
			Help: "Background refreshes started by a cache hit near an entry's expiry (the last tenth of its TTL; for short TTLs the last second, at most a quarter).",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.responses, m.duration, m.prefetches} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveQuery implements Observer.
func (m *Metrics) ObserveQuery(q Query) {
	s := m.seriesOf(seriesKey{proto: q.Proto, qtype: QtypeLabel(q.Qtype), zone: q.Zone, source: q.Source, rcode: q.Rcode})
	s.requests.Inc()
	s.responses.Inc()
	s.duration.Observe(q.Duration.Seconds())
	if q.Prefetch {
		m.prefetches.Inc()
	}
}

func (m *Metrics) seriesOf(k seriesKey) *querySeries {
	if known := m.series.Load(); known != nil {
		if s, ok := (*known)[k]; ok {
			return s
		}
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	var next map[seriesKey]*querySeries
	if known := m.series.Load(); known != nil {
		if s, ok := (*known)[k]; ok {
			return s
		}
		next = maps.Clone(*known)
	} else {
		next = map[seriesKey]*querySeries{}
	}
	s := &querySeries{
		requests:  m.requests.WithLabelValues(k.proto, k.qtype),
		responses: m.responses.WithLabelValues(k.zone, k.source, dnswire.RcodeName(k.rcode)),
		duration:  m.duration.WithLabelValues(k.source),
	}
	next[k] = s
	m.series.Store(&next)
	return s
}

// Instrument registers the gauges and counters read from h and srv at scrape
// time: resolutions in flight, in-flight cap and its rejections, and
// packets dropped as unparsable. srv may be nil (no listeners, as in tests
// that drive the handler directly).
func (m *Metrics) Instrument(h *Handler, srv *Server) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "towerd_inflight_resolutions",
			Help: "Upstream resolutions running now (identical questions share one).",
		}, func() float64 { return float64(h.Inflight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "towerd_inflight_resolutions_limit",
			Help: "The in-flight cap (upstream.max_inflight); past it queries are answered stale or SERVFAIL at once.",
		}, func() float64 { return float64(h.InflightCap()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "towerd_inflight_rejections_total",
			Help: "Queries and prefetches that found the in-flight cap full.",
		}, func() float64 { return float64(h.InflightRejections()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "towerd_inflight_yields_total",
			Help: "Resolutions that ran longer than 200 ms (or query_timeout) and gave their slot to a new question when the in-flight cap was full.",
		}, func() float64 { return float64(h.InflightYields()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "towerd_query_log_lines_dropped_total",
			Help: "Query-log lines not written because the query log was at its rate limit (log_queries_rate lines a second).",
		}, func() float64 { return float64(h.QueryLogDropped()) }),
		searchCollector{h},
		dnssecCollector{h},
	}
	if srv != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "towerd_invalid_packets_total",
			Help: "Packets dropped or answered FORMERR because they could not be parsed.",
		}, func() float64 { return float64(srv.Invalid()) }), tcpCollector{srv})
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, m.reg.Register(c))
	}
	return errors.Join(errs...)
}

// searchCollector exposes the search-list rules' counters (issue 28,
// searchahead.go) at scrape time.
type searchCollector struct{ h *Handler }

var (
	searchAnswersDesc = prometheus.NewDesc("towerd_search_answers_total",
		"Search-list tries answered with an upstream NXDOMAIN without waiting for the upstream: each one a round trip a lookup did not wait. by=round: asked ahead with an earlier try of the same lookup; by=hold: the upstream's last word, at most search.hold old, for a lookup that ends at a name the node knows.",
		[]string{"by"}, nil)
	searchAheadDesc = prometheus.NewDesc("towerd_search_ahead_queries_total",
		"Upstream resolutions the search-list rules started that no client waited for: a lookup's later names asked ahead, and refreshes behind held answers.", nil, nil)
	searchSkippedDesc = prometheus.NewDesc("towerd_search_ahead_skipped_total",
		"Times the search-list rules asked nothing ahead because half the in-flight cap (upstream.max_inflight) was taken: the client then asks its later names one by one.", nil, nil)
)

func (c searchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- searchAnswersDesc
	ch <- searchAheadDesc
	ch <- searchSkippedDesc
}

func (c searchCollector) Collect(ch chan<- prometheus.Metric) {
	st := &c.h.searchStats
	ch <- prometheus.MustNewConstMetric(searchAnswersDesc, prometheus.CounterValue, float64(st.fromRound.Load()), "round")
	ch <- prometheus.MustNewConstMetric(searchAnswersDesc, prometheus.CounterValue, float64(st.fromHold.Load()), "hold")
	ch <- prometheus.MustNewConstMetric(searchAheadDesc, prometheus.CounterValue, float64(st.ahead.Load()))
	ch <- prometheus.MustNewConstMetric(searchSkippedDesc, prometheus.CounterValue, float64(st.skipped.Load()))
}

// tcpCollector exposes Server.TCPStats at scrape time (issue 13).
type tcpCollector struct{ srv *Server }

var (
	tcpConnectionsDesc = prometheus.NewDesc("towerd_tcp_connections",
		"TCP connections open now.", nil, nil)
	tcpConnectionsLimitDesc = prometheus.NewDesc("towerd_tcp_connections_limit",
		"The cap on TCP connections: tcp.max_connections, lowered to keep file descriptors in reserve for upstreams and the admin server.", nil, nil)
	tcpClosedDesc = prometheus.NewDesc("towerd_tcp_connections_closed_total",
		"TCP connections closed, by reason: idle, cap (closed for a newer one or refused at the cap), slow (closed for a newer one while its query was still arriving), oversize (query over 4 KiB announced), stalled (a query stopped arriving), write_timeout (the client did not read), error, client (closed by the client), shutdown.",
		[]string{"reason"}, nil)
	tcpAcceptErrorsDesc = prometheus.NewDesc("towerd_tcp_accept_errors_total",
		"Failed TCP accepts, by kind: emfile (the process is out of file descriptors), enfile (the system is), other; each one backs off.",
		[]string{"kind"}, nil)
)

func (c tcpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tcpConnectionsDesc
	ch <- tcpConnectionsLimitDesc
	ch <- tcpClosedDesc
	ch <- tcpAcceptErrorsDesc
}

func (c tcpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.srv.TCPStats()
	ch <- prometheus.MustNewConstMetric(tcpConnectionsDesc, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(tcpConnectionsLimitDesc, prometheus.GaugeValue, float64(st.Limit))
	for reason, n := range st.Closed {
		ch <- prometheus.MustNewConstMetric(tcpClosedDesc, prometheus.CounterValue, float64(n), reason)
	}
	for kind, n := range st.AcceptErrors {
		ch <- prometheus.MustNewConstMetric(tcpAcceptErrorsDesc, prometheus.CounterValue, float64(n), kind)
	}
}
