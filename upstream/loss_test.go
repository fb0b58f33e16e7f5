package upstream

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// The lossy day (issue 36) on the fake clock: one server whose replies
// take 100 ± 50 ms, and lost packets. Each lost packet is hedged at the
// replies' 98th percentile, to the same server from a new port, and
// answered a round trip later; what the lost packet waited is no
// measure of the server (it answered the later packet first), so the
// estimates stay the replies': the next loss is hedged as early, and the
// RTO does not grow. Counted as a lower bound, each loss raised srtt by
// a sixteenth of an RTO and rttvar by a third, and the tail rose to the
// RTO, where no hedge goes out.
func TestLostPacketsAreHedgedAtTheRepliesTail(t *testing.T) {
	srv, g, clk, events := lossyGroup(t)
	g.budget.tokens = hedgeBurst
	s := g.servers[0]
	sample(s, rand.New(rand.NewPCG(5, 6)), 500, 100*time.Millisecond, 50*time.Millisecond)
	before := g.Servers()[0]
	if before.Tail < 140*time.Millisecond || before.Tail > 150*time.Millisecond {
		t.Fatalf("tail %s of U(50 ms, 150 ms), want its p98, within [140 ms, 150 ms]", before.Tail)
	}
	for i := range 8 {
		name := fmt.Sprintf("lost%d.example.", i)
		arrived := srv.hold(name, 2)
		tail := g.Servers()[0].Tail
		done := startExchange(t, g, name)
		// Parked before the hedge is sent: the hedge is the second.
		dnstest.Eventually(t, func() bool {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			return len(srv.held[name]) == 1
		}, waitTimeout, "the first query parked")
		waitTimers(t, clk, 1)
		clk.Advance(tail - time.Nanosecond)
		select {
		case e := <-events:
			t.Fatalf("loss %d: hedge event %s before the tail", i, e)
		default:
		}
		clk.Advance(time.Nanosecond)
		if e := nextEvent(t, events); e != HedgeSent {
			t.Fatalf("loss %d: event %s at the tail %s, want sent", i, e, tail)
		}
		<-arrived // the lost query (parked for good) and the hedge
		clk.Advance(100 * time.Millisecond)
		releaseHeld(t, srv, name, 1)
		if r := <-done; r.err != nil || !r.wr.Hedge {
			t.Fatalf("loss %d: hedge %v, %v; want the hedge's answer", i, r.wr.Hedge, r.err)
		}
		if e := nextEvent(t, events); e != HedgeWon {
			t.Fatalf("loss %d: event %s, want won", i, e)
		}
		releaseHeld(t, srv, name, 0) // its socket is closed: dropped
	}
	after := g.Servers()[0]
	if after.Tail < 140*time.Millisecond || after.Tail > 150*time.Millisecond {
		t.Errorf("tail %s after the losses, was %s: want it to stay the replies' p98", after.Tail, before.Tail)
	}
	// The hedges' replies (100 ms each) move srtt towards 100 ms; a lost
	// packet's wait would push it up.
	if after.SRTT > max(before.SRTT, 100*time.Millisecond)+time.Millisecond {
		t.Errorf("srtt %s after the losses, was %s: a lost packet raised it", after.SRTT, before.SRTT)
	}
	if after.AttemptTimeout > before.AttemptTimeout+10*time.Millisecond {
		t.Errorf("RTO %s after the losses, was %s: a lost packet moved it", after.AttemptTimeout, before.AttemptTimeout)
	}
	if h := g.Hedges(); h != (HedgeCounts{Sent: 8, Won: 8}) {
		t.Errorf("hedges %+v, want 8 sent, 8 won", h)
	}
}

// The tail is the 98th percentile of the latest tailWindow replies: two
// stalled replies in the window do not move it, a third does, and the
// stall is forgotten once tailWindow replies came after it. What an
// overtaken attempt waited is no reply and leaves it alone.
func TestTailWindowForgetsAStall(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := &server{}
	sample(s, rng, 300, 100*time.Millisecond, 50*time.Millisecond)
	raw := func() time.Duration { s.mu.Lock(); defer s.mu.Unlock(); return s.tail }
	base := raw()
	if base < 140*time.Millisecond || base > 150*time.Millisecond {
		t.Fatalf("tail %s of U(50 ms, 150 ms), want within [140 ms, 150 ms]", base)
	}
	for range 10 {
		s.addLowerBound(time.Second)
	}
	if got := raw(); got != base {
		t.Errorf("tail %s after lower bounds, was %s: only replies move it", got, base)
	}
	s.addSample(time.Second)
	s.addSample(time.Second)
	if got := raw(); got > 150*time.Millisecond {
		t.Errorf("tail %s after two stalled replies, want still the others' (at most 150 ms)", got)
	}
	s.addSample(time.Second)
	if got := raw(); got != time.Second {
		t.Errorf("tail %s after three stalled replies in %d, want 1s", got, tailWindow)
	}
	sample(s, rng, tailWindow, 100*time.Millisecond, 50*time.Millisecond)
	if got := raw(); got < 140*time.Millisecond || got > 150*time.Millisecond {
		t.Errorf("tail %s %d replies after the stall, want back within [140 ms, 150 ms]", got, tailWindow)
	}
}

