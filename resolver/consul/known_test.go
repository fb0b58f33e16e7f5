package consul

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// TestServiceListFollowed: below listAfter names kept out the catalog's
// service list is never read; at listAfter the watch follows it, and then a
// name whose service it lacks is neither covered (the cache and Consul's
// DNS answer it) nor counted nor read, while a listed one is read and
// watched as before.
func TestServiceListFollowed(t *testing.T) {
	f := newFakeAPI(t)
	nosuch := func(i int) string { return fmt.Sprint("nosuch", i) }
	for i := range listAfter {
		f.script(healthPath(nosuch(i)), reply{index: 7, body: []any{}})
	}
	f.script(servicesPath, reply{index: 9, body: map[string][]string{"Web": {}, "consul": {}}})
	f.script(healthPath("web"), reply{index: 7, body: []any{entry("n1", "10.0.0.1", "web1", "", 80, nil)}})
	w := newTestWatcher(t, f, Config{}, newFakeClock(), noJitter)
	runWatcher(t, w)
	askTwice := func(svc string) {
		for range 2 {
			if _, _, ok := ask(w, question(svc+".service.consul.", dns.TypeA)); ok {
				t.Fatalf("%s: answered from memory, never watched", svc)
			}
		}
	}
	covers := func(svc string) bool { return w.Covers([]byte(svc + ".service.consul.")) }

	for i := range listAfter - 1 {
		askTwice(nosuch(i))
		waitState(t, w, "an empty read", func(s State) bool { return s.EmptyReads == uint64(i+1) })
	}
	if n := len(f.queries(servicesPath)); n != 0 {
		t.Fatalf("%d names kept out: the service list read %d times, want 0", listAfter-1, n)
	}
	if !covers("other") {
		t.Fatal("before the list: a service name not watched is not covered (its questions must ask for a watch)")
	}

	askTwice(nosuch(listAfter - 1))
	f.waitQueries(t, servicesPath, 1)
	dnstest.Eventually(t, func() bool { return w.knownList.Load() != nil }, 10*time.Second, "the service list taken")
	if covers("other") || covers("nosuch1") {
		t.Error("a service the list lacks is covered: its questions leave the fast path")
	}
	if !covers("web") {
		t.Error("a listed service not watched is not covered")
	}
	askTwice("other")
	askTwice("web") // read after other would be: the reads go in turn
	f.waitQueries(t, healthPath("web"), 1)
	waitState(t, w, "web watched", func(s State) bool { return s.Watched == 1 })
	if n := len(f.queries(healthPath("other"))); n != 0 {
		t.Errorf("a service the list lacks was read %d times, want 0", n)
	}
	if st := w.State(); st.EmptyReads != listAfter {
		t.Errorf("empty reads %d, want %d", st.EmptyReads, listAfter)
	}
}

// TestServiceListRefused: a list the agent refuses (ACL) ends the
// following, and names are read one by one again.
func TestServiceListRefused(t *testing.T) {
	f := newFakeAPI(t)
	for i := range listAfter {
		f.script(healthPath(fmt.Sprint("nosuch", i)), reply{index: 7, body: []any{}})
	}
	f.script(servicesPath, reply{status: http.StatusForbidden})
	f.script(healthPath("other"), reply{index: 7, body: []any{}})
	w := newTestWatcher(t, f, Config{}, newFakeClock(), noJitter)
	runWatcher(t, w)
	for i := range listAfter {
		for range 2 {
			ask(w, question(fmt.Sprint("nosuch", i)+".service.consul.", dns.TypeA))
		}
		waitState(t, w, "an empty read", func(s State) bool { return s.EmptyReads == uint64(i+1) })
	}
	f.waitQueries(t, servicesPath, 1)
	for range 2 {
		ask(w, question("other.service.consul.", dns.TypeA))
	}
	f.waitQueries(t, healthPath("other"), 1)
	if w.knownList.Load() != nil {
		t.Error("a refused list left a list in force")
	}
}

