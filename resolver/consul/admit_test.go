package consul

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// scriptServices gives each service one instance whose first read has
// index 3; later queries block.
func scriptServices(f *fakeAPI, services ...string) {
	for i, svc := range services {
		f.script(healthPath(svc), reply{index: 3, body: []any{entry("n1", fmt.Sprintf("10.0.0.%d", i+1), svc+"1", "", 80, nil)}})
	}
}

func askFor(w *Watcher, svc string) bool {
	_, _, ok := ask(w, question(svc+".service.consul.", dns.TypeA))
	return ok
}

// TestAdmissionCyclicSet: six services asked round-robin with a cap of
// four (issue 24's 80 at a cap of 64, small): four are watched and stay
// watched, the other two are refused and go to the agent's DNS; no watch
// is ever started twice or evicted, and no service is read more than once.
func TestAdmissionCyclicSet(t *testing.T) {
	f := newFakeAPI(t)
	services := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	scriptServices(f, services...)
	w := newTestWatcher(t, f, Config{MaxWatches: 4, IdleTimeout: time.Hour}, newFakeClock(), noJitter)
	runWatcher(t, w)
	for range 2 {
		for _, svc := range services {
			askFor(w, svc)
		}
	}
	waitState(t, w, "the set filled", func(s State) bool { return s.Watched == 4 && s.Services == 4 })
	fromMemory := 0
	for range 20 {
		for _, svc := range services {
			if askFor(w, svc) {
				fromMemory++
			}
		}
	}
	st := waitState(t, w, "the refusals counted", func(s State) bool { return s.RefusedFrequency >= 2 })
	if st.Starts != 4 || st.EvictedCap != 0 || st.Watched != 4 {
		t.Errorf("after 20 rounds: %+v, want the 4 first watched, no eviction", st)
	}
	if fromMemory != 4*20 {
		t.Errorf("%d of %d questions answered from memory, want the 4 watched services' %d", fromMemory, 6*20, 4*20)
	}
	for _, svc := range services {
		if n := len(f.queries(healthPath(svc))); n > 2 {
			t.Errorf("%s queried %d times, want at most 2 (a read, then blocking)", svc, n)
		}
	}
}

// TestAdmissionViewBound: every service that changes places leaves the
// agent a streaming view for 20 minutes, so with a cap of 2 (a margin of 2
// views) two hot services may displace the cold ones, a third must wait
// until the agent has let the old views go; it is then admitted.
func TestAdmissionViewBound(t *testing.T) {
	f := newFakeAPI(t)
	scriptServices(f, "a", "b", "h1", "h2", "h3")
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{MaxWatches: 2, IdleTimeout: time.Hour}, clk, noJitter)
	runWatcher(t, w)
	for _, svc := range []string{"a", "b"} {
		askFor(w, svc)
		askFor(w, svc)
		f.waitQueries(t, healthPath(svc), 2) // blocking: the agent holds a view
	}
	for i, svc := range []string{"h1", "h2"} {
		for range 20 {
			askFor(w, svc)
		}
		f.waitQueries(t, healthPath(svc), 2)
		waitState(t, w, svc+" displaced a cold one", func(s State) bool { return s.EvictedCap == uint64(i+1) })
	}
	if st := w.State(); st.AgentViews != 4 || st.ViewLimit != 4 {
		t.Errorf("after two swaps: %d views (limit %d), want 4 (4)", st.AgentViews, st.ViewLimit)
	}
	for range 40 {
		askFor(w, "h3")
	}
	st := waitState(t, w, "h3 refused", func(s State) bool { return s.RefusedStreams > 0 })
	if st.EvictedCap != 2 || len(f.queries(healthPath("h3"))) != 0 {
		t.Errorf("h3 past the view bound: %+v, %d reads; want no swap, no read", st, len(f.queries(healthPath("h3"))))
	}
	// The agent lets go of a's and b's views after 20 minutes.
	clk.Advance(agentViewTTL)
	w.expire()
	askFor(w, "h3")
	f.waitQueries(t, healthPath("h3"), 2)
	st = waitState(t, w, "h3 admitted", func(s State) bool { return s.EvictedCap == 3 })
	if st.AgentViews > st.ViewLimit {
		t.Errorf("%d views, over the bound %d", st.AgentViews, st.ViewLimit)
	}
}

