package admin

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/towerd/towerd/upstream"
)

// Report is the /stats document; `towerd stats` decodes it. Counts are
// since start-up; latencies are estimated from the histogram buckets the way
// Prometheus's histogram_quantile does, so they match the dashboard.
type Report struct {
	Version        string        `json:"version"`
	GoVersion      string        `json:"go_version"` // the toolchain that built this towerd
	LogQueries     bool          `json:"log_queries"`
	Started        time.Time     `json:"started"`
	UptimeSeconds  float64       `json:"uptime_seconds"`
	Ready          bool          `json:"ready"`
	Config         configSummary `json:"config"`
	Queries        queryStats    `json:"queries"`
	Cache          cacheStats    `json:"cache"`
	Inflight       inflightStats `json:"inflight"`
	InvalidPackets uint64        `json:"invalid_packets"`
	Zones          []zoneStats   `json:"zones"`
	Upstreams      []serverStats `json:"upstreams"`
	ConsulWatch    *WatchStatus  `json:"consul_watch"` // null while no watch runs
	LastReload     *ReloadStatus `json:"last_reload"`  // null before the first SIGHUP
}

// configSummary is the running configuration in brief.
type configSummary struct {
	File         string        `json:"file"`
	Listen       []string      `json:"listen"`
	Allow        []string      `json:"allow"`
	Zones        []zoneSummary `json:"zones"`
	CacheSize    int           `json:"cache_size"`
	MinTTL       string        `json:"cache_min_ttl"`
	MaxTTL       string        `json:"cache_max_ttl"`
	Prefetch     bool          `json:"prefetch"`
	ServeStale   bool          `json:"serve_stale"`
	StaleMaxAge  string        `json:"stale_max_age"`
	QueryTimeout string        `json:"query_timeout"`
	MaxInflight  int           `json:"max_inflight"`
	AdminListen  string        `json:"admin_listen"`
	ConfigLoaded time.Time     `json:"config_loaded"`
}

// zoneSummary is one zone and the servers it forwards to.
type zoneSummary struct {
	Name    string   `json:"name"`
	Servers []string `json:"servers"`
}

type queryStats struct {
	Total             uint64            `json:"total"`
	BySource          map[string]uint64 `json:"by_source"`
	ByRcode           map[string]uint64 `json:"by_rcode"`
	LatencyP50Seconds float64           `json:"latency_p50_seconds"`
	LatencyP99Seconds float64           `json:"latency_p99_seconds"`
}

type cacheStats struct {
	Entries      uint64  `json:"entries"`
	Capacity     uint64  `json:"capacity"`
	HitRatio     float64 `json:"hit_ratio"`
	Hits         uint64  `json:"hits"`
	Misses       uint64  `json:"misses"`
	StaleAnswers uint64  `json:"stale_answers"`
	Prefetches   uint64  `json:"prefetches"`
	Evictions    uint64  `json:"evictions"`
}

type inflightStats struct {
	Now        uint64 `json:"now"`
	Limit      uint64 `json:"limit"`
	Rejections uint64 `json:"rejections"`
}

// zoneStats sums a zone's client answers and its servers' attempts.
type zoneStats struct {
	Name              string            `json:"name"`
	Queries           uint64            `json:"queries"`
	StaleAnswers      uint64            `json:"stale_answers"`
	ServFail          uint64            `json:"servfail_answers"`
	UpstreamRequests  uint64            `json:"upstream_requests"`
	Errors            map[string]uint64 `json:"upstream_errors"`
	Timeouts          uint64            `json:"upstream_timeouts"`
	LatencyP50Seconds float64           `json:"upstream_latency_p50_seconds"`
	LatencyP99Seconds float64           `json:"upstream_latency_p99_seconds"`
	// Hedges are the zone's hedged misses by event (sent, won, refused).
	Hedges    map[string]uint64 `json:"hedges"`
	ServersUp int               `json:"servers_up"`
	Servers   int               `json:"servers"`
}

type serverStats struct {
	Zone              string            `json:"zone"`
	Server            string            `json:"server"`
	Up                bool              `json:"up"`
	Requests          uint64            `json:"requests"`
	Errors            map[string]uint64 `json:"errors"`
	Timeouts          uint64            `json:"timeouts"`
	LatencyP50Seconds float64           `json:"latency_p50_seconds"`
	LatencyP99Seconds float64           `json:"latency_p99_seconds"`
	SRTTSeconds       float64           `json:"srtt_seconds"`
	TailSeconds       float64           `json:"rtt_tail_seconds"`
}