// TestServiceListAcrossRestart: the agent goes away while the watch
// follows the list, with no service watched. The list's loop waits at the
// agent's gate, so a listed name asked for meanwhile costs no attempt to
// reach the agent (the gate is closed: its DNS answers). The agent comes
// back restarted: its index is lower (5 after 900), and the list is read
// at index 0 and then followed from 5, not 900. A name kept out before,
// registered since, is let in by the new list and read at its next
// questions; one the new list lacks is not read.
func TestServiceListAcrossRestart(t *testing.T) {
	f := newFakeAPI(t)
	names := make([]string, 0, listAfter)
	for i := range listAfter - 1 {
		names = append(names, fmt.Sprint("nosuch", i))
	}
	names = append(names, "new") // asked for before it exists
	for _, name := range names {
		f.script(healthPath(name), reply{index: 7, body: []any{}})
	}
	f.script(servicesPath, reply{index: 900, body: map[string][]string{"gone": {}, "consul": {}}})
	w := newTestWatcher(t, f, Config{MaxStale: 1000 * time.Hour}, newFakeClock(), noJitter)
	runWatcher(t, w)
	askTwice := func(svc string) {
		for range 2 {
			ask(w, question(svc+".service.consul.", dns.TypeA))
		}
	}
	for i, name := range names {
		askTwice(name)
		waitState(t, w, "an empty read", func(s State) bool { return s.EmptyReads == uint64(i+1) })
	}
	f.waitQueries(t, servicesPath, 2) // read, then blocking at 900
	dnstest.Eventually(t, func() bool { return w.knownList.Load() != nil }, 10*time.Second, "the service list taken")

	f.startOutage(http.StatusServiceUnavailable)
	dnstest.Eventually(t, w.gate.isClosed, 10*time.Second, "the list's failure to close the gate")
	askTwice("gone") // listed, not watched
	if !w.Covers([]byte("gone.service.consul.")) {
		t.Error("during the outage a listed name is not covered: the last list must stand")
	}

	// Back, restarted: a lower index, new registered, gone lost.
	f.script(servicesPath, reply{index: 5, body: map[string][]string{"new": {}, "consul": {}}})
	f.script(healthPath("new"), reply{index: 6, body: []any{entry("n1", "10.0.0.9", "new1", "", 80, nil)}})
	f.endOutage()
	dnstest.Eventually(t, func() bool { return !w.Covers([]byte("gone.service.consul.")) }, 10*time.Second,
		"the restarted agent's list taken")
	q := f.waitQueries(t, servicesPath, 4) // … 0 (the restarted agent's list), then blocking at 5
	var after []uint64
	for _, r := range q[2:] {
		if !r.outage {
			after = append(after, r.index)
		}
	}
	if len(after) < 2 || after[0] != 0 || after[len(after)-1] != 5 {
		t.Errorf("the list's indexes after the outage %v, want 0 then 5 (the restarted agent's), never 900", after)
	}
	askTwice("gone")
	askTwice("new") // kept out before; the new list lets it in
	waitState(t, w, "new watched", func(s State) bool { return s.Watched == 1 })
	// Reads are made one at a time in the order asked for: new's was made
	// after any of gone's would have been.
	if n := len(f.queries(healthPath("gone"))); n != 0 {
		t.Errorf("gone read %d times (during the outage, or after the new list lacks it), want 0", n)
	}
	dnstest.Eventually(t, func() bool {
		m, _, ok := ask(w, question("new.service.consul.", dns.TypeA))
		return ok && len(m.Answer) == 1
	}, 10*time.Second, "new answered from the watch after the restart")
}

// TestFirstReadsBackOffWithoutWatch: with no watch and no list to wait at
// the agent's gate, the first reads of names asked for are the only
// attempts to reach the agent. While it is away they are spaced out by the
// agent's backoff (50 ms doubling to 500 ms), not made at every question
// once the last attempt failed: 20 questions at one instant, each after
// the last read ended, cost one attempt; the next is made once the backoff
// has passed, and after the agent answers again reads go on at once.
func TestFirstReadsBackOffWithoutWatch(t *testing.T) {
	f := newFakeAPI(t)
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{}, clk, noJitter)
	runWatcher(t, w)
	f.startOutage(http.StatusServiceUnavailable)
	before := len(f.all())
	idle := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.probing == "" && len(w.toProbe) == 0
	}
	// A question as Answer counts it (noteAsked), but considered on the
	// test's goroutine rather than the demand loop's, so that whether it
	// started a read is known when it returns.
	askOne := func(svc string) {
		if w.cands.ask(svc, clk.Now(), DefaultIdleTimeout) {
			w.consider(svc)
		}
		dnstest.Eventually(t, idle, 10*time.Second, "no first read running")
	}
	for i := range 20 {
		askOne(fmt.Sprint("svc", i%2))
	}
	if n := len(f.all()) - before; n != 1 {
		t.Fatalf("%d attempts to reach the agent for 20 questions at one instant, want 1", n)
	}
	clk.Advance(DefaultProbeBase) // the first backoff's longest
	askOne("svc0")
	if n := len(f.all()) - before; n != 2 {
		t.Fatalf("%d attempts after the backoff, want 2", n)
	}
	f.endOutage()
	f.script(healthPath("svc1"), reply{index: 7, body: []any{}})
	f.script(healthPath("svc0"), reply{index: 7, body: []any{}})
	clk.Advance(2 * DefaultProbeBase)
	askOne("svc1")
	askOne("svc0") // the agent answered: no wait
	waitState(t, w, "both read", func(s State) bool { return s.EmptyReads == 2 })
}
