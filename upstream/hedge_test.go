package upstream

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
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

// The chosen server holds the question: the hedge goes to the next server,
// whose answer wins; the first server's late reply, released afterwards,
// is dropped with its socket, and what it was overtaken by is its latency.
func TestHedgeGoesToTheNextServerAndWins(t *testing.T) {
	slow, fast := startHeld(t), startHeld(t)
	arrived := slow.hold("late.example.", 1)
	onHedge, events := hedgeEvents()
	g, err := NewGroup(".", []string{slow.addr, fast.addr}, GroupOptions{
		MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, OnHedge: onHedge,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 }
	warm(t, g)
	g.servers[1].addSample(time.Millisecond) // the first listed is the faster
	before := g.Servers()[0].SRTT

	wr, err := wireExchange(t, g, "late.example.")
	if err != nil || wr.Server != fast.addr {
		t.Fatalf("answer from %s, %v; want the hedge's, from %s", wr.Server, err, fast.addr)
	}
	if e1, e2 := nextEvent(t, events), nextEvent(t, events); e1 != HedgeSent || e2 != HedgeWon {
		t.Errorf("hedge events %s, %s; want sent, won", e1, e2)
	}
	<-arrived
	slow.release("late.example.", 0)
	if h := g.Hedges(); h != (HedgeCounts{Sent: 1, Won: 1}) {
		t.Errorf("hedges %+v, want 1 sent, 1 won", h)
	}
	st := g.Servers()
	if st[0].Superseded != 1 || st[0].Timeouts != 0 || !st[0].Up {
		t.Errorf("overtaken server: %+v; want 1 superseded, no timeout, up", st[0])
	}
	if st[0].SRTT <= before {
		t.Errorf("overtaken server's srtt %s, want above %s: it took at least until the hedge's answer", st[0].SRTT, before)
	}
	// The late reply broke nothing: the next question is answered.
	if _, err := wireExchange(t, g, "next.example."); err != nil {
		t.Errorf("next question: %v", err)
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

// newHedged is a group over slow (listed first) and other, both measured
// alike, whose RTO (waitTimeout) never comes in a test: only a hedge asks
// the second server.
func newHedged(t *testing.T, slow, other string, rtt time.Duration) (*Group, <-chan string) {
	t.Helper()
	onHedge, events := hedgeEvents()
	g, err := NewGroup(".", []string{slow, other}, GroupOptions{
		MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, OnHedge: onHedge,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 }
	for _, s := range g.servers {
		s.addSample(rtt)
	}
	return g, events
}

// Without a token the hedge is refused, counted, and the first attempt
// waits as it would have without hedging: the other server is not asked.
func TestHedgeRefusedByBudget(t *testing.T) {
	slow, other := startHeld(t), startHeld(t)
	arrived := slow.hold("q.example.", 1)
	g, events := newHedged(t, slow.addr, other.addr, 200*time.Microsecond)
	g.budget.tokens = 0
	done := make(chan error, 1)
	go func() {
		_, err := wireExchange(t, g, "q.example.")
		done <- err
	}()
	if e := nextEvent(t, events); e != HedgeRefused {
		t.Fatalf("event %s, want refused", e)
	}
	<-arrived
	slow.release("q.example.", 0)
	if err := <-done; err != nil {
		t.Fatal(err)
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
	g, events := newHedged(t, slow.addr, servfail, 200*time.Microsecond)
	type result struct {
		wr  WireReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		wr, err := wireExchange(t, g, "q.example.")
		done <- result{wr, err}
	}()
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s, want sent", e)
	}
	<-arrived
	select {
	case r := <-done:
		t.Fatalf("resolution ended on the hedge's SERVFAIL: %v", r.err)
	default:
	}
	slow.release("q.example.", 0)
	r := <-done
	if r.err != nil || r.wr.Server != slow.addr {
		t.Fatalf("reply from %s, %v; want the first server's answer", r.wr.Server, r.err)
	}
	if h := g.Hedges(); h.Won != 0 {
		t.Errorf("hedges %+v, want none won", h)
	}
}

// No hedge while every server of the zone is silent (an outage is never
// amplified); one server heard from again, and the hedge goes out.
func TestNoHedgeWhileZoneSilent(t *testing.T) {
	slow, other := startHeld(t), startHeld(t)
	arrived := slow.hold("q.example.", 1)
	// Estimates of seconds: the hedge is armed (tail 8 s, RTO 10 s) but
	// never falls due by itself; the test makes it due.
	g, events := newHedged(t, slow.addr, other.addr, 4*time.Second)
	for _, s := range g.servers {
		s.mu.Lock()
		s.watching = true // suspect: each one's silence watcher at work
		s.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	packed, _ := question("q.example.").Pack()
	ch := make(wireWait, 1)
	c := new(WireCall)
	g.StartWire(c, WireQuery{Ctx: ctx, Packed: packed}, ch)
	<-arrived
	hedge := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.hedgeAt.IsZero() {
			t.Fatal("no hedge armed")
		}
		if c.hedgeLocked() {
			t.Fatal("the hedge ended the resolution")
		}
		return len(c.attempts)
	}
	if n := hedge(); n != 1 {
		t.Fatalf("%d attempts after a hedge fell due in a silent zone, want 1", n)
	}
	select {
	case e := <-events:
		t.Fatalf("hedge event %s in a silent zone", e)
	default:
	}

	g.servers[1].mu.Lock()
	g.servers[1].watching = false // heard from again
	g.servers[1].mu.Unlock()
	c.mu.Lock()
	c.hedgeAt = time.Now()
	c.mu.Unlock()
	if n := hedge(); n != 2 {
		t.Fatalf("%d attempts, want the hedge sent once a server is not silent", n)
	}
	o := <-ch
	if o.err != nil || o.wr.Server != other.addr {
		t.Fatalf("reply from %s, %v; want the hedge's", o.wr.Server, o.err)
	}
	slow.release("q.example.", 0)
}