// WatchStatus is the Consul watch's state as /stats shows it.
type WatchStatus struct {
	State       string    `json:"state"` // e.g. "watching", "erroring"
	Services    int       `json:"services"`
	LastIndex   uint64    `json:"last_index"`
	LastSuccess time.Time `json:"last_success"`
	Errors      uint64    `json:"errors"`
	LastError   string    `json:"last_error,omitempty"`
	// The watch set (issue 12): mode "demand" or "catalog", services
	// watched and pinned, the cap and the cap in force, evictions by
	// reason, the agent's 429s.
	Mode          string            `json:"mode,omitempty"`
	Watched       int               `json:"watched"`
	Pinned        int               `json:"pinned"`
	MaxWatches    int               `json:"max_watches"`
	Limit         int               `json:"limit"`
	CatalogCapped bool              `json:"catalog_capped,omitempty"`
	Evictions     map[string]uint64 `json:"evictions,omitempty"`
	Agent429s     uint64            `json:"agent_429s"`
	// Admission (issue 24): admissions refused by reason (frequency,
	// streams, pinned), first reads that found no instance and the names
	// kept out now, the agent's streaming views for this node and their
	// bound, resyncs after the agent came back, bodies over their bound.
	Refused         map[string]uint64 `json:"refused,omitempty"`
	EmptyReads      uint64            `json:"empty_reads"`
	KeptOut         int               `json:"kept_out"`
	AgentViews      int               `json:"agent_views"`
	AgentViewsLimit int               `json:"agent_views_limit"`
	Resyncs         uint64            `json:"resyncs"`
	OversizeBodies  uint64            `json:"oversize_bodies"`
}

// report builds the /stats document.
func (a *Server) report() (Report, error) {
	mfs, err := a.tel.reg.Gather()
	if err != nil {
		return Report{}, fmt.Errorf("gathering metrics: %w", err)
	}
	v := a.view.Load()
	r := buildReport(indexFamilies(mfs), v.Groups)
	now := a.now()
	r.Version = a.version
	r.GoVersion = runtime.Version()
	r.LogQueries = a.handler.LogQueries()
	r.Started = a.tel.started
	r.UptimeSeconds = now.Sub(a.tel.started).Seconds()
	r.Ready = a.ready.Load()
	r.Config = summarize(v)
	r.Config.AdminListen = a.addr // port 0 resolved
	r.ConsulWatch = a.tel.watchState()
	if st, ok := a.tel.reloadState(); ok {
		r.LastReload = &st
	}
	return r, nil
}

func summarize(v *View) configSummary {
	c := v.Config
	s := configSummary{
		File: v.File, Listen: c.Listen, Allow: c.Allow,
		CacheSize: c.Cache.Size, MinTTL: c.Cache.MinTTL.String(), MaxTTL: c.Cache.MaxTTL.String(),
		Prefetch: c.Cache.Prefetch, ServeStale: c.ServeStale.Enabled, StaleMaxAge: c.ServeStale.MaxAge.String(),
		QueryTimeout: c.QueryTimeout.String(), MaxInflight: c.Upstream.MaxInflight,
		AdminListen: c.Admin.Listen, ConfigLoaded: v.LoadedAt,
	}
	for _, g := range v.Groups {
		z := zoneSummary{Name: g.Address()}
		for _, st := range g.Servers() {
			z.Servers = append(z.Servers, st.Address)
		}
		s.Zones = append(s.Zones, z)
	}
	return s
}

// families indexes one Gather by metric name. The /stats figures are read
// back from the registry rather than counted a second time, so /stats and
// /metrics can never disagree.
type families map[string]*dto.MetricFamily

func indexFamilies(mfs []*dto.MetricFamily) families {
	f := make(families, len(mfs))
	for _, mf := range mfs {
		f[mf.GetName()] = mf
	}
	return f
}

// labelsMatch reports whether m carries every label of want.
func labelsMatch(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// sum adds the values of the name's series that match want.
func (f families) sum(name string, want map[string]string) uint64 {
	var total float64
	for _, m := range f[name].GetMetric() {
		if labelsMatch(m, want) {
			total += value(m)
		}
	}
	return uint64(math.Round(total))
}

// by sums the matching series of name per value of label.
func (f families) by(name, label string, want map[string]string) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range f[name].GetMetric() {
		if !labelsMatch(m, want) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out[lp.GetValue()] += uint64(math.Round(value(m)))
			}
		}
	}
	return out
}

