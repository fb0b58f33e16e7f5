package consul

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestGateResync: when the agent goes away, the watches do not back off
// each on its own: one probe at a time asks the agent, on the agent's own
// backoff (here 30 ms doubling up to 500 ms, without jitter the lower half: 15, 30, 60, 120, 240, 250 ms), the
// others wait and are served stale; the moment the probe is answered every
// watch reads its service again, at once, and its records are fresh.
func TestGateResync(t *testing.T) {
	f := newFakeAPI(t)
	services := []string{"a", "b", "c", "d", "e"}
	for i, svc := range services {
		f.script(healthPath(svc), reply{index: 3, body: []any{entry("n1", fmt.Sprintf("10.0.0.%d", i+1), svc+"1", "", 80, nil)}})
	}
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{Services: services, MaxStale: 1000 * time.Hour, // the fake clock runs fast
		Timing: Timing{ProbeBase: 30 * time.Millisecond}}, clk, noJitter)
	runWatcher(t, w)
	for _, svc := range services {
		f.waitQueries(t, healthPath(svc), 2) // read, then blocking at 3
	}

	// The agent goes: every blocked query breaks, and so does every
	// request until it comes back.
	before := len(f.all())
	f.startOutage(http.StatusServiceUnavailable)
	waitState(t, w, "every watch failed, served stale", func(State) bool {
		for _, svc := range services {
			if _, stale, ok := ask(w, question(svc+".service.consul.", dns.TypeA)); !ok || !stale {
				return false
			}
		}
		return true
	})
	waitState(t, w, "a probe failed", func(State) bool {
		return slices.ContainsFunc(f.all()[before:], func(r request) bool { return r.outage })
	})
	// The agent is back, with a change for every service.
	f.endOutage()
	for i, svc := range services {
		f.script(healthPath(svc), reply{index: 9, body: []any{entry("n1", fmt.Sprintf("10.0.1.%d", i+1), svc+"1", "", 80, nil)}})
	}
	for _, svc := range services {
		f.waitQueries(t, healthPath(svc), 4) // the resync, then blocking at 9
	}
	// Only the probe asked while the agent was away, one query at a time
	// (the probe reads /v1/agent/self first, and failed there).
	probes := 0
	for _, r := range f.all()[before:] {
		if r.outage {
			probes++
			if r.path != "/v1/agent/self" {
				t.Errorf("%s asked while the agent was away: only the probe may ask", r.path)
			}
		}
	}
	for _, svc := range services {
		q := f.queries(healthPath(svc))
		if last := q[len(q)-2:]; last[0].index != 0 || last[1].index != 9 {
			t.Errorf("%s after the outage: indexes %d, %d; want 0 (the resync), 9", svc, last[0].index, last[1].index)
		}
		m, stale, ok := ask(w, question(svc+".service.consul.", dns.TypeA))
		if !ok || stale || len(m.Answer) != 1 || !strings.HasPrefix(m.Answer[0].(*dns.A).A.String(), "10.0.1.") {
			t.Errorf("%s after the resync: ok=%v stale=%v %v, want the new record, fresh", svc, ok, stale, m)
		}
	}
	if st := w.State(); st.Resyncs != 1 || !st.Connected {
		t.Errorf("after the outage: %+v, want one resync and connected", st)
	}
	// The probe waited out the agent's backoff; no watch waited on its own.
	var waits []time.Duration
	for _, d := range clk.Sleeps() {
		if d > 0 && d != w.cfg.Timing.MinInterval { // not the loops' spacing
			waits = append(waits, d)
		}
	}
	ms := time.Millisecond
	want := []time.Duration{15 * ms, 30 * ms, 60 * ms, 120 * ms, 240 * ms}
	for len(want) < probes+1 {
		want = append(want, 250*ms) // the cap, 500 ms, without jitter
	}
	if !slices.Equal(waits, want[:probes+1]) {
		t.Errorf("waits after failures %v, want the agent's backoff %v (%d failed probes, then one answered)",
			waits, want[:probes+1], probes)
	}
}

