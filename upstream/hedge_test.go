package upstream

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// hedgeEvents collects OnHedge's events on a channel.
func hedgeEvents() (func(string), <-chan string) {
	ch := make(chan string, 16)
	return func(e string) { ch <- e }, ch
}

func nextEvent(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(waitTimeout):
		t.Fatal("no hedge event")
		return ""
	}
}

// warm gives every server of g an estimate: sub-millisecond on loopback,
// so the hedge is due at minHedgeDelay and the RTO at its floor.
func warm(t *testing.T, g *Group) {
	t.Helper()
	for _, s := range g.servers {
		s.addSample(200 * time.Microsecond)
	}
}

func wireExchange(t *testing.T, g *Group, name string) (WireReply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	packed, err := question(name).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return g.ExchangeWire(ctx, packed, time.Time{})
}

// On the fake clock: the hedge goes out exactly at the chosen server's tail
// estimate, to the next server, whose answer wins; the chosen server's
// late reply, released afterwards, is dropped with its socket, and what it
// was overtaken by counts as its latency.
func TestHedgeGoesToTheNextServerAtTheTailAndWins(t *testing.T) {
	slow, fast := startHeld(t), startHeld(t)
	arrived := slow.hold("late.example.", 1)
	g, clk, events := newHedged(t, slow.addr, fast.addr, 10*time.Millisecond)
	g.servers[1].addSample(40 * time.Millisecond) // slower: the hedge's target
	tail := g.Servers()[0].Tail
	if tail != 20*time.Millisecond {
		t.Fatalf("tail %s, want srtt + 2·rttvar = 20ms after one sample", tail)
	}
	before := g.Servers()[0].SRTT

	done := startExchange(t, g, "late.example.")
	<-arrived
	waitTimers(t, clk, 1)
	clk.Advance(tail - time.Nanosecond)
	if h := g.Hedges(); h.Sent != 0 || fast.Total() != 0 {
		t.Fatalf("hedged before the tail: %+v", h)
	}
	clk.Advance(time.Nanosecond)
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s at the tail, want sent", e)
	}
	r := <-done
	if r.err != nil || r.wr.Server != fast.addr || !r.wr.Hedge {
		t.Fatalf("answer from %s (hedge %v), %v; want the hedge's, from %s", r.wr.Server, r.wr.Hedge, r.err, fast.addr)
	}
	if e := nextEvent(t, events); e != HedgeWon {
		t.Errorf("event %s, want won", e)
	}
	if srtt := g.Servers()[0].SRTT; srtt <= before {
		t.Errorf("overtaken server's srtt %s, want above %s: it took at least until the hedge's answer", srtt, before)
	}
	releaseHeld(t, slow, "late.example.", 0)
	if wr, err := wireExchangeOn(t, g, clk, "next.example."); err != nil || wr.Hedge {
		t.Errorf("next question after the late reply: hedge %v, %v; want the first attempt's answer", wr.Hedge, err)
	}
	st := g.Servers()
	if st[0].Superseded != 1 || st[0].Timeouts != 0 || st[0].Mismatches != 0 || !st[0].Up {
		t.Errorf("overtaken server: %+v; want 1 superseded, no timeout, no mismatch, up", st[0])
	}
	if h := g.Hedges(); h != (HedgeCounts{Sent: 1, Won: 1}) {
		t.Errorf("hedges %+v, want 1 sent, 1 won", h)
	}
}

// With a single server the hedge asks it again, from another port with
// another ID, and the reply to either wins.
func TestHedgeSingleServerNewPortAndID(t *testing.T) {
	var mu sync.Mutex
	var from []string
	dropped := false
	srv := startRaw(t, func(q *dns.Msg, addr net.Addr) [][]byte {
		if isProbe(q) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		from = append(from, addr.String())
		if !dropped {
			dropped = true // the lost packet
			return nil
		}
		out, _ := replyTo(q, dns.RcodeSuccess, "192.0.2.1").Pack()
		return [][]byte{out}
	})
	onHedge, events := hedgeEvents()
	g := newGroup(t, GroupOptions{MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, OnHedge: onHedge}, srv)
	g.budget.tokens = hedgeBurst
	warm(t, g)
	if _, err := wireExchange(t, g, "lost.example."); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s, want sent", e)
	}
	qs := srv.received(t)
	if len(qs) != 2 {
		t.Fatalf("server saw %d queries, want the lost one and the hedge", len(qs))
	}
	if qs[0].Id == qs[1].Id || from[0] == from[1] {
		t.Errorf("hedge from %s ID %d, first from %s ID %d; want a new port and ID", from[1], qs[1].Id, from[0], qs[0].Id)
	}
	if h := g.Hedges(); h.Won != 1 {
		t.Errorf("hedges %+v, want the hedge won", h)
	}
}