// quantiles merges the matching histograms of name and estimates each q.
func (f families) quantiles(name string, want map[string]string, qs ...float64) []float64 {
	var bounds []float64
	counts := map[float64]uint64{} // cumulative count per upper bound
	var total uint64
	for _, m := range f[name].GetMetric() {
		h := m.GetHistogram()
		if h == nil || !labelsMatch(m, want) {
			continue
		}
		total += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			if _, ok := counts[b.GetUpperBound()]; !ok {
				bounds = append(bounds, b.GetUpperBound())
			}
			counts[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	sort.Float64s(bounds)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = bucketQuantile(q, bounds, counts, total)
	}
	return out
}

// bucketQuantile interpolates linearly inside the bucket holding rank
// q·total, as histogram_quantile does; past the last finite bound it
// answers that bound (client_golang leaves the +Inf bucket implicit, in
// total). With no samples it is 0.
func bucketQuantile(q float64, bounds []float64, cumulative map[float64]uint64, total uint64) float64 {
	if total == 0 || len(bounds) == 0 {
		return 0
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, ub := range bounds {
		c := cumulative[ub]
		if float64(c) >= rank && c > below {
			if math.IsInf(ub, 1) {
				return lower
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = ub, c
	}
	return bounds[len(bounds)-1]
}

// buildReport fills the counters and latencies of a report from one Gather
// and the groups' live state; the caller adds what is not a metric.
func buildReport(f families, groups []*upstream.Group) Report {
	var r Report
	r.Queries = queryStats{
		Total:    f.sum("towerd_responses_total", nil),
		BySource: f.by("towerd_responses_total", "source", nil),
		ByRcode:  f.by("towerd_responses_total", "rcode", nil),
	}
	lat := f.quantiles("towerd_request_duration_seconds", nil, 0.5, 0.99)
	r.Queries.LatencyP50Seconds, r.Queries.LatencyP99Seconds = lat[0], lat[1]

	c := cacheStats{
		Entries:      f.sum("towerd_cache_entries", nil),
		Capacity:     f.sum("towerd_cache_capacity_entries", nil),
		Hits:         f.sum("towerd_cache_hits_total", nil),
		Misses:       f.sum("towerd_cache_misses_total", nil),
		StaleAnswers: f.sum("towerd_responses_total", map[string]string{"source": "stale"}),
		Prefetches:   f.sum("towerd_cache_prefetches_total", nil),
		Evictions:    f.sum("towerd_cache_evictions_total", nil),
	}
	if lookups := c.Hits + c.Misses; lookups > 0 {
		c.HitRatio = float64(c.Hits) / float64(lookups)
	}
	r.Cache = c
	r.Inflight = inflightStats{
		Now:        f.sum("towerd_inflight_resolutions", nil),
		Limit:      f.sum("towerd_inflight_resolutions_limit", nil),
		Rejections: f.sum("towerd_inflight_rejections_total", nil),
	}
	r.InvalidPackets = f.sum("towerd_invalid_packets_total", nil)

	for _, g := range groups {
		zone := g.Address()
		inZone := map[string]string{"zone": zone}
		z := zoneStats{
			Name:             zone,
			Queries:          f.sum("towerd_responses_total", inZone),
			StaleAnswers:     f.sum("towerd_responses_total", map[string]string{"zone": zone, "source": "stale"}),
			ServFail:         f.sum("towerd_responses_total", map[string]string{"zone": zone, "rcode": "SERVFAIL"}),
			UpstreamRequests: f.sum("towerd_upstream_requests_total", inZone),
			Errors:           f.by("towerd_upstream_errors_total", "reason", inZone),
			Hedges:           f.by("towerd_upstream_hedges_total", "event", inZone),
		}
		z.Timeouts = z.Errors[upstream.KindTimeout]
		lat := f.quantiles("towerd_upstream_request_duration_seconds", inZone, 0.5, 0.99)
		z.LatencyP50Seconds, z.LatencyP99Seconds = lat[0], lat[1]
		for _, st := range g.Servers() {
			one := map[string]string{"zone": zone, "server": st.Address}
			s := serverStats{
				Zone: zone, Server: st.Address, Up: st.Up,
				Requests:    f.sum("towerd_upstream_requests_total", one),
				Errors:      f.by("towerd_upstream_errors_total", "reason", one),
				SRTTSeconds: st.SRTT.Seconds(),
				TailSeconds: st.Tail.Seconds(),
			}
			s.Timeouts = s.Errors[upstream.KindTimeout]
			lat := f.quantiles("towerd_upstream_request_duration_seconds", one, 0.5, 0.99)
			s.LatencyP50Seconds, s.LatencyP99Seconds = lat[0], lat[1]
			r.Upstreams = append(r.Upstreams, s)
			z.Servers++
			if st.Up {
				z.ServersUp++
			}
		}
		r.Zones = append(r.Zones, z)
	}
	return r
}