// The estimate kept as replies come (most of them leave it alone) is
// the window's quantile read afresh, ties and stalls included.
func TestTailWindowKeptAsRepliesCome(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	s := &server{}
	for i := range 5000 {
		d := time.Duration(rng.IntN(50)) * time.Millisecond // many ties
		if i%300 == 0 {
			d = time.Second
		}
		s.addSample(d)
		held := slices.Clone(s.tailRing[:s.tailHeld])
		slices.Sort(held)
		want := held[int(math.Ceil(tailQuantile*float64(len(held))))-1]
		if s.tailQ != want {
			t.Fatalf("reply %d: estimate %s, the window's 98th percentile is %s", i, s.tailQ, want)
		}
	}
}

// A hedge that won while its first attempt, unanswered, had waited past
// its RTO took the place of the retransmission the resolution would have
// sent anyway: its token comes back, so a lossy server's lost packets do
// not spend the budget. One that won earlier was a packet more, and keeps
// its token spent. With one token: a lost packet whose hedge answers after
// the RTO leaves the token for the next loss; that one's hedge answers
// before the RTO, so the third loss finds the budget empty.
func TestHedgeInPlaceOfARetransmissionIsRefunded(t *testing.T) {
	srv, g, clk, events := lossyGroup(t)
	sample(g.servers[0], rand.New(rand.NewPCG(11, 12)), 500, 100*time.Millisecond, 50*time.Millisecond)
	g.budget.tokens = 1
	st := g.Servers()[0]
	tail, rto := st.Tail, st.AttemptTimeout
	if tail+20*time.Millisecond >= rto {
		t.Fatalf("tail %s, RTO %s: want the tail well before the RTO", tail, rto)
	}
	// lose asks name, its first query lost (parked for good); the
	// hedge's reply comes after more (from the hedge), and the event
	// at the tail is returned.
	lose := func(name string, after time.Duration) (string, <-chan exchangeResult) {
		t.Helper()
		arrived := srv.hold(name, 2)
		done := startExchange(t, g, name)
		dnstest.Eventually(t, func() bool {
			srv.mu.Lock()
			defer srv.mu.Unlock()
			return len(srv.held[name]) == 1
		}, waitTimeout, "the first query parked")
		waitTimers(t, clk, 1)
		clk.Advance(tail)
		e := nextEvent(t, events)
		if e != HedgeSent {
			return e, done
		}
		<-arrived
		clk.Advance(after)
		releaseHeld(t, srv, name, 1)
		if r := <-done; r.err != nil || !r.wr.Hedge {
			t.Fatalf("%s: hedge %v, %v; want the hedge's answer", name, r.wr.Hedge, r.err)
		}
		if e := nextEvent(t, events); e != HedgeWon {
			t.Fatalf("%s: event %s, want won", name, e)
		}
		releaseHeld(t, srv, name, 0)
		return HedgeSent, done
	}
	// Answered 1 ms past the first's RTO (the hedge's own RTO is later).
	if e, _ := lose("past.example.", rto-tail+time.Millisecond); e != HedgeSent {
		t.Fatalf("first loss: event %s, want sent", e)
	}
	// Answered 10 ms after the hedge, before the first's RTO.
	if e, _ := lose("early.example.", 10*time.Millisecond); e != HedgeSent {
		t.Fatalf("second loss: event %s, want sent (the first hedge's token given back)", e)
	}
	e, done := lose("third.example.", 0)
	if e != HedgeRefused {
		t.Fatalf("third loss: event %s, want refused (the second hedge was a packet more)", e)
	}
	releaseHeld(t, srv, "third.example.", 0)
	if r := <-done; r.err != nil || r.wr.Hedge {
		t.Fatalf("third loss: hedge %v, %v; want the first attempt's answer", r.wr.Hedge, r.err)
	}
	if h := g.Hedges(); h != (HedgeCounts{Sent: 2, Won: 2, Refused: 1}) {
		t.Errorf("hedges %+v, want 2 sent, 2 won, 1 refused", h)
	}
}

// lossyGroup is the group of the loss tests: one held server (its
// queries answered or lost as the test says), RTOs from 100 ms, the
// fake clock, and the hedge events.
func lossyGroup(t *testing.T) (*heldServer, *Group, *dnstest.Clock, <-chan string) {
	t.Helper()
	srv := startHeld(t)
	onHedge, events := hedgeEvents()
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g, err := NewGroup(".", []string{srv.addr}, GroupOptions{
		MinAttemptTimeout: 100 * time.Millisecond, MaxAttemptTimeout: 2 * time.Second, OnHedge: onHedge, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return srv, g, clk, events
}
