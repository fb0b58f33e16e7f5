package upstream

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReasonMismatch is the errors_total reason of replies dropped because their
// ID, question or source did not match the query. Unlike the other reasons
// it is not an attempt's outcome: the attempt waits on and may still succeed.
const ReasonMismatch = "mismatch"

// Metrics counts upstream attempts for Prometheus, by zone (the group's
// name) and server. Attempts are counted as they happen, through the
// GroupOptions.Observe hook that Observer returns; health, smoothed RTT and
// rejected replies are read from the groups at scrape time. The counters
// outlive the groups, so a configuration reload that rebuilds every group
// does not reset them.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	scrubbed *prometheus.CounterVec
	hedges   *prometheus.CounterVec
	up, srtt *prometheus.Desc
	tail     *prometheus.Desc
	// DNS over TLS servers' connections (issue 37), synced from their
	// counters at scrape time like the mismatches.
	tlsHandshakes, tlsResumptions, tlsQueries, tlsReused, tlsFailures *prometheus.CounterVec

	mu       sync.Mutex // guards the fields below, and orders mismatch syncs
	groups   []*Group
	retiring []*Group // replaced by a reload, still finishing attempts
	// seen is the Plain.Mismatches value already added to errors_total,
	// per group and server: the groups count rejected replies themselves,
	// and a reload replaces them with fresh ones that start again at 0.
	seen map[seenKey]uint64
	// seenScrubbed is the same for each group's scrubbed-record counts.
	seenScrubbed map[*Group][3]uint64
	// seenTLS is the same for TLS servers' connection counters.
	seenTLS map[seenKey]TLSStatus
}

type seenKey struct {
	group  *Group
	server string
}

// NewMetrics creates the upstream metrics; buckets are the bounds of the
// attempt duration histogram. Register the result on the registry that
// serves /metrics.
func NewMetrics(buckets []float64) *Metrics {
	return &Metrics{
		requests: counterVec("towerd_upstream_requests_total",
			"Queries sent to upstream servers (attempts; health probes excluded).",
			"zone", "server"),
		errors: counterVec("towerd_upstream_errors_total",
			"Failed upstream attempts by reason (timeout, servfail, refused, network, other), and replies dropped as not matching the query (mismatch).",
			"zone", "server", "reason"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "towerd_upstream_request_duration_seconds",
			Help:    "Duration of upstream attempts, failed ones included.",
			Buckets: buckets,
		}, []string{"zone", "server"}),
		up: serverGauge("towerd_upstream_up",
			"1 while the server is considered healthy, 0 while it is marked down and probed."),
		srtt: serverGauge("towerd_upstream_srtt_seconds",
			"Smoothed round-trip time of the server (RFC 6298), 0 before the first reply; the fastest up server is asked first."),
		tail: serverGauge("towerd_upstream_rtt_tail_seconds",
			"Tail estimate of the server's round-trip time (about its 98th percentile), 0 before the first reply; a first attempt unanswered by then is hedged."),
		hedges: counterVec("towerd_upstream_hedges_total",
			"Hedged misses by event: sent (a late first attempt asked again of the next server), won (the hedge's reply was the answer), refused (a hedge was due but the budget had no token), explore (another server asked beside the fastest, to measure it).",
			"zone", "event"),
		scrubbed: counterVec("towerd_upstream_scrubbed_records_total",
			"Records dropped from upstream replies before caching or relaying, by section (answer, authority, additional): not on the question's CNAME/DNAME chain, not pointed to, or outside the zone.",
			"section"),
		tlsHandshakes: counterVec("towerd_upstream_tls_handshakes_total",
			"TLS connections to DNS over TLS servers whose handshake completed (resumed ones included).",
			"zone", "server"),
		tlsResumptions: counterVec("towerd_upstream_tls_resumptions_total",
			"TLS handshakes to DNS over TLS servers that resumed a session instead of a full handshake.",
			"zone", "server"),
		tlsQueries: counterVec("towerd_upstream_tls_queries_total",
			"Queries sent to DNS over TLS servers, health probes included.",
			"zone", "server"),
		tlsReused: counterVec("towerd_upstream_tls_reused_total",
			"Queries to DNS over TLS servers sent on a connection already open (no handshake of their own).",
			"zone", "server"),
		tlsFailures: counterVec("towerd_upstream_tls_failures_total",
			"TLS connections that could not be made, by reason (certificate, name, not_tls, handshake_timeout, network); no query is sent in clear instead.",
			"zone", "server", "reason"),
		seenTLS:      map[seenKey]TLSStatus{},
		seen:         map[seenKey]uint64{},
		seenScrubbed: map[*Group][3]uint64{},
	}
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// serverGauge describes a gauge of each server that Collect reads from
// the groups.
func serverGauge(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"zone", "server"}, nil)
}

