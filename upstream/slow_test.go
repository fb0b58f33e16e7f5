package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// heldServer is a test upstream that parks each query of a "slow" name
// until the test releases it, and answers every other name at once (or
// after the delay set for it). Each reply carries 192.0.2.N for the Nth
// query of its name, so the test sees which attempt's reply won.
type heldServer struct {
	*dnstest.Upstream
	addr string

	mu   sync.Mutex
	seen map[string]int             // queries per name
	held map[string][]chan struct{} // per slow name, one release per query
}

func startHeld(t *testing.T) *heldServer {
	t.Helper()
	u := dnstest.NewUpstream(t)
	s := &heldServer{Upstream: u, addr: u.Addr, seen: map[string]int{}, held: map[string][]chan struct{}{}}
	u.SetScript(func(q *dns.Msg, _ string) *dns.Msg {
		name := strings.ToLower(q.Question[0].Name)
		s.mu.Lock()
		s.seen[name]++
		n := s.seen[name]
		var release chan struct{}
		if queue, slow := s.held[name]; slow {
			release = make(chan struct{})
			s.held[name] = append(queue, release)
		}
		s.mu.Unlock()
		if release != nil {
			select {
			case <-release:
			case <-u.Stopped():
				return nil
			}
		}
		return replyTo(q, dns.RcodeSuccess, fmt.Sprintf("192.0.2.%d", n))
	})
	return s
}

// hold makes name slow: its queries are parked; the returned channel closes
// once n of them arrived.
func (s *heldServer) hold(name string, n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[name] = []chan struct{}{}
	return s.Arrived(name, n)
}

// release lets the i-th (0-based) parked query of name be answered.
func (s *heldServer) release(name string, i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.held[name][i])
}

func (s *heldServer) queries(name string) int { return s.Count(name, dns.TypeA) }

// delay makes the server answer name after d (the fault under test).
func (s *heldServer) delay(name string, d time.Duration) {
	s.SetFault(name, dnstest.Fault{Delay: d})
}

func question(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	return m
}

