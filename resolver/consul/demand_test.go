package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// startWatcher runs w until the test ends.
func startWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// runWatcher runs w until the test ends and waits for its first sync.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	startWatcher(t, w)
	select {
	case <-w.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("no first sync")
	}
}

func healthPath(svc string) string { return "/v1/health/service/" + svc }

// waitState polls (bounded) until ok holds for the watch's state: the loops
// record a reply after the fake API saw the query.
func waitState(t *testing.T, w *Watcher, what string, ok func(State) bool) State {
	t.Helper()
	var st State
	dnstest.Eventually(t, func() bool {
		st = w.State()
		return ok(st)
	}, 10*time.Second, what)
	return st
}

func watchedKeys(w *Watcher) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	for k := range w.watches {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestDemandWatch: a service is read from its second question (the first
// goes the normal way, and so does the second), watched from that read on,
// and answered from memory after; a name without instances is read once and
// kept out; with the set full a name asked as often as the least asked
// watch is refused, one asked clearly more often takes its place; idle
// watches end; a 429 ends the watch that got it and lowers the cap instead
// of retrying; the catalog's service list is never read.
func TestDemandWatch(t *testing.T) {
	f := newFakeAPI(t)
	for _, svc := range []string{"a", "b", "c", "d"} {
		f.script(healthPath(svc), reply{index: 7, body: []any{entry("n1", "10.0.0.1", svc+"1", "", 80, nil)}})
	}
	f.script(healthPath("d"), reply{status: http.StatusTooManyRequests})
	f.script(healthPath("nosuch"), reply{index: 7, body: []any{}})
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{MaxWatches: 2, IdleTimeout: time.Minute}, clk, noJitter)
	runWatcher(t, w)

	ask := func(svc string) bool {
		_, _, ok := ask(w, question(svc+".service.consul.", dns.TypeA))
		return ok
	}
	if ask("a") || ask("a") {
		t.Fatal("a: answered from memory before it was ever watched")
	}
	got := f.waitQueries(t, healthPath("a"), 2) // read once, now blocking from that read
	if got[0].index != 0 || got[1].index != 7 {
		t.Errorf("a's queries at index %d, %d; want 0 (the first read), then 7 (blocking)", got[0].index, got[1].index)
	}
	if !ask("a") {
		t.Fatal("a: not answered from memory after its watch started")
	}

	// A name that is no service: read once, no watch, kept out.
	ask("nosuch")
	ask("nosuch")
	st := waitState(t, w, "nosuch read", func(s State) bool { return s.EmptyReads == 1 })
	if st.Watched != 1 || st.KeptOut != 1 || st.Starts != 1 {
		t.Errorf("after an empty read: %+v, want 1 watched, 1 kept out, 1 start", st)
	}

	clk.Advance(2 * time.Second)
	ask("b")
	ask("b")
	f.waitQueries(t, healthPath("b"), 2)
	for range 3 {
		if !ask("a") || !ask("b") {
			t.Fatal("a and b not both answered from memory")
		}
	}
	ask("a") // a is now asked more often than b
	for range 5 {
		ask("nosuch") // kept out: not read again
	}

	// The set is full: c, asked as often as b, is refused without a read.
	ask("c")
	ask("c")
	waitState(t, w, "c refused", func(s State) bool { return s.RefusedFrequency >= 1 })
	if n := len(f.queries(healthPath("c"))); n != 0 {
		t.Errorf("c read %d times while refused", n)
	}
	// Asked clearly more often, it takes the place of b, the least asked.
	for range 10 {
		ask("c")
	}
	f.waitQueries(t, healthPath("c"), 2)
	st = waitState(t, w, "c replaces b", func(s State) bool { return s.EvictedCap == 1 })
	if got := watchedKeys(w); !slices.Equal(got, []string{"a", "c"}) || st.Watched != 2 {
		t.Errorf("after the cap: watched %v (%d), want [a c]: b was the least asked", got, st.Watched)
	}
	if n := len(f.queries(healthPath("nosuch"))); n != 1 {
		t.Errorf("nosuch read %d times, want once (kept out after its empty read)", n)
	}
	if n := len(f.queries(servicesPath)); n != 0 {
		t.Errorf("the demand mode read the catalog's service list %d times", n)
	}
	// c's last questions are taken in before its watch ends: else they
	// would ask for it again.
	waitState(t, w, "the questions taken in", func(State) bool { return len(w.demand) == 0 })

	clk.Advance(time.Minute)
	w.expire()
	st = w.State()
	if st.Watched != 0 || st.EvictedIdle != 2 || len(watchedKeys(w)) != 0 {
		t.Errorf("after idle_timeout: %+v, want no watch left", st)
	}

	// The agent refuses d's blocking query with 429: the watch ends (no
	// retry loop) and the cap drops to what the set holds.
	ask("d")
	ask("d")
	st = waitState(t, w, "429 counted", func(s State) bool { return s.Agent429s == 1 && s.Evicted429 == 1 })
	if st.Watched != 0 || st.Limit != 1 || len(watchedKeys(w)) != 0 {
		t.Errorf("after a 429: %+v, want no watch and the cap at 1", st)
	}
	w.expire() // the check that saw the 429 keeps the cap down
	if st := w.State(); st.Limit != 1 {
		t.Errorf("cap at the check after the 429: %d, want 1", st.Limit)
	}
	w.expire() // no 429 since the last check: the cap grows back by one
	if st := w.State(); st.Limit != 2 {
		t.Errorf("cap after a quiet check: %d, want 2", st.Limit)
	}
}

// TestWatchSetRestart: a saved set is watched from the start by the next
// Watcher, Synced waits for it, and its services are answered before any
// question; pinned services are watched too and not written to the set;
// the views the agent still holds for ended watches count for the next.
func TestWatchSetRestart(t *testing.T) {
	f := newFakeAPI(t)
	clk := newFakeClock()
	old := newTestWatcher(t, f, Config{Services: []string{"Pin"}}, clk, noJitter)
	markWatched(old, "web", "db")
	old.watches["web"].asked.Store(clk.Now().UnixNano())
	old.mu.Lock()
	old.watches["pin"] = &serviceLoop{name: "Pin", pinned: true, cancel: func() {}}
	old.publish()
	old.recent["gone"] = clk.Now() // the agent still holds its view
	old.recent["long-gone"] = clk.Now().Add(-agentViewTTL)
	old.mu.Unlock()
	var buf bytes.Buffer
	if n, err := old.WriteSet(&buf); err != nil || n != 2 {
		t.Fatalf("WriteSet: %d %v", n, err)
	}
	var saved savedSet
	if err := json.Unmarshal(buf.Bytes(), &saved); err != nil || len(saved.Services) != 2 ||
		saved.Services[0].Name != "web" || saved.Services[1].Name != "db" || !saved.Services[1].LastAsked.IsZero() {
		t.Fatalf("saved set %s (%v), want web (asked) then db, no pin", buf.String(), err)
	}

	for _, svc := range []string{"web", "db", "Pin"} {
		f.script(healthPath(svc), reply{index: 3, body: []any{entry("n1", "10.0.0.1", svc+"1", "", 80, nil)}})
	}
	w := newTestWatcher(t, f, Config{Services: []string{"Pin"}}, clk, noJitter)
	if n, err := w.ReadSet(strings.NewReader(buf.String())); err != nil || n != 2 {
		t.Fatalf("ReadSet: %d %v", n, err)
	}
	if _, ok := w.recent["gone"]; !ok || len(w.recent) != 1 {
		t.Errorf("views the agent holds, restored: %v, want gone only (long-gone's view has expired)", w.recent)
	}
	runWatcher(t, w)
	for _, svc := range []string{"web", "db", "pin"} {
		if _, _, ok := ask(w, question(svc+".service.consul.", dns.TypeA)); !ok {
			t.Errorf("%s: not answered from memory right after the first sync", svc)
		}
	}
	if st := w.State(); st.Watched != 3 || st.Pinned != 1 || st.Starts != 3 {
		t.Errorf("state %+v, want 3 watched, 1 pinned", st)
	}
	// Not asked since the start: they end one idle timeout after it; the
	// pinned one stays.
	clk.Advance(DefaultIdleTimeout)
	w.expire()
	if got := watchedKeys(w); !slices.Equal(got, []string{"pin"}) {
		t.Errorf("after the idle timeout: %v, want only the pinned service", got)
	}

	if _, err := w.ReadSet(strings.NewReader(`{"version":9,"services":[]}`)); err == nil {
		t.Error("a set of another version was accepted")
	}
	if _, err := New(Config{Services: []string{"a", "b"}, MaxWatches: 1}); err == nil {
		t.Error("more pinned services than max_watches accepted")
	}
}

// TestCatalogModeCapped: consul.services = ["*"] follows the list but stops
// at max_watches and says so in State.
func TestCatalogModeCapped(t *testing.T) {
	f := newFakeAPI(t)
	f.script(servicesPath, reply{index: 5, body: body("a", "b", "c")})
	for _, svc := range []string{"a", "b", "c"} {
		f.script(healthPath(svc), reply{index: 5, body: []any{entry("n1", "10.0.0.1", svc+"1", "", 80, nil)}})
	}
	w := newTestWatcher(t, f, Config{Services: []string{WatchAll}, MaxWatches: 2}, newFakeClock(), noJitter)
	runWatcher(t, w)
	st := w.State()
	if !st.CatalogCapped || st.Watched != 2 || st.Mode != "catalog" {
		t.Errorf("state %+v, want 2 watched and capped", st)
	}
	if got := watchedKeys(w); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("watched %v, want the first two by name", got)
	}
	if _, _, ok := ask(w, question("c.service.consul.", dns.TypeA)); ok {
		t.Error("c answered from memory past the cap")
	}
}

