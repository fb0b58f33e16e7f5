package upstream

import (
	"context"
	"errors"
	"io"
	"net"
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

// Nothing watches a resolution's context: Kick, after the context is
// done, ends it as cancelled, the server's silence not counted against it
// (the caller gave up, not the server).
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

// A first attempt whose RTO runs out is resent by the call's timer, and
// the slow server's reply to any attempt is heard, as bytes.
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

// The one end waits for a TCP retry still running: an answer to the next
// attempt that arrives while the first server's TC reply is being asked
// again over TCP (a connection that never answers) ends the resolution at
// once, the retry cancelled, and the answer, read into the attempt
// reader's buffer, is delivered intact after the retry returned.
func TestStartWireAnswerWhileTCPRetryRuns(t *testing.T) {
	pc, ln := dnstest.ListenPair(t)
	go func() { // UDP: every query answered TC, no records
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			r := new(dns.Msg).SetReply(q)
			r.Truncated = true
			if out, err := r.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	accepted := make(chan net.Conn, 1)
	go func() { // TCP: the retry's connection is held, never answered
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	b := dnstest.NewUpstream(t)
	b.Add(t, "both.example. 60 IN A 192.0.2.9")
	g, err := NewGroup(".", []string{pc.LocalAddr().String(), b.Addr}, GroupOptions{
		MinAttemptTimeout: 20 * time.Millisecond, InitialAttemptTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	recv := make(recvChan, 1)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packedQuery(t, "both.example.", dns.TypeA),
		Deadline: time.Now().Add(time.Hour)}, recv)
	var conn net.Conn
	select {
	case conn = <-accepted:
		defer conn.Close()
	case <-time.After(waitTimeout):
		t.Fatal("no TCP retry reached the first server")
	}
	var got wireOutcome
	select {
	case got = <-recv:
	case <-time.After(waitTimeout):
		t.Fatal("the answer did not end the resolution")
	}
	if got.err != nil || got.wr.Server != b.Addr {
		t.Fatalf("got %+v, %v; want the second server's answer", got.wr, got.err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(got.wr.Raw); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.9" {
		t.Fatalf("reply %v, %v; want one A 192.0.2.9", m, err)
	}
	// The retry was cancelled: its connection is closed by towerd.
	_ = conn.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadAll(conn); err != nil {
		t.Errorf("the retry's connection was not closed: %v", err)
	}
}