type exchangeResult struct {
	wr  WireReply
	err error
}

// startExchange asks g name on a goroutine.
func startExchange(t *testing.T, g *Group, name string) <-chan exchangeResult {
	t.Helper()
	done := make(chan exchangeResult, 1)
	go func() {
		wr, err := wireExchange(t, g, name)
		done <- exchangeResult{wr, err}
	}()
	return done
}

// wireExchangeOn asks g name and returns its answer, advancing clk should
// the resolution wait on it (it does not, when the server answers).
func wireExchangeOn(t *testing.T, g *Group, _ *dnstest.Clock, name string) (WireReply, error) {
	t.Helper()
	r := <-startExchange(t, g, name)
	return r.wr, r.err
}

func waitTimers(t *testing.T, clk *dnstest.Clock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := clk.WaitTimers(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v", n, err)
	}
}

// newHedged is a group on the fake clock over slow (listed first) and
// other, both measured at rtt, with tokens in its budget and an RTO
// (waitTimeout) no test reaches: only a hedge asks the second server.
func newHedged(t *testing.T, slow, other string, rtt time.Duration) (*Group, *dnstest.Clock, <-chan string) {
	t.Helper()
	onHedge, events := hedgeEvents()
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g, err := NewGroup(".", []string{slow, other}, GroupOptions{
		MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, OnHedge: onHedge, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 }
	g.budget.tokens = hedgeBurst
	for _, s := range g.servers {
		s.addSample(rtt)
	}
	return g, clk, events
}

// Without a token the hedge is refused, counted, and the first attempt
// waits as it would have without hedging: the other server is not asked.
func TestHedgeRefusedByBudget(t *testing.T) {
	slow, other := startHeld(t), startHeld(t)
	arrived := slow.hold("q.example.", 1)
	g, clk, events := newHedged(t, slow.addr, other.addr, 10*time.Millisecond)
	g.budget.tokens = 0.5 // the first attempt earns 0.05
	done := startExchange(t, g, "q.example.")
	<-arrived
	waitTimers(t, clk, 1)
	clk.Advance(20 * time.Millisecond)
	if e := nextEvent(t, events); e != HedgeRefused {
		t.Fatalf("event %s, want refused", e)
	}
	releaseHeld(t, slow, "q.example.", 0)
	if r := <-done; r.err != nil || r.wr.Server != slow.addr {
		t.Fatalf("answer from %s, %v; want the first server's", r.wr.Server, r.err)
	}
	if n := other.Total(); n != 0 {
		t.Errorf("the other server was asked %d times, want 0", n)
	}
	if h := g.Hedges(); h != (HedgeCounts{Refused: 1}) {
		t.Errorf("hedges %+v, want 1 refused", h)
	}
}

// A hedge that gets SERVFAIL does not win while the first attempt may
// still answer: the first server's answer, released later, is the reply.
func TestHedgeServFailDoesNotWin(t *testing.T) {
	slow := startHeld(t)
	servfail := scripted(t, func(q *dns.Msg, _ string) *dns.Msg { return replyTo(q, dns.RcodeServerFailure) })
	// The SERVFAIL sends the next attempt at once, to the first server
	// again: two of its queries are parked.
	arrived := slow.hold("q.example.", 2)
	g, clk, events := newHedged(t, slow.addr, servfail, 10*time.Millisecond)
	g.servers[1].addSample(40 * time.Millisecond)
	done := startExchange(t, g, "q.example.")
	waitTimers(t, clk, 1)
	clk.Advance(20 * time.Millisecond)
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s, want sent", e)
	}
	<-arrived
	select {
	case r := <-done:
		t.Fatalf("resolution ended on the hedge's SERVFAIL: %v", r.err)
	default:
	}
	releaseHeld(t, slow, "q.example.", 1)
	r := <-done
	if r.err != nil || r.wr.Server != slow.addr {
		t.Fatalf("reply from %s, %v; want the first server's answer", r.wr.Server, r.err)
	}
	if h := g.Hedges(); h.Won != 0 {
		t.Errorf("hedges %+v, want none won", h)
	}
	releaseHeld(t, slow, "q.example.", 0)
}