// TestIdleWatcherPings: with no watch running, the watch still reads the
// agent (its /v1/agent/self, no RPC to the servers) once per idle check, so
// its last success does not age on a node that asks for nothing.
func TestIdleWatcherPings(t *testing.T) {
	f := newFakeAPI(t)
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{IdleTimeout: 40 * time.Millisecond}, clk, noJitter)
	runWatcher(t, w)
	first := w.State().LastSuccess
	// The idle check runs on the clock's ticker: one ping per check.
	if err := clk.WaitTimers(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	for n := 2; n <= 3; n++ {
		clk.Advance(w.checkEvery())
		f.waitQueries(t, "/v1/agent/self", n)
	}
	st := waitState(t, w, "a later success", func(s State) bool { return s.LastSuccess.After(first) })
	if !st.Connected || st.Watched != 0 {
		t.Errorf("idle watcher state %+v", st)
	}
	f.setSelf(reply{status: http.StatusTooManyRequests})
	clk.Advance(w.checkEvery())
	st = waitState(t, w, "the refused ping counted", func(s State) bool { return s.Agent429s > 0 && !s.Connected })
	if st.Evicted429 != 0 {
		t.Errorf("a refused ping evicted a watch: %+v", st)
	}
}

// TestDemandWithoutDatacenter: while the datacenter is unknown (a token
// without agent:read, no consul.datacenter) nothing is answered, but
// questions still ask for their service's watch (from the second), whose
// reply names the datacenter; a question for another datacenter does not.
func TestDemandWithoutDatacenter(t *testing.T) {
	w, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	w.info.Store(&agentInfo{domain: "consul."})
	if _, _, ok := ask(w, question("web.service.dc2.consul.", dns.TypeA)); ok {
		t.Fatal("answered without a datacenter")
	}
	for range 2 {
		if _, _, ok := ask(w, question("web.service.consul.", dns.TypeA)); ok {
			t.Fatal("answered without a datacenter")
		}
	}
	select {
	case key := <-w.demand:
		if key != "web" {
			t.Errorf("asked for a watch of %q, want web", key)
		}
	default:
		t.Fatal("the question did not ask for a watch")
	}
	select {
	case key := <-w.demand:
		t.Errorf("a second watch asked for: %q", key)
	default:
	}
}