// Observer returns the GroupOptions.Observe hook for the group of zone.
// Each server's request counter and duration histogram are looked up by
// their labels once, on its first attempt, and kept (serverSeries): a
// lookup hashes the labels, twice per attempt otherwise. The hook lives
// as long as its group, and a server's series are deleted only once no
// group has it (retire), so what it keeps is never a deleted series.
func (m *Metrics) Observer(zone string) func(server string, d time.Duration, kind string) {
	var kept serverSeriesSet
	return func(server string, d time.Duration, kind string) {
		s, ok := kept.find(server)
		if !ok {
			s = kept.add(serverSeries{server: server, requests: m.requests.WithLabelValues(zone, server),
				duration: m.duration.WithLabelValues(zone, server)})
		}
		s.requests.Inc()
		if kind == KindSuperseded {
			// A packet sent, but neither answered nor failed: its sibling's
			// reply ended the resolution first.
			return
		}
		s.duration.Observe(d.Seconds())
		if kind != "" {
			m.errors.WithLabelValues(zone, server, kind).Inc()
		}
	}
}

// serverSeries is one server's series of an Observer.
type serverSeries struct {
	server   string
	requests prometheus.Counter
	duration prometheus.Observer
}

// serverSeriesSet is an Observer's series, by server: a few, read
// without a lock (copied when one is added).
type serverSeriesSet struct {
	mu   sync.Mutex
	list atomic.Pointer[[]serverSeries]
}

// find returns server's series, ok false when it has none yet.
func (k *serverSeriesSet) find(server string) (serverSeries, bool) {
	if list := k.list.Load(); list != nil {
		for _, s := range *list {
			if s.server == server {
				return s, true
			}
		}
	}
	return serverSeries{}, false
}

// add keeps s, unless its server's series were kept meanwhile: those
// are returned then.
func (k *serverSeriesSet) add(s serverSeries) serverSeries {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kept, ok := k.find(s.server); ok {
		return kept
	}
	var list []serverSeries
	if p := k.list.Load(); p != nil {
		list = slices.Clip(*p)
	}
	list = append(list, s)
	k.list.Store(&list)
	return s
}

// HedgeObserver returns the GroupOptions.OnHedge hook for the group of zone.
func (m *Metrics) HedgeObserver(zone string) func(event string) {
	return func(event string) { m.hedges.WithLabelValues(zone, event).Inc() }
}

// ChainObserver returns the GroupOptions.OnBrokenChain hook for the group
// of zone: a chain broken across zones is an error of reason "chain" of
// the server whose reply broke it, as one broken within a reply is.
func (m *Metrics) ChainObserver(zone string) func(server string) {
	return func(server string) { m.errors.WithLabelValues(zone, server, KindChain).Inc() }
}

// SetGroups makes groups the ones whose health is reported. The groups
// they replace may still finish attempts started before a reload, for up to
// grace (the upstream timeout): those are counted, rejected replies
// included, and only then are the series of servers no longer configured
// removed, so /metrics ends up showing what runs. grace runs on the old
// groups' clock (GroupOptions.Clock), the one their attempts run on.
func (m *Metrics) SetGroups(groups []*Group, grace time.Duration) {
	m.mu.Lock()
	old := m.groups
	m.groups = append([]*Group(nil), groups...)
	m.retiring = append(m.retiring, old...)
	m.mu.Unlock()
	if len(old) == 0 {
		return
	}
	if grace <= 0 {
		m.retire(old)
		return
	}
	old[0].opts.Clock.AfterFunc(grace, func() { m.retire(old) })
}