// TestGateTurnPassesOn: the probe's turn is held by one loop at a time; a
// loop that ends while holding it gives it back and another waiting loop
// probes (else the others would wait for an agent nobody asks); when the
// agent answers, every waiting loop goes at once.
func TestGateTurnPassesOn(t *testing.T) {
	g := newAgentGate()
	clk := newFakeClock()
	backoff := func(int) time.Duration { return time.Millisecond }
	type result struct {
		id    int
		probe bool
	}
	results := make(chan result, 3)
	for id := range 3 {
		go func() {
			probe, err := g.wait(t.Context(), 0, clk.Now(), clk, backoff, false)
			if err != nil {
				t.Error(err)
			}
			results <- result{id, probe}
		}()
	}
	first := <-results
	if !first.probe {
		t.Fatalf("loop %d left the gate without the agent answering or a turn", first.id)
	}
	select {
	case r := <-results:
		t.Fatalf("loop %d left the gate while loop %d held the turn", r.id, first.id)
	case <-time.After(50 * time.Millisecond): // nothing may come: a bounded look
	}
	g.giveBack() // the prober's watch ended
	second := <-results
	if !second.probe {
		t.Fatalf("after the turn was given back, loop %d left without it", second.id)
	}
	if !g.answered(g.generation(), clk.Now()) { // the second's probe
		t.Fatal("the gate was not closed")
	}
	if last := <-results; last.probe {
		t.Errorf("loop %d probed after the agent answered; it should just go", last.id)
	}
	if g.isClosed() || g.resyncs() != 1 {
		t.Errorf("after the answer: closed %v, %d resyncs; want open, 1", g.isClosed(), g.resyncs())
	}
}

// TestGateIgnoresOldNews: a reply is evidence about the agent only when
// its query was sent after the gate last changed (issue 33). A success of
// a query sent before the outage does not open the gate; a failure of a
// query sent during the outage, taken by its loop only after the probe
// opened the gate, does not close it again: else every watch would resync
// twice (TestGateResync's flake under CPU load).
func TestGateIgnoresOldNews(t *testing.T) {
	g := newAgentGate()
	clk := newFakeClock()
	backoff := func(int) time.Duration { return time.Millisecond }
	beforeOutage := g.generation()
	probe, err := g.wait(t.Context(), beforeOutage, clk.Now(), clk, backoff, false)
	if err != nil || !probe || !g.isClosed() {
		t.Fatalf("first failure: probe %v, err %v, closed %v; want the probe's turn, closed", probe, err, g.isClosed())
	}
	duringOutage := g.generation()
	if g.answered(beforeOutage, clk.Now()) || !g.isClosed() {
		t.Fatal("a success of a query sent before the outage opened the gate")
	}
	if !g.answered(duringOutage, clk.Now()) || g.isClosed() {
		t.Fatal("the probe's success did not open the gate")
	}
	// A loop late to take its failure from the outage: it queries again
	// at once, and the gate stays open.
	probe, err = g.wait(t.Context(), duringOutage, clk.Now(), clk, backoff, false)
	if err != nil || probe || g.isClosed() || g.resyncs() != 1 {
		t.Errorf("a late failure from the outage: probe %v, err %v, closed %v, %d resyncs; want none of it, 1 resync",
			probe, err, g.isClosed(), g.resyncs())
	}
	// A failure of a query sent after the gate opened closes it.
	if _, err := g.wait(t.Context(), g.generation(), clk.Now(), clk, backoff, false); err != nil || !g.isClosed() {
		t.Errorf("a new failure: err %v, closed %v; want closed", err, g.isClosed())
	}
}

// After the agent restarts its indexes start lower. In demand mode
// State.LastIndex (towerd_consul_watch_index) is the highest index of the
// watched services: rebuilt from the resync's reads, not kept at the old
// agent's, which no watch would pass for a long time.
func TestWatchIndexAfterAgentRestart(t *testing.T) {
	f := newFakeAPI(t)
	services := []string{"a", "b"}
	for i, svc := range services {
		f.script(healthPath(svc), reply{index: uint64(900 - 200*i), body: []any{entry("n1", fmt.Sprintf("10.0.0.%d", i+1), svc+"1", "", 80, nil)}})
	}
	w := newTestWatcher(t, f, Config{Services: services, MaxStale: 1000 * time.Hour,
		Timing: Timing{ProbeBase: 30 * time.Millisecond}}, newFakeClock(), noJitter)
	runWatcher(t, w)
	for _, svc := range services {
		f.waitQueries(t, healthPath(svc), 2) // read, then blocking
	}
	if got := w.State().LastIndex; got != 900 {
		t.Fatalf("before the restart: LastIndex %d, want 900", got)
	}
	f.startOutage(http.StatusServiceUnavailable)
	waitState(t, w, "the agent lost", func(st State) bool { return !st.Connected })
	f.endOutage()
	for i, svc := range services {
		f.script(healthPath(svc), reply{index: uint64(5 + 2*i), body: []any{entry("n1", fmt.Sprintf("10.0.1.%d", i+1), svc+"1", "", 80, nil)}})
	}
	for _, svc := range services {
		f.waitQueries(t, healthPath(svc), 4) // the resync, then blocking at its new index
	}
	if st := w.State(); st.LastIndex != 7 || st.Resyncs != 1 {
		t.Errorf("after the restart: LastIndex %d, resyncs %d; want 7 (the highest of the new agent's), 1", st.LastIndex, st.Resyncs)
	}
}
