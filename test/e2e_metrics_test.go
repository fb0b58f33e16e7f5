package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestMetricsAfterScriptedMix drives the real binary with dig through a known
// mix of cache hits, misses, NXDOMAIN, stale answers and upstream timeouts,
// then checks that /metrics, /stats and `towerd stats` report exactly those
// counts. One attempt per resolution (upstream.max_attempts = 1) makes every
// timeout one packet; an attempt is counted when its resolution ends, which
// upstream.timeout = 1s puts before the client's 1.8 s timers; and every
// answer is counted before it is written, so the figures are final the
// moment dig has its reply.
func TestMetricsAfterScriptedMix(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t,
		"a.example. 300 IN A 192.0.2.1",
		"b.example. 300 IN A 192.0.2.2",
		"z1.example. 0 IN A 192.0.2.3", // TTL 0: stored expired, stale material only
		"z2.example. 0 IN A 192.0.2.4",
	)
	path := writeConfig(t, "[upstream]\ntimeout = \"1s\"\nmax_attempts = 1\nfail_threshold = 100\n"+zonesFor(def, consul))
	d := startTowerd(t, "-config", path, "-listen", "127.0.0.1:0")
	if d.Admin == "" {
		t.Fatal("no admin server address in the log")
	}

	ask := func(name, wantStatus string) {
		t.Helper()
		if r := dig(t, d.UDP, name, "A"); r.Status != wantStatus {
			t.Fatalf("%s: status %s, want %s\n%s", name, r.Status, wantStatus, r.Output)
		}
	}
	// While the upstream answers: 4 misses that fill the cache, 4 hits, and
	// 2 NXDOMAIN (never cached, so both are misses).
	for _, name := range []string{"a.example.", "a.example.", "a.example.", "a.example.", "b.example.", "b.example."} {
		ask(name, "NOERROR")
	}
	ask("nx.example.", "NXDOMAIN")
	ask("nx.example.", "NXDOMAIN")
	ask("z1.example.", "NOERROR")
	ask("z2.example.", "NOERROR")

	// The upstream goes silent. z1 times out once and is then served stale
	// without asking again (failure recheck); z2 times out and is served
	// stale; a name never seen times out and gets SERVFAIL.
	def.Stop()
	hole := newBlackhole(t, def.Addr)
	for _, name := range []string{"z1.example.", "z1.example.", "z1.example.", "z2.example."} {
		ask(name, "NOERROR")
	}
	ask("never.example.", "SERVFAIL")
	if got := hole.packets.Load(); got != 3 {
		t.Errorf("the silent upstream got %d queries, want 3 (one per timed-out resolution)", got)
	}

	body, mfs := scrape(t, d.Admin)
	lintMetrics(t, body)
	zone := map[string]string{"zone": "."}
	server := map[string]string{"zone": ".", "server": def.Addr}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"towerd_requests_total", map[string]string{"proto": "udp", "qtype": "A"}, 15},
		{"towerd_responses_total", nil, 15},
		{"towerd_responses_total", map[string]string{"zone": ".", "source": "cache", "rcode": "NOERROR"}, 4},
		{"towerd_responses_total", map[string]string{"zone": ".", "source": "upstream", "rcode": "NOERROR"}, 4},
		{"towerd_responses_total", map[string]string{"zone": ".", "source": "upstream", "rcode": "NXDOMAIN"}, 2},
		{"towerd_responses_total", map[string]string{"zone": ".", "source": "upstream", "rcode": "SERVFAIL"}, 1},
		{"towerd_responses_total", map[string]string{"zone": ".", "source": "stale", "rcode": "NOERROR"}, 4},
		{"towerd_request_duration_seconds_count", map[string]string{"source": "cache"}, 4},
		{"towerd_request_duration_seconds_count", map[string]string{"source": "upstream"}, 7},
		{"towerd_request_duration_seconds_count", map[string]string{"source": "stale"}, 4},
		{"towerd_cache_hits_total", nil, 4},
		{"towerd_cache_misses_total", nil, 11}, // 7 with nothing cached, 4 with only an expired entry
		{"towerd_cache_expired_lookups_total", nil, 4},
		{"towerd_cache_entries", nil, 4},
		{"towerd_cache_stores_total", nil, 4},
		{"towerd_cache_evictions_total", nil, 0},
		{"towerd_cache_prefetches_total", nil, 0},
		{"towerd_upstream_requests_total", server, 9},
		{"towerd_upstream_requests_total", map[string]string{"zone": "consul."}, 0},
		{"towerd_upstream_errors_total", server, 3},
		{"towerd_upstream_errors_total", map[string]string{"zone": ".", "reason": "timeout"}, 3},
		{"towerd_upstream_request_duration_seconds_count", zone, 9},
		{"towerd_upstream_up", server, 1},
		{"towerd_inflight_rejections_total", nil, 0},
		{"towerd_inflight_resolutions_limit", nil, 150},
	} {
		if got := sample(mfs, tc.name, tc.labels); got != tc.want {
			t.Errorf("/metrics %s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	s := readStats(t, d.Admin)
	if s.Queries.Total != 15 || s.Queries.BySource["cache"] != 4 || s.Queries.BySource["upstream"] != 7 ||
		s.Queries.BySource["stale"] != 4 || s.Queries.ByRcode["NOERROR"] != 12 || s.Queries.ByRcode["NXDOMAIN"] != 2 ||
		s.Queries.ByRcode["SERVFAIL"] != 1 {
		t.Errorf("/stats queries: %+v", s.Queries)
	}
	c := s.Cache
	if c.Hits != 4 || c.Misses != 11 || c.StaleAnswers != 4 || c.Entries != 4 || c.Capacity != 10000 ||
		c.Prefetches != 0 || c.Evictions != 0 || fmt.Sprintf("%.4f", c.HitRatio) != "0.2667" {
		t.Errorf("/stats cache: %+v; want 4 hits, 11 misses (ratio 4/15), 4 stale, 4 of 10000 entries", c)
	}
	if len(s.Zones) != 2 || len(s.Upstreams) != 2 {
		t.Fatalf("/stats: %d zones and %d upstreams, want 2 of each", len(s.Zones), len(s.Upstreams))
	}
	for _, z := range s.Zones {
		if z.Name != "." {
			continue
		}
		if z.Queries != 15 || z.StaleAnswers != 4 || z.ServFail != 1 || z.UpstreamRequests != 9 ||
			z.Timeouts != 3 || len(z.Errors) != 1 {
			t.Errorf("/stats zone .: %+v", z)
		}
	}
	for _, u := range s.Upstreams {
		if u.Server == def.Addr && (u.Zone != "." || u.Requests != 9 || u.Timeouts != 3 || !u.Up) {
			t.Errorf("/stats upstream %s: %+v", def.Addr, u)
		}
	}
	if !s.Ready || s.Inflight.Limit != 150 || s.LastReload != nil {
		t.Errorf("/stats: ready %v, in-flight %+v, last reload %+v", s.Ready, s.Inflight, s.LastReload)
	}

	// towerd stats, for humans and for scripts.
	code, out, errOut := runToExit(t, "stats", "-admin", d.Admin)
	if code != 0 {
		t.Fatalf("towerd stats: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"queries      15  (upstream 7, cache 4, stale 4)",
		"rcodes       NOERROR 12, NXDOMAIN 2, SERVFAIL 1",
		"hit ratio 26.7% (4 hits, 11 misses)  stale answers 4",
		"upstreams    " + def.Addr,
		"errors: timeout 3",
		"consul watch not running",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("towerd stats lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runToExit(t, "stats", "-admin", d.Admin, "--json")
	var again statsDoc
	if err := json.Unmarshal([]byte(out), &again); code != 0 || err != nil || again.Cache.Hits != 4 {
		t.Errorf("towerd stats --json: exit %d, %v, hits %d", code, err, again.Cache.Hits)
	}

	// What is cached for a name, and forgetting it.
	var inspect struct {
		Entries []struct {
			State  string `json:"state"`
			Source string `json:"source"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(controlGet(t, d.Control, "/cache?name=z1.example&type=A"), &inspect); err != nil ||
		len(inspect.Entries) != 1 || inspect.Entries[0].State != "stale" || inspect.Entries[0].Source != "upstream zone ." {
		t.Errorf("/cache z1.example: %+v, %v; want one stale entry from zone .", inspect, err)
	}
	if code, body := controlPost(t, d.Control, "/cache/flush", url.Values{"name": {"a.example."}}); code != 200 ||
		!strings.Contains(body, `"removed": 1`) {
		t.Errorf("flush a.example.: %d %s", code, body)
	}
	if _, mfs := scrape(t, d.Admin); sample(mfs, "towerd_cache_entries", nil) != 3 {
		t.Errorf("after flushing one name: %v entries, want 3", sample(mfs, "towerd_cache_entries", nil))
	}
	_ = adminGet(t, d.Admin, "/healthz")
	_ = adminGet(t, d.Admin, "/readyz")
}

// TestStatsWithoutDaemon: `towerd stats` against an address where nothing
// listens exits 1 with a one-line reason.
func TestStatsWithoutDaemon(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	code, out, errOut := runToExit(t, "stats", "-admin", addr)
	if code != 1 || out != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "no towerd admin server at "+addr) {
		t.Errorf("stderr %q, want one line naming %s", errOut, addr)
	}
}

// TestAdminAddressRules: a non-loopback admin address stops start-up with a
// config error naming the key; a taken admin port does not stop DNS.
func TestAdminAddressRules(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	code, _, stderr := runToExit(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", def.Addr,
		"-consul-dns", consul.Addr, "-consul-http", "off", "-admin", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, `key "admin.listen"`) || !strings.Contains(stderr, "allow_non_loopback") {
		t.Errorf("admin on 0.0.0.0: exit %d, want 2 naming admin.listen and allow_non_loopback\n%s", code, stderr)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	def.Add(t, "up.example. 300 IN A 192.0.2.5")
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", def.Addr,
		"-consul-dns", consul.Addr, "-admin", taken.Addr().String())
	if d.Admin != "" || !strings.Contains(d.stderr.String(), "admin server cannot listen") {
		t.Errorf("taken admin port: admin %q; want none and the reason logged", d.Admin)
	}
	if r := dig(t, d.UDP, "up.example.", "A"); r.Status != "NOERROR" {
		t.Errorf("DNS with the admin port taken: status %s, want NOERROR", r.Status)
	}
}