// retire stops following old groups once they can no longer be asked.
func (m *Metrics) retire(old []*Group) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncMismatchesLocked()
	for _, g := range old {
		delete(m.seenScrubbed, g)
	}
	m.retiring = slices.DeleteFunc(m.retiring, func(g *Group) bool { return slices.Contains(old, g) })
	for _, g := range old {
		for _, s := range g.servers {
			addr := s.plain.Address()
			delete(m.seen, seenKey{g, addr})
			delete(m.seenTLS, seenKey{g, addr})
			if configured(m.groups, g.name, addr) || configured(m.retiring, g.name, addr) {
				continue
			}
			labels := prometheus.Labels{"zone": g.name, "server": addr}
			m.requests.Delete(labels)
			m.duration.Delete(labels)
			m.errors.DeletePartialMatch(labels)
			for _, v := range m.tlsVecs() {
				v.DeletePartialMatch(labels)
			}
		}
	}
}

// configured reports whether groups has server addr in zone.
func configured(groups []*Group, zone, addr string) bool {
	for _, g := range groups {
		if g.name != zone {
			continue
		}
		for _, s := range g.servers {
			if s.plain.Address() == addr {
				return true
			}
		}
	}
	return false
}

// syncMismatchesLocked adds the rejected replies counted since the last
// sync to errors_total, and the scrubbed records to scrubbed_records_total.
func (m *Metrics) syncMismatchesLocked() {
	for _, g := range slices.Concat(m.groups, m.retiring) {
		for _, s := range g.servers {
			addr := s.plain.Address()
			key := seenKey{g, addr}
			now := s.plain.Mismatches()
			if delta := now - m.seen[key]; delta > 0 {
				m.errors.WithLabelValues(g.name, addr, ReasonMismatch).Add(float64(delta))
			}
			m.seen[key] = now
			if s.tls != nil {
				m.syncTLSLocked(key, g.name, addr, s.tls.status())
			}
		}
		seen := m.seenScrubbed[g]
		for section := range seen {
			now := g.scrubbed[section].Load()
			if delta := now - seen[section]; delta > 0 {
				m.scrubbed.WithLabelValues(sectionNames[section]).Add(float64(delta))
			}
			seen[section] = now
		}
		m.seenScrubbed[g] = seen
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
	ch <- m.up
	ch <- m.srtt
	ch <- m.tail
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	m.syncMismatchesLocked()
	groups := m.groups
	m.mu.Unlock()

	for _, v := range m.vecs() {
		v.Collect(ch)
	}
	for _, g := range groups {
		for _, st := range g.Servers() {
			up := 0.0
			if st.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up, g.name, st.Address)
			ch <- prometheus.MustNewConstMetric(m.srtt, prometheus.GaugeValue, st.SRTT.Seconds(), g.name, st.Address)
			ch <- prometheus.MustNewConstMetric(m.tail, prometheus.GaugeValue, st.Tail.Seconds(), g.name, st.Address)
		}
	}
}

// vecs are the metrics Metrics keeps series of; up, srtt and tail are
// read from the groups at each scrape.
func (m *Metrics) vecs() []prometheus.Collector {
	vecs := []prometheus.Collector{m.requests, m.errors, m.duration, m.scrubbed, m.hedges}
	for _, v := range m.tlsVecs() {
		vecs = append(vecs, v)
	}
	return vecs
}

func (m *Metrics) tlsVecs() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.tlsHandshakes, m.tlsResumptions, m.tlsQueries, m.tlsReused, m.tlsFailures}
}

// syncTLSLocked adds a TLS server's connection counts since the last sync.
func (m *Metrics) syncTLSLocked(key seenKey, zone, addr string, now *TLSStatus) {
	seen := m.seenTLS[key]
	add := func(v *prometheus.CounterVec, now, seen uint64, labels ...string) {
		// Touched even at 0, so the series exist from the first scrape.
		v.WithLabelValues(append([]string{zone, addr}, labels...)...).Add(float64(now - seen))
	}
	add(m.tlsHandshakes, now.Handshakes, seen.Handshakes)
	add(m.tlsResumptions, now.Resumptions, seen.Resumptions)
	add(m.tlsQueries, now.Queries, seen.Queries)
	add(m.tlsReused, now.Reused, seen.Reused)
	for _, reason := range TLSFailureReasons {
		add(m.tlsFailures, now.Failures[reason], seen.Failures[reason], reason)
	}
	m.seenTLS[key] = *now
}
