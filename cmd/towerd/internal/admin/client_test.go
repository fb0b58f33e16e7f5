package admin

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/upstream"
)

func TestBucketQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.01, 0.1, math.Inf(1)}
	cumulative := map[float64]uint64{0.001: 50, 0.01: 90, 0.1: 100, math.Inf(1): 100}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.5, 0.001},                   // the 50th of 100 ends the first bucket
		{0.25, 0.0005},                 // halfway through the first bucket
		{0.7, 0.001 + 0.009*20.0/40.0}, // halfway through the second
		{0.99, 0.01 + 0.09*9.0/10.0},   // 9 of the third bucket's 10
		{1, 0.1},                       // no sample above 0.1
	} {
		if got := bucketQuantile(tc.q, bounds, cumulative, 100); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("q=%v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := bucketQuantile(0.99, bounds, map[float64]uint64{}, 0); got != 0 {
		t.Errorf("no samples: %v, want 0", got)
	}
	// All in +Inf: the largest finite bound, as histogram_quantile.
	inf := map[float64]uint64{0.001: 0, 0.01: 0, 0.1: 0, math.Inf(1): 5}
	if got := bucketQuantile(0.5, bounds, inf, 5); got != 0.1 {
		t.Errorf("all above the last bound: %v, want 0.1", got)
	}
}

func cacheKey(name string) cache.Key {
	return cache.NewKey(name, dns.TypeA, dns.ClassINET, false, false)
}

// The client behind `towerd stats` reads /stats of a running admin server:
// the document itself (what --json prints) and the human view.
func TestStatsClient(t *testing.T) {
	ta := newTestAdmin(t)
	ta.SetReady(true)
	obs := ta.tel.Resolver
	for _, q := range []resolver.Query{
		{Source: resolver.SourceCache}, {Source: resolver.SourceCache}, {Source: resolver.SourceCache},
		{Source: resolver.SourceUpstream}, {Source: resolver.SourceStale},
	} {
		q.Proto, q.Qtype, q.Zone, q.Duration = "udp", dns.TypeA, ".", time.Millisecond
		obs.ObserveQuery(q)
	}
	ta.cache.Get(cacheKey("a.example.")) // one miss, for the hit ratio below
	setAnswer(t, ta.cache, "a.example.", dns.TypeA, "a.example. 60 IN A 192.0.2.1")
	for range 3 {
		ta.cache.Get(cacheKey("a.example."))
	}
	ta.tel.Upstreams.Observer(".")("192.0.2.53:53", 250*time.Millisecond, upstream.KindTimeout)
	ta.tel.SetWatchStatus(func() *WatchStatus {
		return &WatchStatus{State: "erroring", Services: 12, LastIndex: 4711, Errors: 3, LastError: "Unexpected response code: 403 (ACL not found)"}
	})
	addr := strings.TrimPrefix(ta.url, "http://")

	body, err := Call(Target{Addr: addr}, http.MethodGet, "/stats", nil, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/stats is not a Report: %v\n%s", err, body)
	}
	var human strings.Builder
	Render(&human, r, time.Now())
	out := human.String()
	for _, want := range []string{
		"queries      5  (cache 3, stale 1, upstream 1)",
		"hit ratio 75.0% (3 hits, 1 misses)  stale answers 1",
		"1 of 100 entries",
		"upstreams    192.0.2.53:53",               // the slowest first
		"errors: timeout 1; p50 175ms p99 248.5ms", // 250 ms lands in the (100 ms, 250 ms] bucket
		"consul watch erroring, 12 services, index 4711, last success never, 3 errors (last: Unexpected response code: 403 (ACL not found))",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	if r.Cache.Hits != 3 || r.Cache.Misses != 1 || r.Queries.BySource["stale"] != 1 || r.ConsulWatch == nil ||
		len(r.Upstreams) != 2 || r.Upstreams[0].Timeouts != 1 || !r.Ready {
		t.Errorf("--json document: %+v", r)
	}
}
