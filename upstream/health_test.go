package upstream

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// healthEvent is one OnHealthChange call.
type healthEvent struct {
	server string
	up     bool
}

// healthEvents returns a callback feeding events into a channel and a
// function that waits for the next one.
func healthEvents(t *testing.T) (func(string, bool), func() healthEvent) {
	events := make(chan healthEvent, 16)
	onChange := func(server string, up bool) { events <- healthEvent{server, up} }
	next := func() healthEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(waitTimeout):
			t.Fatal("no health change reported")
			return healthEvent{}
		}
	}
	return onChange, next
}

// exchangeFor runs one Exchange with a deadline and returns its error.
func exchangeFor(g *Group, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := g.Exchange(ctx, testQuery())
	return err
}

// exchangeOnClock runs one resolution of g, whose clock is clk, with a
// deadline d from clk's now, steps clk to that deadline a millisecond at
// a time (each timer fires at its own time, as an RTO must to count), and
// returns the resolution's error: against a silent server it has run to
// its deadline.
func exchangeOnClock(t *testing.T, g *Group, clk *dnstest.Clock, d time.Duration) error {
	t.Helper()
	recv := startOnClock(t, g, clk, testQuery(), d)
	for step := time.Millisecond; d > 0; d -= step {
		clk.Advance(min(step, d))
	}
	_, err := awaitReply(t, recv)
	return err
}

func TestGroupSkipsDownServer(t *testing.T) {
	first, second := startRaw(t, blackHole), startRaw(t, answering(t, dns.RcodeSuccess))
	events := make(chan healthEvent, 16)
	// The fake clock (issue 33): only the black-holed server's RTO runs
	// out, when the test steps the clock to it; the answering server's
	// never does, however slow its reply on a loaded machine.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		Clock:                 clk,
		MaxAttempts:           2,
		FailThreshold:         2,
		InitialAttemptTimeout: 300 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		ProbeInterval:         time.Hour, // keep probes out of the counts; Close stops the prober
		OnHealthChange:        func(server string, up bool) { events <- healthEvent{server, up} },
	}, first, second)

	for range 2 {
		// The first server is asked first; at its RTO, the second.
		rto := g.Servers()[0].AttemptTimeout
		recv := startOnClock(t, g, clk, testQuery(), waitTimeout)
		clk.Advance(rto)
		if _, err := awaitReply(t, recv); err != nil {
			t.Fatal(err)
		}
	}
	// The silence watcher marks the first server down by MaxSilence (5 s)
	// after its first unanswered packet: step the clock until it does.
	var ev healthEvent
	dnstest.Eventually(t, func() bool {
		select {
		case ev = <-events:
			return true
		default:
			clk.Advance(10 * time.Millisecond)
			return false
		}
	}, waitTimeout, "a health change")
	if ev != (healthEvent{first.addr, false}) {
		t.Fatalf("health change %+v, want %s down", ev, first.addr)
	}
	if st := g.Servers()[0]; st.Up || st.Timeouts != 2 {
		t.Errorf("first server up=%v timeouts=%d, want down after 2 timeouts", st.Up, st.Timeouts)
	}
	// The clock stands still: the second server's answer ends it.
	if _, err := awaitReply(t, startOnClock(t, g, clk, testQuery(), waitTimeout)); err != nil {
		t.Fatal(err)
	}
	if a, b := first.count(t), second.count(t); a != 2 || b != 3 {
		t.Errorf("queries first=%d second=%d, want 2 and 3: a down server is skipped", a, b)
	}
}