// TestEmptyGrace: a watched service that loses its instances is no longer
// answered from memory (the agent's DNS says NXDOMAIN) but keeps its watch,
// so its return is answered at once; empty for EmptyGrace, its watch ends
// and the name is kept out of the set (its questions go to the agent's
// DNS, no read) until the hold is over.
func TestEmptyGrace(t *testing.T) {
	f := newFakeAPI(t)
	scriptServices(f, "web")
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{IdleTimeout: time.Hour, EmptyGrace: time.Minute}, clk, noJitter)
	runWatcher(t, w)
	askFor(w, "web")
	askFor(w, "web")
	f.waitQueries(t, healthPath("web"), 2)
	if !askFor(w, "web") {
		t.Fatal("web not answered after its watch started")
	}
	web := []any{entry("n1", "10.0.0.1", "web1", "", 80, nil)}
	f.script(healthPath("web"), reply{index: 4, body: []any{}})
	waitState(t, w, "web empty", func(s State) bool { return s.Services == 0 })
	if askFor(w, "web") {
		t.Error("web answered from memory without an instance")
	}
	f.script(healthPath("web"), reply{index: 5, body: web})
	waitState(t, w, "web back", func(s State) bool { return s.Services == 1 })
	if !askFor(w, "web") {
		t.Error("web not answered from memory when its instance came back")
	}
	f.script(healthPath("web"), reply{index: 6, body: []any{}})
	waitState(t, w, "web empty again", func(s State) bool { return s.Services == 0 })
	w.expire()
	if st := w.State(); st.Watched != 1 || st.Starts != 1 {
		t.Errorf("within the grace: %+v, want the one watch still running", st)
	}
	clk.Advance(time.Minute)
	w.expire()
	st := w.State()
	if st.Watched != 0 || st.EvictedEmpty != 1 || st.KeptOut != 1 {
		t.Errorf("after the grace: %+v, want the watch ended (empty) and the name kept out", st)
	}
	reads := len(f.queries(healthPath("web")))
	for range 5 {
		askFor(w, "web")
	}
	// Past the hold the name may be read again: the next question asks.
	clk.Advance(emptyHold)
	askFor(w, "web")
	// A first read; the ended watch's last query may arrive late, but it
	// must not take the reply.
	f.waitRead(t, healthPath("web"), reads)
	f.waitBlocked(t, healthPath("web"), 1)
	f.script(healthPath("web"), reply{index: 7, body: web})
	waitState(t, w, "web watched again", func(s State) bool { return s.Watched == 1 && s.Services == 1 })
	if got := watchedKeys(w); !slices.Equal(got, []string{"web"}) {
		t.Errorf("watched %v", got)
	}
}

// A name read empty before leaves the cache's fast path (Covers) only for
// the question that asks for its next read: while that read is under way
// its questions stay with the cache, and count again if it ends without
// a verdict. A name never read counts every question (admission by use).
func TestKeptOutWhileReadAgain(t *testing.T) {
	c := newCandidates()
	now := time.Unix(1_700_000_000, 0)
	c.ask("new", now, time.Hour)
	if !c.ask("new", now, time.Hour) || c.keptOutNow("new", now) {
		t.Fatal("a name never read: considered at its second question, and covered while it waits")
	}
	c.keepOut("x", now, time.Hour)
	if !c.keptOutNow("x", now) {
		t.Fatal("a name read empty is not kept out")
	}
	now = now.Add(emptyHold)
	if c.keptOutNow("x", now) {
		t.Fatal("kept out past its hold")
	}
	if !c.ask("x", now, time.Hour) || !c.keptOutNow("x", now) {
		t.Fatal("the question asking for a read again: the name must be considered, and left with the cache meanwhile")
	}
	c.readDone("x")
	if c.keptOutNow("x", now) {
		t.Fatal("a read that ended without a verdict keeps the name with the cache")
	}
	c.ask("x", now, time.Hour)
	c.keepOut("x", now, time.Hour)
	if !c.keptOutNow("x", now.Add(2*emptyHold-time.Second)) {
		t.Fatal("read empty again: the hold doubles")
	}
}