// No hedge while every server of the zone is silent: an outage is never
// amplified.
func TestNoHedgeWhileZoneSilent(t *testing.T) {
	slow, other := startHeld(t), startHeld(t)
	arrived := slow.hold("q.example.", 1)
	g, clk, events := newHedged(t, slow.addr, other.addr, 10*time.Millisecond)
	for _, s := range g.servers {
		s.mu.Lock()
		s.watching = true // suspect: each one's silence watcher at work
		s.mu.Unlock()
	}
	done := startExchange(t, g, "q.example.")
	<-arrived
	waitTimers(t, clk, 1)
	clk.Advance(time.Second) // past the tail, not the RTO
	select {
	case e := <-events:
		t.Fatalf("hedge event %s in a silent zone", e)
	default:
	}
	releaseHeld(t, slow, "q.example.", 0)
	if r := <-done; r.err != nil || r.wr.Server != slow.addr {
		t.Fatalf("reply from %s, %v; want the first server's", r.wr.Server, r.err)
	}
	if n := other.Total(); n != 0 || g.Hedges() != (HedgeCounts{}) {
		t.Errorf("other server asked %d times, hedges %+v; want none", n, g.Hedges())
	}
}

// An exploration asks another server beside the fastest at once, paid
// from the budget; the fastest's answer wins, so the client waits no
// longer for it.
func TestExplorationAsksBesideTheFastest(t *testing.T) {
	fast, explored := startHeld(t), startHeld(t)
	arrived := explored.hold("q.example.", 1)
	g, _, events := newHedged(t, fast.addr, explored.addr, 10*time.Millisecond)
	g.servers[1].addSample(300 * time.Millisecond)
	rolls := []float64{0.01, 0.5}
	g.roll = func() float64 { r := rolls[0]; rolls = rolls[1:]; return r }
	r := <-startExchange(t, g, "q.example.")
	if r.err != nil || r.wr.Server != fast.addr {
		t.Fatalf("answer from %s, %v; want the fastest's", r.wr.Server, r.err)
	}
	if e := nextEvent(t, events); e != HedgeExplore {
		t.Errorf("event %s, want explore", e)
	}
	<-arrived
	releaseHeld(t, explored, "q.example.", 0)
	if h := g.Hedges(); h != (HedgeCounts{Explored: 1}) {
		t.Errorf("hedges %+v, want 1 explored", h)
	}
	if tokens := g.budget.tokens; tokens >= hedgeBurst {
		t.Errorf("budget %v, want a token spent", tokens)
	}
}

// releaseHeld releases the i-th parked query of name once the server's
// script has parked it (its arrival is counted just before).
func releaseHeld(t *testing.T, s *heldServer, name string, i int) {
	t.Helper()
	dnstest.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.held[name]) > i
	}, waitTimeout, "the query parked")
	s.release(name, i)
}

// A next server measured slower than the first's RTO is not worth a hedge:
// the first is asked again, from a new port with a new ID, and the slow
// one is not asked.
func TestHedgeAsksTheFirstAgainWhenTheNextIsSlower(t *testing.T) {
	fast, slow := startHeld(t), startHeld(t)
	arrived := fast.hold("q.example.", 2)
	onHedge, events := hedgeEvents()
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g, err := NewGroup(".", []string{fast.addr, slow.addr}, GroupOptions{
		MinAttemptTimeout: 100 * time.Millisecond, MaxAttemptTimeout: time.Second, OnHedge: onHedge, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 }
	g.budget.tokens = hedgeBurst
	g.servers[0].addSample(10 * time.Millisecond)  // tail 20 ms, RTO 100 ms
	g.servers[1].addSample(300 * time.Millisecond) // slower than that RTO
	done := startExchange(t, g, "q.example.")
	waitTimers(t, clk, 1)
	clk.Advance(20 * time.Millisecond)
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s, want sent", e)
	}
	<-arrived
	if n := slow.Total(); n != 0 {
		t.Errorf("the slower server was asked %d times by the hedge, want 0", n)
	}
	// The hedge took no turn: at its RTO the next attempt goes to the
	// next server, as it would have without the hedge.
	third := slow.hold("q.example.", 1)
	clk.Advance(100 * time.Millisecond)
	select {
	case <-third:
	case <-time.After(waitTimeout):
		t.Fatal("the attempt after the hedge's RTO did not go to the next server")
	}
	releaseHeld(t, fast, "q.example.", 1) // either one: both are its
	if r := <-done; r.err != nil || r.wr.Server != fast.addr {
		t.Fatalf("answer from %s, %v; want the first server's", r.wr.Server, r.err)
	}
	releaseHeld(t, slow, "q.example.", 0)
	if n := fast.queries("q.example."); n != 2 {
		t.Errorf("the first server was asked %d times, want 2: the query and its hedge", n)
	}
	releaseHeld(t, fast, "q.example.", 0)
}