// A down server is probed by one prober only, however many failures pile up
// while it is down, and one good probe reply brings it back.
func TestGroupProbeBringsServerBack(t *testing.T) {
	type heldProbe struct {
		q    *dns.Msg
		from net.Addr
	}
	probes := make(chan heldProbe, 16)
	var answerQueries atomic.Bool
	srv := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		switch {
		case isProbe(q):
			probes <- heldProbe{q, from} // held: the probe stays in flight
		case answerQueries.Load():
			return answering(t, dns.RcodeSuccess)(q, from)
		}
		return nil
	})
	onChange, nextEvent := healthEvents(t)
	// The fake clock (issue 33): RTOs, the prober's interval and the held
	// probe's timeout run only as the test steps the clock, so the probe
	// stays in flight however slowly the machine runs.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		Clock:       clk,
		MaxAttempts: 1,
		// Down at the first RTO that runs out, without the silence
		// watcher's probes (silence.go): every probe here is the prober's.
		FailThreshold:         1,
		MinSilence:            time.Millisecond,
		InitialAttemptTimeout: 20 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		MaxAttemptTimeout:     time.Hour, // the probe's timeout: it stays in flight until answered
		ProbeInterval:         time.Millisecond,
		OnHealthChange:        onChange,
	}, srv)

	for range 2 {
		_ = exchangeOnClock(t, g, clk, 200*time.Millisecond) // past the 20ms RTO: the server is silent
	}
	if ev := nextEvent(); ev.up {
		t.Fatalf("health change %+v, want down", ev)
	}
	if !g.AllDown() {
		t.Error("AllDown false with the only server down")
	}
	// The prober's first wait is its interval on the clock: step it.
	var probe heldProbe
	dnstest.Eventually(t, func() bool {
		select {
		case probe = <-probes:
			return true
		default:
			clk.Advance(time.Millisecond)
			return false
		}
	}, waitTimeout, "the down server's probe")
	if !probe.q.RecursionDesired {
		t.Errorf("probe %v lacks RD", probe.q)
	}

	// Every server is down, so queries still go to this one. One success
	// brings it up, a silence takes it down again while the first probe is
	// still in flight, and more failures pile up: none of it may start a
	// second prober.
	answerQueries.Store(true)
	// The clock stands still: only the answer ends it.
	if _, err := awaitReply(t, startOnClock(t, g, clk, testQuery(), time.Second)); err != nil {
		t.Fatalf("all-down group did not try its server: %v", err)
	}
	if ev := nextEvent(); !ev.up {
		t.Fatalf("health change %+v, want up after a good reply", ev)
	}
	answerQueries.Store(false)
	for range 2 {
		_ = exchangeOnClock(t, g, clk, 200*time.Millisecond) // past the 20ms RTO: the server is silent
	}
	if ev := nextEvent(); ev.up {
		t.Fatalf("health change %+v, want down again", ev)
	}
	_ = exchangeOnClock(t, g, clk, 50*time.Millisecond)
	if got := srv.count(t); got != 6 {
		t.Errorf("server got %d queries, want 6", got)
	}
	if n := len(probes); n != 0 {
		t.Fatalf("%d more probes while one was in flight, want 0", n)
	}

	// Any well-formed reply proves the server is back.
	answer := replyTo(probe.q, dns.RcodeNameError)
	if _, err := srv.conn.WriteTo(mustPack(t, answer), probe.from); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(); ev != (healthEvent{srv.addr, true}) {
		t.Fatalf("health change %+v, want %s up", ev, srv.addr)
	}
	if !g.Servers()[0].Up || g.AllDown() {
		t.Error("server still down after a good probe")
	}
	if n := len(probes); n != 0 {
		t.Errorf("%d probes after the server came back, want 0", n)
	}
}

// A fake clock advanced by the server makes every RTT sample exactly 40ms,
// so the RFC 6298 arithmetic can be checked to the nanosecond.
func TestGroupAttemptTimeoutFollowsRTT(t *testing.T) {
	clock := dnstest.NewClock(time.Unix(1700000000, 0))
	srv := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		clock.Advance(40 * time.Millisecond)
		return answering(t, dns.RcodeSuccess)(q, from)
	})
	g := newGroup(t, GroupOptions{
		InitialAttemptTimeout: 500 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		Clock:                 clock,
	}, srv)

	want := []time.Duration{
		500 * time.Millisecond, // no sample yet
		120 * time.Millisecond, // srtt 40, rttvar 20
		100 * time.Millisecond, // rttvar 15
		85 * time.Millisecond,  // rttvar 11.25
	}
	for i, w := range want {
		if i > 0 {
			if err := exchangeFor(g, waitTimeout); err != nil {
				t.Fatal(err)
			}
		}
		st := g.Servers()[0]
		if st.AttemptTimeout != w {
			t.Errorf("after %d samples: attempt timeout %s, want %s", i, st.AttemptTimeout, w)
		}
		if i > 0 && st.SRTT != 40*time.Millisecond {
			t.Errorf("after %d samples: srtt %s, want 40ms", i, st.SRTT)
		}
	}
}

// Each timeout doubles the next attempt's timeout (RFC 6298 section 5.5),
// so a server that got slower than its old RTO still gets a chance to answer.
func TestGroupAttemptTimeoutBacksOff(t *testing.T) {
	srv := startRaw(t, blackHole)
	// The fake clock (issue 33): a deadline is the caller's or past the
	// RTO exactly as the test says, however late a timer runs.
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		Clock:                 clk,
		MaxAttempts:           1,
		InitialAttemptTimeout: 20 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		MaxAttemptTimeout:     200 * time.Millisecond,
		// Down at once, so no silence watcher's RTOs (silence.go) add
		// doublings of their own: only the attempts' are counted here.
		FailThreshold: 1,
		MinSilence:    time.Millisecond,
		ProbeInterval: time.Hour,
	}, srv)
	check := func(when string, want time.Duration, wantTimeouts uint64) {
		t.Helper()
		if st := g.Servers()[0]; st.AttemptTimeout != want || st.Timeouts != wantTimeouts {
			t.Errorf("%s: attempt timeout %s after %d timeouts, want %s after %d",
				when, st.AttemptTimeout, st.Timeouts, want, wantTimeouts)
		}
	}
	// The resolution runs to its deadline; 300ms is past every RTO here.
	for i, want := range []time.Duration{40, 80, 160} {
		_ = exchangeOnClock(t, g, clk, 300*time.Millisecond)
		check("own timeout", want*time.Millisecond, uint64(i+1))
	}
	// A timeout caused by the caller's short deadline is not the server's.
	_ = exchangeOnClock(t, g, clk, time.Millisecond)
	check("caller's deadline", 160*time.Millisecond, 4)
	_ = exchangeOnClock(t, g, clk, 300*time.Millisecond)
	check("clamped", 200*time.Millisecond, 5)
}

