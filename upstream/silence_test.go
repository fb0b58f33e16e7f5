package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// A server that goes silent is marked down within the silence bound after
// the first packet it left unanswered, though no client asks again: one
// resolution, then nothing (the failure recheck's 30 s without client
// attempts, issue 23). The watcher's probes are what keep asking.
func TestSilentServerMarkedDownWithoutClients(t *testing.T) {
	var silent atomic.Bool
	srv := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		if silent.Load() {
			return nil
		}
		return answering(t, dns.RcodeSuccess)(q, from)
	})
	events := make(chan healthEvent, 16)
	onChange := func(server string, up bool) { events <- healthEvent{server, up} }
	// The fake clock (issue 33): the silence's schedule to the
	// nanosecond, whatever the machine's load.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		MaxAttempts:   1,
		ProbeInterval: time.Hour, // only the watcher's probes
		// towerd's defaults: 3 RTOs in a row, at least 1 s, at most 5 s.
		MinAttemptTimeout: 200 * time.Millisecond,
		OnHealthChange:    onChange,
		Clock:             clk,
	}, srv)
	// An answer in no time on the clock: the RTO falls to its 200 ms floor.
	if err := exchangeFor(g, waitTimeout); err != nil {
		t.Fatal(err)
	}
	silent.Store(true)
	// Later than that reply: a reply at the instant of a send counts as
	// one to it (heardSince).
	clk.Advance(time.Second)
	recv := make(recvChan, 1)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packedQuery(t, "www.example.org.", dns.TypeA),
		Deadline: clk.Now().Add(300 * time.Millisecond)}, recv)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// waitArmed waits for n armed timers: the call's, the watch's end, and
	// the watcher's wait for the next RTO.
	waitArmed := func(when string, n int) {
		t.Helper()
		if err := clk.WaitTimers(ctx, n); err != nil {
			t.Fatalf("%s: %d timers armed, want %d: %v", when, clk.Timers(), n, err)
		}
	}
	// The schedule, with the reply's RTT 0 on this clock: each RTO is the
	// 200 ms floor (a doubled 0 is 0).
	// 200 ms: the attempt's RTO runs out: suspect; the watcher's first
	// probe, its wait one RTO.
	clk.Advance(200 * time.Millisecond)
	waitArmed("at 200ms", 3)
	// 300 ms: the resolution's deadline; the watcher goes on alone.
	clk.Advance(100 * time.Millisecond)
	if got := <-recv; !errors.Is(got.err, ErrTimeout) {
		t.Fatalf("resolution ended with %v, want ErrTimeout", got.err)
	}
	// 400 ms: the second RTO, the second probe; the third and last RTO
	// stretched to the 1 s floor of silence.
	clk.Advance(100 * time.Millisecond)
	waitArmed("at 400ms", 2)
	// Nothing fires before 1 s, so the watcher is still at its wait: no
	// change can have been made.
	clk.Advance(600*time.Millisecond - 1)
	select {
	case ev := <-events:
		t.Fatalf("a nanosecond before 1s: health change %+v", ev)
	default:
	}
	clk.Advance(1)
	select {
	case ev := <-events:
		if ev != (healthEvent{srv.addr, false}) {
			t.Fatalf("health change %+v, want %s down", ev, srv.addr)
		}
	case <-ctx.Done():
		t.Fatal("not marked down at 1s, the floor of silence")
	}
	g.Close() // the watcher and its probes are done
	probes := 0
	for _, q := range srv.received(t) {
		if isProbe(q) {
			probes++
		}
	}
	// Two probes: the client's attempt's RTO and the probes' two make three.
	if probes != 2 {
		t.Errorf("%d probes while suspect, want 2 (FailThreshold 3, the attempt's RTO the first)", probes)
	}
}

