package admin

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/consul"
	"github.com/towerd/towerd/upstream"
)

// ownMetrics are the families towerd itself exposes; the Consul watch adds
// its towerd_consul_watch_* ones.
var ownMetrics = []string{
	"towerd_build_info",
	"towerd_requests_total", "towerd_responses_total", "towerd_request_duration_seconds",
	"towerd_cache_entries", "towerd_cache_capacity_entries", "towerd_cache_hits_total",
	"towerd_cache_misses_total", "towerd_cache_expired_lookups_total", "towerd_cache_evictions_total",
	"towerd_cache_stores_total", "towerd_cache_store_refusals_total", "towerd_cache_prefetches_total",
	"towerd_upstream_requests_total", "towerd_upstream_errors_total", "towerd_upstream_request_duration_seconds",
	"towerd_upstream_up", "towerd_upstream_srtt_seconds", "towerd_upstream_rtt_tail_seconds", "towerd_upstream_hedges_total",
	"towerd_inflight_resolutions", "towerd_inflight_resolutions_limit", "towerd_inflight_rejections_total",
	"towerd_invalid_packets_total",
	"towerd_search_answers_total", "towerd_search_ahead_queries_total", "towerd_search_ahead_skipped_total",
	"towerd_tcp_connections", "towerd_tcp_connections_limit", "towerd_tcp_connections_closed_total", "towerd_tcp_accept_errors_total",
	"towerd_config_reloads_total", "towerd_config_last_reload_successful", "towerd_config_last_reload_success_timestamp_seconds",
	"towerd_cache_saves_total", "towerd_cache_last_save_success_timestamp_seconds",
	"towerd_control_refused_total",
}

// gatherEverything wires a registry the way the daemon does, with a Consul
// watch that is never run, and makes every family show at least one series.
func gatherEverything(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	c, err := cache.New(cache.Config{Capacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	tel := NewTelemetry(c, time.Now(), "test")
	// Nothing is ever sent to these addresses: the test drives the hooks.
	g, err := upstream.NewGroup(".", []string{"192.0.2.53:53"}, upstream.GroupOptions{Observe: tel.Upstreams.Observer(".")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	tel.Upstreams.SetGroups([]*upstream.Group{g}, 0)
	observe := tel.Upstreams.Observer(".")
	observe("192.0.2.53:53", 3*time.Millisecond, "")
	observe("192.0.2.53:53", 400*time.Millisecond, upstream.KindTimeout)
	tel.Upstreams.HedgeObserver(".")(upstream.HedgeSent)

	h, err := resolver.NewHandler(resolver.Config{Zones: []resolver.Zone{{Name: ".", Upstream: g}}}, c, nil, tel.Resolver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := tel.Resolver.Instrument(h, &resolver.Server{}); err != nil {
		t.Fatal(err)
	}
	tel.Resolver.ObserveQuery(resolver.Query{Proto: "udp", Qtype: dns.TypeA, Zone: ".",
		Source: resolver.SourceCache, Rcode: dns.RcodeSuccess, Duration: 80 * time.Microsecond, Prefetch: true})
	tel.RecordReload(time.Now(), nil)
	tel.RecordCacheSave(time.Now(), nil)

	w, err := consul.New(consul.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	tel.reg.MustRegister(consul.NewCollector(w))

	mfs, err := tel.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// Every metric /metrics exposes, towerd's own and the Go and process
// collectors', passes promlint: names, units, _total on counters, help.
func TestPromlintEveryMetric(t *testing.T) {
	mfs := gatherEverything(t)
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range ownMetrics {
		if !have[name] {
			t.Errorf("%s is not exposed", name)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	t.Logf("%d metric families linted", len(mfs))
}

// metricName matches a whole token that may be a metric or rule name.
var metricName = regexp.MustCompile(`[a-z_:]*towerd_[a-z0-9_:]*`)

// exposedName maps a series name to its family: histogram series carry
// _bucket, _sum and _count.
func exposedName(name string, have map[string]bool) bool {
	if have[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && have[base] {
			return true
		}
	}
	return false
}

// The alert rules and the dashboard only use metrics towerd exposes (a
// renamed metric would silence an alert without anyone noticing). That
// the manual documents every metric, and no other, is
// daemon.TestManualMetrics's, over a real daemon's registry.
func TestMonitoringMatchesMetrics(t *testing.T) {
	have := map[string]bool{}
	for _, mf := range gatherEverything(t) {
		have[mf.GetName()] = true
	}
	for _, file := range []string{"towerd.rules.yml", "towerd.rules.test.yml", "grafana-dashboard.json"} {
		data, err := os.ReadFile("../../../../monitoring/" + file)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, name := range metricName.FindAllString(string(data), -1) {
			if strings.Contains(name, ":") {
				continue // a recording rule's own name
			}
			used[name] = true
		}
		if len(used) == 0 {
			t.Errorf("%s uses no towerd metric", file)
		}
		for name := range used {
			if !exposedName(name, have) {
				t.Errorf("%s uses %s, which towerd does not expose", file, name)
			}
		}
	}

}
