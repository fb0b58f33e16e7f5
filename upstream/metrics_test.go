package upstream

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/towerd/towerd/test/dnstest"
)

// zoneGroup is a group named zone over the raw servers, reporting to m; it
// is closed at cleanup.
func zoneGroup(t *testing.T, m *Metrics, zone string, opts GroupOptions, servers ...*rawServer) *Group {
	t.Helper()
	addrs := make([]string, 0, len(servers))
	for _, s := range servers {
		addrs = append(addrs, s.addr)
	}
	opts.Observe = m.Observer(zone)
	g, err := NewGroup(zone, addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// holeTimeouts gives a black-holed attempt up after a second: long enough
// that a server that does answer is never taken for a timeout, even on a
// loaded machine under the race detector.
var holeTimeouts = GroupOptions{
	MinAttemptTimeout: time.Second, MaxAttemptTimeout: time.Second, InitialAttemptTimeout: time.Second,
}

func exchangeOnce(t *testing.T, g *Group) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := g.Exchange(ctx, testQuery())
	return err
}

// Every attempt is counted by zone and server, failures by reason, and the
// health and RTT of the servers are read at scrape time.
func TestMetricsCountAttemptsByReason(t *testing.T) {
	m := NewMetrics([]float64{0.01, 0.1, 1})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	servfail := startRaw(t, answering(t, dns.RcodeServerFailure))
	hole := startRaw(t, blackHole)
	good := startRaw(t, answering(t, dns.RcodeSuccess))
	opts := holeTimeouts
	opts.MaxAttempts, opts.FailThreshold = 3, 1
	wentDown := make(chan string, 3)
	opts.OnHealthChange = func(server string, up bool) {
		if !up {
			wentDown <- server
		}
	}
	g := zoneGroup(t, m, "corp.example.", opts, servfail, hole, good)
	m.SetGroups([]*Group{g}, 0)

	if err := exchangeOnce(t, g); err != nil {
		t.Fatalf("exchange: %v (the third server answers)", err)
	}
	// The black hole's silence watcher marks it down (silence.go): its
	// one RTO ran out, a second of silence.
	select {
	case server := <-wentDown:
		if server != hole.addr {
			t.Fatalf("%s marked down, want the black hole %s", server, hole.addr)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the black hole was not marked down")
	}
	count := func(server *rawServer, reason string) float64 {
		if reason == "" {
			return testutil.ToFloat64(m.requests.WithLabelValues("corp.example.", server.addr))
		}
		return testutil.ToFloat64(m.errors.WithLabelValues("corp.example.", server.addr, reason))
	}
	for _, tc := range []struct {
		server *rawServer
		reason string
		want   float64
	}{
		{servfail, "", 1}, {servfail, KindServFail, 1},
		{hole, "", 1}, {hole, KindTimeout, 1},
		{good, "", 1},
	} {
		if got := count(tc.server, tc.reason); got != tc.want {
			t.Errorf("server %s reason %q: %v, want %v", tc.server.addr, tc.reason, got, tc.want)
		}
	}
	if got := testutil.CollectAndCount(m.errors); got != 2 {
		t.Errorf("errors: %d series, want 2 (servfail, timeout)", got)
	}
	if got := testutil.CollectAndCount(m.duration); got != 3 {
		t.Errorf("duration: %d series, want one per server", got)
	}

	// FailThreshold 1: the black hole is down; SERVFAIL is an answer about
	// one name, so that server stays up.
	want := fmt.Sprintf(`
# HELP towerd_upstream_up 1 while the server is considered healthy, 0 while it is marked down and probed.
# TYPE towerd_upstream_up gauge
towerd_upstream_up{server=%q,zone="corp.example."} 1
towerd_upstream_up{server=%q,zone="corp.example."} 0
towerd_upstream_up{server=%q,zone="corp.example."} 1
`, servfail.addr, hole.addr, good.addr)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "towerd_upstream_up"); err != nil {
		t.Error(err)
	}
}

// Replies that do not match the query are counted as reason "mismatch",
// and the count survives a reload that replaces the groups. The old groups
// are still counted while they may finish attempts (the grace period);
// after it, servers no longer configured lose their series.
func TestMetricsAcrossGroupReplacement(t *testing.T) {
	m := NewMetrics([]float64{0.01, 0.1, 1})
	// A forged reply with the wrong ID, then the genuine one.
	spoofing := startRaw(t, func(q *dns.Msg, _ net.Addr) [][]byte {
		forged := replyTo(q, dns.RcodeSuccess, "203.0.113.66")
		forged.Id = q.Id + 1
		return [][]byte{mustPack(t, forged), mustPack(t, replyTo(q, dns.RcodeSuccess, "192.0.2.1"))}
	})
	dropped := startRaw(t, answering(t, dns.RcodeSuccess))

	// The grace period on the fake clock (issue 33).
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	old := zoneGroup(t, m, ".", GroupOptions{Clock: clk}, spoofing, dropped)
	// The listed order only breaks ties (latency.go): the dropped server is
	// measured slow, so the spoofing one is asked every time.
	old.servers[1].addSample(time.Second)
	m.SetGroups([]*Group{old}, 0)
	if err := exchangeOnce(t, old); err != nil {
		t.Fatal(err)
	}
	mismatches := func() float64 {
		// Collect first: mismatches are synced from the groups at scrape time.
		testutil.CollectAndCount(m)
		return testutil.ToFloat64(m.errors.WithLabelValues(".", spoofing.addr, ReasonMismatch))
	}
	if got := mismatches(); got != 1 {
		t.Fatalf("mismatches = %v, want 1", got)
	}

	// The reload keeps the spoofing server and drops the other one. An
	// attempt the old group makes during the grace period still counts.
	reloaded := zoneGroup(t, m, ".", GroupOptions{Clock: clk}, spoofing)
	m.SetGroups([]*Group{reloaded}, time.Hour)
	if err := exchangeOnce(t, old); err != nil {
		t.Fatal(err)
	}
	if got := mismatches(); got != 2 {
		t.Errorf("old group during the grace period: mismatches = %v, want 2", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	// seriesOf names the metrics with a series for addr.
	seriesOf := func(addr string) []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, mf := range mfs {
			for _, metric := range mf.GetMetric() {
				for _, lp := range metric.GetLabel() {
					if lp.GetValue() == addr {
						names = append(names, mf.GetName())
					}
				}
			}
		}
		return names
	}
	// An attempt to the dropped server, as the old group may still make
	// one during the grace period: its series stays until the period ends.
	m.Observer(".")(dropped.addr, time.Millisecond, "")
	clk.Advance(time.Hour - 1)
	if len(seriesOf(dropped.addr)) == 0 {
		t.Errorf("%s lost its series before the grace period ended", dropped.addr)
	}
	clk.Advance(1) // the grace timer retires the old group
	if err := exchangeOnce(t, reloaded); err != nil {
		t.Fatal(err)
	}
	if got := mismatches(); got != 3 {
		t.Errorf("new group, which counts from 0 itself: mismatches = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(".", spoofing.addr)); got != 3 {
		t.Errorf("requests to the kept server = %v, want 3 across the reload", got)
	}
	if names := seriesOf(dropped.addr); len(names) != 0 {
		t.Errorf("%v still have a series for %s, which the reload removed", names, dropped.addr)
	}
}

// Without any group (the admin server before start-up) scrapes still work.
func TestMetricsWithoutGroups(t *testing.T) {
	m := NewMetrics(nil)
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Errorf("%d series without groups or attempts, want 0", n)
	}
}

// An attempt made unnecessary by its sibling's reply was sent, so it counts
// as a request, but it neither failed nor has a duration worth a sample.
func TestMetricsSupersededAttempt(t *testing.T) {
	m := NewMetrics([]float64{1})
	observe := m.Observer(".")
	observe("192.0.2.53:53", 0, "")
	observe("192.0.2.53:53", 0, KindSuperseded)
	if got := testutil.ToFloat64(m.requests.WithLabelValues(".", "192.0.2.53:53")); got != 2 {
		t.Errorf("requests %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.errors); got != 0 {
		t.Errorf("%d error series, want 0", got)
	}
	if got := testutil.CollectAndCount(m.duration); got != 1 {
		t.Fatalf("%d duration series, want 1", got)
	}
	var metric dto.Metric
	if err := m.duration.WithLabelValues(".", "192.0.2.53:53").(prometheus.Histogram).Write(&metric); err != nil {
		t.Fatal(err)
	}
	if n := metric.GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("%d duration samples, want 1 (the answered attempt)", n)
	}
}
