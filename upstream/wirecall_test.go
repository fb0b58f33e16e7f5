package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// recvChan is a WireReceiver that keeps what it gets.
type recvChan chan wireOutcome

func (r recvChan) ReceiveWire(wr WireReply, err error) {
	if wr.Raw != nil {
		wr.Raw = append([]byte(nil), wr.Raw...)
	}
	r <- wireOutcome{wr, err}
}

// A resolution waiting for its first reply has no goroutine watching its
// context: Kick hands it to one, which ends it as cancelled, the server's
// silence not counted against it (the caller gave up, not the server).
func TestStartWireKick(t *testing.T) {
	u := dnstest.NewUpstream(t)
	u.SetFault("drop.example.", dnstest.Fault{Drop: true})
	// An RTO and a deadline far beyond the test's life: only Kick ends it.
	g, err := NewGroup(".", []string{u.Addr}, GroupOptions{InitialAttemptTimeout: time.Hour, MaxAttemptTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	recv := make(recvChan, 2)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: ctx, Packed: packedQuery(t, "drop.example.", dns.TypeA), Deadline: time.Now().Add(time.Hour)}, recv)
	cancel()
	c.Kick()
	got := <-recv
	if !errors.Is(got.err, context.Canceled) || got.wr.Raw != nil {
		t.Fatalf("got %+v, %v; want cancelled", got.wr, got.err)
	}
	c.Kick() // ended: nothing happens
	if len(recv) != 0 {
		t.Error("the receiver was called twice")
	}
	// The one query may still be on its way to the server.
	if n := u.Count("drop.example.", dns.TypeA); n > 1 {
		t.Errorf("%d attempts, want at most 1", n)
	}
	if g.AllDown() {
		t.Error("a cancelled resolution marked the server down")
	}
}

// A first attempt sent inline whose RTO runs out is resent by the
// resolution loop, and the slow server's reply to any attempt is heard,
// as bytes.
func TestStartWireRetransmits(t *testing.T) {
	u := dnstest.NewUpstream(t)
	u.Add(t, "slow.example. 60 IN A 192.0.2.7")
	u.SetFault("slow.example.", dnstest.Fault{Delay: 500 * time.Millisecond})
	g, err := NewGroup(".", []string{u.Addr}, GroupOptions{MinAttemptTimeout: 10 * time.Millisecond,
		InitialAttemptTimeout: 10 * time.Millisecond, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	recv := make(recvChan, 1)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packedQuery(t, "slow.example.", dns.TypeA),
		Deadline: time.Now().Add(10 * time.Second)}, recv)
	got := <-recv
	if got.err != nil || got.wr.Raw == nil || got.wr.Server != u.Addr {
		t.Fatalf("got %+v, %v; want the reply as bytes", got.wr, got.err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(got.wr.Raw); err != nil || len(m.Answer) != 1 {
		t.Fatalf("reply %v, %v", m, err)
	}
	if n := u.Count("slow.example.", dns.TypeA); n != 2 {
		t.Errorf("%d attempts, want 2 (the inline one and its retransmission)", n)
	}
}