// The reply to the first attempt, arriving after the third attempt went
// out, wins: its socket was kept open (issue 11). The server sees no more
// than MaxAttempts queries, and the slow server is not marked down.
func TestGroupLateReplyToFirstAttemptWins(t *testing.T) {
	srv := startHeld(t)
	all := srv.hold("slow.example.", 3)
	g, err := NewGroup(".", []string{srv.addr}, GroupOptions{
		MinAttemptTimeout:     10 * time.Millisecond,
		InitialAttemptTimeout: 10 * time.Millisecond,
		FailThreshold:         1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	type result struct {
		reply *dns.Msg
		err   error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		reply, err := g.Exchange(ctx, question("slow.example."))
		done <- result{reply, err}
	}()
	select {
	case <-all:
	case <-time.After(waitTimeout):
		t.Fatal("the server never saw three attempts")
	}
	srv.release("slow.example.", 0)
	var r result
	select {
	case r = <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Exchange did not return after the first attempt was answered")
	}
	if r.err != nil || r.reply.Rcode != dns.RcodeSuccess || firstA(r.reply) != "192.0.2.1" {
		t.Fatalf("Exchange = %v, %v; want NOERROR with the first attempt's 192.0.2.1", r.reply, r.err)
	}
	if n := srv.queries("slow.example."); n != 3 {
		t.Errorf("server saw %d queries, want 3 (MaxAttempts)", n)
	}
	st := g.Servers()[0]
	if !st.Up || st.Timeouts != 0 || st.Superseded != 2 {
		t.Errorf("server up=%v timeouts=%d superseded=%d; want up, 0 timeouts, 2 superseded", st.Up, st.Timeouts, st.Superseded)
	}
}

// A server that turns slow after fast replies (fixed 250ms, 700ms, 1.5s) is
// answered within the resolution's budget, never given up on after
// MaxAttempts RTOs, with at most MaxAttempts queries per name.
func TestGroupSlowServerIsAnswered(t *testing.T) {
	srv := startHeld(t)
	// towerd's defaults: attempts between 200ms and 1.5s, a 5s budget.
	g, err := NewGroup(".", []string{srv.addr}, GroupOptions{
		MinAttemptTimeout: 200 * time.Millisecond,
		MaxAttemptTimeout: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	exchange := func(name string) (*dns.Msg, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return g.Exchange(ctx, question(name))
	}
	for i := range 5 {
		if _, err := exchange(fmt.Sprintf("fast%d.example.", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []time.Duration{250 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond} {
		name := fmt.Sprintf("slow-%dms.example.", d.Milliseconds())
		srv.delay(name, d)
		reply, err := exchange(name)
		if err != nil || reply.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: Exchange = %v, %v; want NOERROR", name, reply, err)
		}
		if n := srv.queries(name); n > 3 {
			t.Errorf("%s: server saw %d queries, want at most 3", name, n)
		}
	}
	if st := g.Servers()[0]; !st.Up || st.Timeouts != 0 {
		t.Errorf("slow server up=%v timeouts=%d, want up without timeouts", st.Up, st.Timeouts)
	}
}

// SERVFAIL for one name says nothing about the server: a hundred such names
// mark neither server down, and the resolution still tries both.
func TestGroupServFailNamesMarkNoServerDown(t *testing.T) {
	servfail := func(q *dns.Msg, _ string) *dns.Msg {
		r := new(dns.Msg)
		r.SetRcode(q, dns.RcodeServerFailure)
		return r
	}
	a, b := scripted(t, servfail), scripted(t, servfail)
	var changes atomic.Int32
	g, err := NewGroup(".", []string{a, b}, GroupOptions{
		OnHealthChange: func(string, bool) { changes.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		reply, err := g.Exchange(ctx, question(fmt.Sprintf("broken%d.example.", i)))
		cancel()
		var rcodeErr *RcodeError
		if !errors.As(err, &rcodeErr) || reply == nil || reply.Rcode != dns.RcodeServerFailure {
			t.Fatalf("name %d: Exchange = %v, %v; want SERVFAIL with an RcodeError", i, reply, err)
		}
	}
	if n := changes.Load(); n != 0 || g.AllDown() {
		t.Errorf("%d health changes, all down %v; want none", n, g.AllDown())
	}
	for _, st := range g.Servers() {
		if !st.Up || st.ServFails < 100 {
			t.Errorf("%s: up=%v servfails=%d, want up after >= 100 SERVFAILs", st.Address, st.Up, st.ServFails)
		}
	}
}

// The probe counts any well-formed reply as up, whatever its rcode: an
// authoritative-only secondary that REFUSEs ". NS" is alive. The probe asks
// GroupOptions.ProbeName when set.
func TestGroupProbeAnyRcodeIsUp(t *testing.T) {
	for _, tt := range []struct {
		probeName, wantName string
		rcode               int
	}{
		{"", ".", dns.RcodeRefused},
		{"", ".", dns.RcodeServerFailure},
		{"", ".", dns.RcodeNotImplemented},
		{"site.example", "site.example.", dns.RcodeRefused},
		{"site.example.", "site.example.", dns.RcodeSuccess},
	} {
		t.Run(fmt.Sprintf("%s %s", tt.wantName, dns.RcodeToString[tt.rcode]), func(t *testing.T) {
			probes := make(chan dns.Question, 16)
			srv := startRaw(t, func(q *dns.Msg, _ net.Addr) [][]byte {
				if q.Question[0].Name == tt.wantName && q.Question[0].Qtype == dns.TypeNS {
					probes <- q.Question[0]
					return [][]byte{mustPack(t, replyTo(q, tt.rcode))}
				}
				return nil // every real query is black-holed
			})
			onChange, nextEvent := healthEvents(t)
			g := newGroup(t, GroupOptions{
				// Down at the first RTO, before any probe of the silence
				// watcher's (which this server would answer): the probes
				// are the prober's.
				MaxAttempts: 1, FailThreshold: 1, MinSilence: time.Millisecond,
				InitialAttemptTimeout: 10 * time.Millisecond, MinAttemptTimeout: 10 * time.Millisecond,
				ProbeInterval: time.Millisecond, ProbeName: tt.probeName,
				OnHealthChange: onChange,
			}, srv)
			_ = exchangeFor(g, 100*time.Millisecond) // black-holed: down
			if ev := nextEvent(); ev.up {
				t.Fatalf("health change %+v, want down", ev)
			}
			if ev := nextEvent(); !ev.up {
				t.Fatalf("health change %+v, want up after a %s probe reply", ev, dns.RcodeToString[tt.rcode])
			}
			if q := <-probes; q.Name != tt.wantName {
				t.Errorf("probe asked %q, want %q", q.Name, tt.wantName)
			}
			if !g.Servers()[0].Up {
				t.Error("server still down")
			}
		})
	}
}