func TestGroupCloseStopsProbeInFlight(t *testing.T) {
	probed := make(chan struct{}, 16)
	srv := startRaw(t, func(q *dns.Msg, _ net.Addr) [][]byte {
		if isProbe(q) {
			probed <- struct{}{}
		}
		return nil
	})
	g, err := NewGroup(".", []string{srv.addr}, GroupOptions{
		MaxAttempts:           1,
		FailThreshold:         1,
		MinSilence:            time.Millisecond,
		InitialAttemptTimeout: 10 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		MaxAttemptTimeout:     time.Hour,
		ProbeInterval:         time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = exchangeFor(g, 200*time.Millisecond)
	select {
	case <-probed:
	case <-time.After(waitTimeout):
		t.Fatal("down server was never probed")
	}
	// The probe would wait an hour; Close must cut it short, twice safely.
	// waitTimeout only keeps a broken Close from hanging the test: no
	// bound on how fast it is (issue 33).
	closed := make(chan error, 1)
	go func() {
		err := g.Close()
		if err == nil {
			err = g.Close()
		}
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close did not cut the hour-long probe short")
	}
}

func TestNextProbeInterval(t *testing.T) {
	for _, tt := range []struct{ in, want time.Duration }{
		{time.Second, 2 * time.Second},
		{4 * time.Second, 5 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{time.Minute, time.Minute}, // configured above the cap: kept
	} {
		if got := nextProbeInterval(tt.in); got != tt.want {
			t.Errorf("nextProbeInterval(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// AllDownSignal's channel closes when the last healthy server goes down, not
// before, and a server coming back gives a new open channel while the old one
// stays closed (a waiter already woken stays woken).
func TestGroupAllDownSignal(t *testing.T) {
	var firstAnswers atomic.Bool
	first := startRaw(t, func(q *dns.Msg, from net.Addr) [][]byte {
		if firstAnswers.Load() {
			return answering(t, dns.RcodeSuccess)(q, from)
		}
		return nil
	})
	second := startRaw(t, blackHole)
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		Clock:                 clk,
		MaxAttempts:           1,
		FailThreshold:         1,
		MinSilence:            time.Millisecond,
		InitialAttemptTimeout: 20 * time.Millisecond,
		MinAttemptTimeout:     10 * time.Millisecond,
		ProbeInterval:         time.Hour, // only live traffic brings a server back here
	}, first, second)

	signal := g.AllDownSignal()
	if isClosed(signal) {
		t.Fatal("signal closed with every server up")
	}
	// The silence watcher marks a server down on its own goroutine: wait
	// for that, never assume it ran by the time the resolution ended.
	waitDown := func(i int) {
		t.Helper()
		dnstest.Eventually(t, func() bool { return !g.Servers()[i].Up }, waitTimeout, fmt.Sprintf("server %d marked down", i))
	}
	_ = exchangeOnClock(t, g, clk, 200*time.Millisecond) // the first server times out and goes down
	waitDown(0)
	if isClosed(signal) || g.AllDown() {
		t.Fatal("signal closed with the second server still up")
	}
	_ = exchangeOnClock(t, g, clk, 200*time.Millisecond) // and now the second
	select {
	case <-signal:
	case <-time.After(waitTimeout): // a bound against hanging, not a speed
		t.Fatalf("signal still open after the second server's silence: servers %+v", g.Servers())
	}
	if !g.AllDown() || !isClosed(g.AllDownSignal()) {
		t.Fatalf("servers %+v, want both down and the signal closed", g.Servers())
	}

	firstAnswers.Store(true)
	// The clock stands still: only the first server's answer ends it.
	if _, err := awaitReply(t, startOnClock(t, g, clk, testQuery(), time.Second)); err != nil { // all down: every server is tried
		t.Fatalf("all-down group did not reach its answering server: %v", err)
	}
	if g.AllDown() || isClosed(g.AllDownSignal()) {
		t.Error("signal closed after a server came back")
	}
	if !isClosed(signal) {
		t.Error("the channel handed out while all were down reopened")
	}
}
