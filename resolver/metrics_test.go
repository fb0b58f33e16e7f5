package resolver

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// metricsEnv is newEnv with Metrics as the handler's observer, instrumented
// on a registry of its own.
func metricsEnv(t *testing.T, tweak func(*Config)) (*env, *Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := buildEnv(t, tweak, m, func(h *Handler, srv *Server) {
		if err := m.Instrument(h, srv); err != nil {
			t.Fatal(err)
		}
	})
	return e, m, reg
}

// Each answer is counted once, by its source and rcode, before the client
// has it: the counts can be read the moment the reply is in.
func TestMetricsCountEveryAnswerBySource(t *testing.T) {
	e, m, _ := metricsEnv(t, nil)
	e.query("a.example.") // miss: upstream
	e.query("a.example.") // fresh hit
	e.query("a.example.") // fresh hit
	e.up.mode.Store("nxdomain")
	e.query("gone.example.") // NXDOMAIN from upstream
	e.up.mode.Store("servfail")
	e.clock.Advance(time.Hour)
	e.query("a.example.")      // expired, refresh fails: stale
	e.query("never.example.")  // nothing to fall back on: SERVFAIL
	r := e.query("a.example.") // failure recheck: stale without asking
	if r.Rcode != dns.RcodeSuccess || ttlOf(t, r) != 30 {
		t.Fatalf("last answer: rcode %s TTL %d, want the stale NOERROR with TTL 30", dns.RcodeToString[r.Rcode], ttlOf(t, r))
	}

	for _, tc := range []struct {
		source, rcode string
		want          float64
	}{
		{SourceUpstream, "NOERROR", 1},
		{SourceCache, "NOERROR", 2},
		{SourceUpstream, "NXDOMAIN", 1},
		{SourceStale, "NOERROR", 2},
		{SourceUpstream, "SERVFAIL", 1},
	} {
		if got := testutil.ToFloat64(m.responses.WithLabelValues(".", tc.source, tc.rcode)); got != tc.want {
			t.Errorf("responses{source=%q,rcode=%q} = %v, want %v", tc.source, tc.rcode, got, tc.want)
		}
	}
	if got := testutil.CollectAndCount(m.responses); got != 5 {
		t.Errorf("responses: %d series, want the 5 above", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("udp", "A")); got != 7 {
		t.Errorf("requests{udp,A} = %v, want 7", got)
	}
	if got := testutil.CollectAndCount(m.duration); got != 3 {
		t.Errorf("duration histograms: %d sources, want 3 (upstream, cache, stale)", got)
	}
	if got := testutil.ToFloat64(m.prefetches); got != 0 {
		t.Errorf("prefetches = %v, want 0", got)
	}
}

// A hit in the last tenth of the TTL counts one prefetch.
func TestMetricsCountPrefetches(t *testing.T) {
	e, m, _ := metricsEnv(t, nil)
	e.query("pre.example.")
	e.clock.Advance(291 * time.Second) // 9 s left of 300
	e.query("pre.example.")
	if got := testutil.ToFloat64(m.prefetches); got != 1 {
		t.Errorf("prefetches = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.responses.WithLabelValues(".", SourceCache, "NOERROR")); got != 1 {
		t.Errorf("cache answers = %v, want 1", got)
	}
}

// Clients outside the allow-list are answered by towerd itself: source local.
func TestMetricsCountLocalAnswers(t *testing.T) {
	e, m, _ := metricsEnv(t, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} })
	if r := e.query("x.example."); r.Rcode != dns.RcodeRefused {
		t.Fatalf("rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if got := testutil.ToFloat64(m.responses.WithLabelValues(".", SourceLocal, "REFUSED")); got != 1 {
		t.Errorf("responses{local,REFUSED} = %v, want 1", got)
	}
	if n := e.up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries, want 0", n)
	}
}

// The in-flight gauges and the rejection counter follow the cap.
func TestMetricsInflightRejections(t *testing.T) {
	e, _, reg := metricsEnv(t, func(c *Config) { c.MaxInflight = 1 })
	e.up.mode.Store("hold")
	released := sync.OnceFunc(func() { close(e.up.release) })
	t.Cleanup(released)

	done := make(chan *dns.Msg)
	go func() { done <- e.query("first.example.") }()
	<-e.up.arrived // the one slot is taken
	for range 2 {
		if r := e.query("second.example."); r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("over the cap: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
		}
	}
	want := `
# HELP towerd_inflight_rejections_total Queries and prefetches that found the in-flight cap full.
# TYPE towerd_inflight_rejections_total counter
towerd_inflight_rejections_total 2
# HELP towerd_inflight_resolutions Upstream resolutions running now (identical questions share one).
# TYPE towerd_inflight_resolutions gauge
towerd_inflight_resolutions 1
# HELP towerd_inflight_resolutions_limit The in-flight cap (upstream.max_inflight); past it queries are answered stale or SERVFAIL at once.
# TYPE towerd_inflight_resolutions_limit gauge
towerd_inflight_resolutions_limit 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"towerd_inflight_rejections_total", "towerd_inflight_resolutions", "towerd_inflight_resolutions_limit"); err != nil {
		t.Error(err)
	}
	released()
	if r := <-done; r.Rcode != dns.RcodeSuccess {
		t.Fatalf("first query: rcode %s", dns.RcodeToString[r.Rcode])
	}
	if got := e.h.InflightRejections(); got != 2 {
		t.Errorf("InflightRejections = %d, want 2", got)
	}
}

func TestQtypeLabels(t *testing.T) {
	for _, tc := range []struct {
		qtype uint16
		want  string
	}{
		{dns.TypeA, "A"}, {dns.TypeAAAA, "AAAA"}, {dns.TypeSRV, "SRV"},
		{dns.TypeHTTPS, "HTTPS"}, {dns.TypeNAPTR, "other"}, {0, "other"}, {65000, "other"},
	} {
		if got := QtypeLabel(tc.qtype); got != tc.want {
			t.Errorf("QtypeLabel(%d) = %q, want %q", tc.qtype, got, tc.want)
		}
	}
}

// towerd_cache_prefetches_total counts refreshes started, not hits in the
// prefetch window: three hits while one refresh runs count one (issue 16).
func TestMetricsPrefetchesEqualRefreshesStarted(t *testing.T) {
	e, m, _ := metricsEnv(t, nil)
	e.query("pre.example.")
	<-e.up.arrived // the miss
	e.up.mode.Store("hold")
	released := sync.OnceFunc(func() { close(e.up.release) })
	t.Cleanup(released)

	e.clock.Advance(291 * time.Second) // 9 s left of 300: inside the window
	for range 3 {
		e.query("pre.example.") // fast-path hits over UDP
	}
	<-e.up.arrived // the one refresh
	started := e.up.queries.Load() - 1
	if got := testutil.ToFloat64(m.prefetches); got != float64(started) || started != 1 {
		t.Errorf("prefetches = %v, refreshes started = %d; want both 1", got, started)
	}
	if got := testutil.ToFloat64(m.responses.WithLabelValues(".", SourceCache, "NOERROR")); got != 3 {
		t.Errorf("cache answers = %v, want 3", got)
	}
}