// Names a server does not answer (a resolver upstream of it that drops
// them), or answers with a reply that does not parse, say nothing about
// the server while it answers the probe: ten of each in a row leave a sole
// server up, and so does a SERVFAIL (README: an rcode or a malformed reply
// for one name never counts towards down).
func TestUnansweredNamesMarkNoServerDown(t *testing.T) {
	srv := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		name := q.Question[0].Name
		switch {
		case isProbe(q):
			return answering(t, dns.RcodeRefused)(q, from)
		case strings.HasPrefix(name, "dropped"):
			return nil
		case strings.HasPrefix(name, "malformed"):
			// Header and question as asked, one answer record announced
			// and cut short: the socket takes it, no parser reads it.
			wire := mustPack(t, replyTo(q, dns.RcodeSuccess))
			wire[7] = 1 // ANCOUNT
			return [][]byte{append(wire, 0xc0, 0x0c, 0x00)}
		case strings.HasPrefix(name, "servfail"):
			return answering(t, dns.RcodeServerFailure)(q, from)
		}
		return answering(t, dns.RcodeSuccess)(q, from)
	})
	var changes atomic.Int32
	// The fake clock (issue 33): the watcher's RTOs run out only as the
	// test steps the clock, and it steps only once the probe's reply was
	// heard. On the wall clock, a probe reply slower than three 20-40 ms
	// RTOs on a loaded machine marked the server down.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		Clock:             clk,
		MaxAttempts:       2,
		MinAttemptTimeout: 20 * time.Millisecond,
		MaxAttemptTimeout: 40 * time.Millisecond,
		MinSilence:        10 * time.Millisecond,
		ProbeInterval:     time.Hour,
		OnHealthChange:    func(string, bool) { changes.Add(1) },
	}, srv)
	s := g.servers[0]
	// watchersDone steps the clock until no silence watcher runs: each
	// has heard the probe's reply and ends at its next RTO, or marked the
	// server down.
	watchersDone := func() {
		t.Helper()
		dnstest.Eventually(t, func() bool {
			s.mu.Lock()
			watching := s.watching
			s.mu.Unlock()
			if watching {
				clk.Advance(10 * time.Millisecond)
			}
			return !watching
		}, waitTimeout, "the silence watcher to end")
	}
	for _, kind := range []string{"dropped", "malformed", "servfail"} {
		for i := range 10 {
			start := clk.Now()
			recv := startOnClock(t, g, clk, question(fmt.Sprintf("%s%d.example.", kind, i)), 100*time.Millisecond)
			if kind != "servfail" {
				// Nothing answers a dropped name, and a reply that does not
				// parse leaves its attempt waiting (a forgery may precede
				// the genuine reply): the first RTO, then, and suspicion
				// unless the server was heard since the send; the watcher's
				// probe, its reply heard before the clock moves on to the
				// deadline.
				clk.Advance(g.Servers()[0].AttemptTimeout)
				dnstest.Eventually(t, func() bool { return s.heardSince(start) }, waitTimeout, "the probe's reply")
				for clk.Now().Before(start.Add(100 * time.Millisecond)) {
					clk.Advance(time.Millisecond)
				}
			}
			_, _ = awaitReply(t, recv)
			watchersDone()
		}
	}
	if n := changes.Load(); n != 0 || g.AllDown() {
		t.Errorf("%d health changes, all down %v; want none: the server answers the probe", n, g.AllDown())
	}
	probes := 0
	for _, q := range srv.received(t) {
		if isProbe(q) {
			probes++
		}
	}
	if probes == 0 {
		t.Error("no probe: the unanswered names never made the server suspect, so this proves nothing")
	}
	if err := exchangeFor(g, waitTimeout); err != nil {
		t.Errorf("an answered name after them: %v", err)
	}
}

// After a SERVFAIL from the only server, the resolution does not ask it
// the same question again: one packet, however many MaxAttempts allows
// (dnsmasq 1, unbound 2, towerd 3 before issue 23).
func TestServFailFromSoleServerAskedOnce(t *testing.T) {
	srv := startRaw(t, answering(t, dns.RcodeServerFailure))
	// On the fake clock no RTO runs out, however late a SERVFAIL comes on
	// a loaded machine: only the SERVFAIL can end each resolution.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{MaxAttempts: 3, MinAttemptTimeout: 10 * time.Millisecond, Clock: clk}, srv)
	for i := range 5 {
		reply, err := awaitReply(t, startOnClock(t, g, clk, question(fmt.Sprintf("broken%d.example.", i)), time.Second))
		if reply == nil || reply.Rcode != dns.RcodeServerFailure || err == nil {
			t.Fatalf("Exchange = %v, %v; want the SERVFAIL with an RcodeError", reply, err)
		}
	}
	if n := srv.count(t); n != 5 {
		t.Errorf("server got %d queries for 5 names, want 5", n)
	}
	if st := g.Servers()[0]; !st.Up || st.ServFails != 5 {
		t.Errorf("server up=%v servfails=%d, want up with 5", st.Up, st.ServFails)
	}
}
