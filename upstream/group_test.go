package upstream

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// newGroup builds a group over the raw servers and closes it at cleanup.
func newGroup(t *testing.T, opts GroupOptions, servers ...*rawServer) *Group {
	t.Helper()
	addrs := make([]string, 0, len(servers))
	for _, s := range servers {
		addrs = append(addrs, s.addr)
	}
	g, err := NewGroup(".", addrs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// observed records the Observe callback's kinds in order.
type observed struct {
	mu    sync.Mutex
	kinds []string
}

func (o *observed) observe(_ string, _ time.Duration, kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds = append(o.kinds, kind)
}

func (o *observed) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.kinds)
}

func TestGroupFailover(t *testing.T) {
	type responder = func(*dns.Msg, net.Addr) [][]byte
	tests := []struct {
		name   string
		first  responder
		second responder
		// steps moves the fake clock the way the case needs (nil: the
		// clock stands still, so no RTO runs out and only replies move
		// the resolution on).
		steps      func(t *testing.T, clk *dnstest.Clock, servers []*rawServer)
		wantRcode  int  // of the reply; -1 for no reply
		wantErr    bool // a *RcodeError naming wantServer, or ErrTimeout without a reply
		wantServer int  // index of the server the RcodeError names
		wantCounts [2]int
		wantKinds  []string
	}{
		{
			name: "first black-holed", first: blackHole, second: answering(t, dns.RcodeSuccess),
			// Its RTO runs out: the second server is asked and answers.
			steps: func(t *testing.T, clk *dnstest.Clock, _ []*rawServer) { clk.Advance(500 * time.Millisecond) },
			// The black hole's attempt stays open until the answer ends the
			// resolution, so it is accounted for last.
			wantRcode: dns.RcodeSuccess, wantCounts: [2]int{1, 1}, wantKinds: []string{"", KindTimeout},
		},
		{
			name: "first SERVFAIL", first: answering(t, dns.RcodeServerFailure), second: answering(t, dns.RcodeSuccess),
			wantRcode: dns.RcodeSuccess, wantCounts: [2]int{1, 1}, wantKinds: []string{KindServFail, ""},
		},
		{
			name: "first REFUSED", first: answering(t, dns.RcodeRefused), second: answering(t, dns.RcodeSuccess),
			wantRcode: dns.RcodeSuccess, wantCounts: [2]int{1, 1}, wantKinds: []string{KindRefused, ""},
		},
		{
			name: "NXDOMAIN is final", first: answering(t, dns.RcodeNameError), second: answering(t, dns.RcodeSuccess),
			wantRcode: dns.RcodeNameError, wantCounts: [2]int{1, 0}, wantKinds: []string{""},
		},
		{
			// A server that answered SERVFAIL is not asked the same
			// question again: each is asked once, though MaxAttempts is 3
			// (issue 23).
			name: "all SERVFAIL", first: answering(t, dns.RcodeServerFailure), second: answering(t, dns.RcodeServerFailure),
			wantRcode: dns.RcodeServerFailure, wantErr: true, wantServer: 1, wantCounts: [2]int{1, 1},
			wantKinds: []string{KindServFail, KindServFail},
		},
		{
			// The black hole's attempts wait until the resolution's
			// deadline; the REFUSED reply is all there is then.
			name: "timeout, REFUSED, timeout", first: blackHole, second: answering(t, dns.RcodeRefused),
			steps: func(t *testing.T, clk *dnstest.Clock, servers []*rawServer) {
				// The first RTO: the second server is asked; its REFUSED
				// sends the third attempt, to the first server again.
				clk.Advance(500 * time.Millisecond)
				dnstest.Eventually(t, func() bool { return servers[0].count(t) == 2 }, waitTimeout,
					"the attempt after REFUSED at the black hole")
				clk.Advance(1500 * time.Millisecond) // the deadline
			},
			wantRcode: dns.RcodeRefused, wantErr: true, wantServer: 1, wantCounts: [2]int{2, 1},
			wantKinds: []string{KindRefused, KindTimeout, KindTimeout},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			servers := []*rawServer{startRaw(t, tt.first), startRaw(t, tt.second)}
			var obs observed
			// The fake clock (issue 33): an RTO runs out only when the
			// case steps the clock past it, however slow the machine.
			clk := dnstest.NewClock(time.Unix(1700000000, 0))
			g := newGroup(t, GroupOptions{
				InitialAttemptTimeout: 500 * time.Millisecond,
				MinAttemptTimeout:     10 * time.Millisecond,
				Observe:               obs.observe,
				Clock:                 clk,
			}, servers...)
			m := testQuery()
			// Two 500ms RTOs and the answer after them.
			recv := startOnClock(t, g, clk, m, 2*time.Second)
			if tt.steps != nil {
				tt.steps(t, clk, servers)
			}
			reply, err := awaitReply(t, recv)

			var rcodeErr *RcodeError
			switch {
			case tt.wantRcode < 0:
				if reply != nil || !errors.Is(err, ErrTimeout) {
					t.Errorf("Exchange = %v, %v; want nil, ErrTimeout", reply, err)
				}
			case reply == nil || reply.Rcode != tt.wantRcode:
				t.Fatalf("reply = %v (err %v), want rcode %d", reply, err, tt.wantRcode)
			case tt.wantErr:
				if !errors.As(err, &rcodeErr) || rcodeErr.Rcode != tt.wantRcode || rcodeErr.Server != servers[tt.wantServer].addr {
					t.Errorf("error = %v, want RcodeError %d from %s", err, tt.wantRcode, servers[tt.wantServer].addr)
				}
			case err != nil:
				t.Errorf("error = %v, want nil", err)
			}
			for i, s := range servers {
				if got := s.count(t); got != tt.wantCounts[i] {
					t.Errorf("server %d got %d queries, want %d", i, got, tt.wantCounts[i])
				}
				if got := g.Servers()[i].Queries; got != uint64(tt.wantCounts[i]) {
					t.Errorf("Servers()[%d].Queries = %d, want %d", i, got, tt.wantCounts[i])
				}
			}
			if got := obs.get(); !slices.Equal(got, tt.wantKinds) {
				t.Errorf("observed kinds %q, want %q", got, tt.wantKinds)
			}
		})
	}
}

// MaxAttempts is what keeps one client query from becoming a storm against
// a server that is already in trouble, so count the packets exactly.
func TestGroupMaxAttemptsBoundsPackets(t *testing.T) {
	for _, tt := range []struct {
		maxAttempts, wantPackets int
	}{{0, 3}, {1, 1}, {5, 5}} {
		srv := startRaw(t, blackHole)
		clk := dnstest.NewClock(time.Unix(1700000000, 0))
		g := newGroup(t, GroupOptions{
			MaxAttempts:           tt.maxAttempts,
			InitialAttemptTimeout: 20 * time.Millisecond,
			MinAttemptTimeout:     10 * time.Millisecond,
			MaxAttemptTimeout:     20 * time.Millisecond,
			FailThreshold:         100, // no prober, whose packets would add up
			Clock:                 clk,
		}, srv)
		// Attempts no longer give up at their RTO: only the deadline ends
		// the resolution, long after the last 20ms RTO. Each step of the
		// fake clock fires the RTO due, which sends before Advance returns.
		recv := startOnClock(t, g, clk, testQuery(), 500*time.Millisecond)
		for range 25 {
			clk.Advance(20 * time.Millisecond)
		}
		_, err := awaitReply(t, recv)
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("MaxAttempts %d: error = %v, want ErrTimeout", tt.maxAttempts, err)
		}
		if got := srv.count(t); got != tt.wantPackets {
			t.Errorf("MaxAttempts %d: server got %d packets, want %d", tt.maxAttempts, got, tt.wantPackets)
		}
		for _, q := range srv.received(t) {
			if isProbe(q) {
				continue // the silence watcher's (silence.go)
			}
			if !q.RecursionDesired || q.Question[0].Name != "www.example.org." {
				t.Errorf("forwarded query changed: %v", q)
			}
		}
	}
}

// The caller's deadline ends the retry loop before MaxAttempts does. On
// the fake clock (issue 33: it flaked on the wall clock under load, a
// late timer letting a sixth packet out or the exchange overrun its
// bound), the call's timer fires only as the test advances: one packet
// per 20 ms RTO, the fifth's RTO the deadline itself, and nothing after.
func TestGroupStopsAtCallerDeadline(t *testing.T) {
	srv := startRaw(t, blackHole)
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g := newGroup(t, GroupOptions{
		MaxAttempts:           1000,
		InitialAttemptTimeout: 20 * time.Millisecond,
		MinAttemptTimeout:     20 * time.Millisecond,
		MaxAttemptTimeout:     20 * time.Millisecond,
		FailThreshold:         1000,
		Clock:                 clk,
	}, srv)
	recv := make(recvChan, 1)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packedQuery(t, "www.example.org.", dns.TypeA),
		Deadline: clk.Now().Add(100 * time.Millisecond)}, recv)
	for sent := 1; sent < 5; sent++ {
		if got := srv.count(t); got != sent {
			t.Fatalf("%s in: server got %d packets, want %d", time.Duration(sent-1)*20*time.Millisecond, got, sent)
		}
		// The RTO's timer sends the next attempt before Advance returns.
		clk.Advance(20 * time.Millisecond)
	}
	select {
	case got := <-recv:
		t.Fatalf("ended at 80ms of a 100ms deadline: %v", got.err)
	default:
	}
	clk.Advance(20 * time.Millisecond)
	got := <-recv
	if !errors.Is(got.err, ErrTimeout) {
		t.Errorf("error = %v, want ErrTimeout", got.err)
	}
	if got := srv.count(t); got != 5 {
		t.Errorf("server got %d packets, want 5: one per 20ms RTO until the 100ms deadline", got)
	}
}

func TestGroupCancelledContextSendsNothing(t *testing.T) {
	srv := startRaw(t, answering(t, dns.RcodeSuccess))
	g := newGroup(t, GroupOptions{}, srv)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reply, err := g.Exchange(ctx, testQuery())
	if reply != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Exchange = %v, %v; want nil, context.Canceled", reply, err)
	}
	if got := srv.count(t); got != 0 {
		t.Errorf("server got %d packets, want 0", got)
	}
}

func TestNewGroupErrors(t *testing.T) {
	tests := []struct {
		name    string
		servers []string
		opts    GroupOptions
		want    error
	}{
		{"no servers", nil, GroupOptions{}, ErrNoServers},
		{"bad address", []string{"not-an-ip"}, GroupOptions{}, nil},
		{"negative attempts", []string{"127.0.0.1"}, GroupOptions{MaxAttempts: -1}, nil},
		{"min above max", []string{"127.0.0.1"}, GroupOptions{MinAttemptTimeout: time.Second, MaxAttemptTimeout: time.Millisecond}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewGroup("g", tt.servers, tt.opts)
			if err == nil {
				g.Close()
				t.Fatal("NewGroup succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestGroupAddressAndDefaults(t *testing.T) {
	g, err := NewGroup("consul.", []string{"127.0.0.1:8600", "::1"}, GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Address() != "consul." {
		t.Errorf("Address = %q", g.Address())
	}
	var addrs []string
	for _, s := range g.Servers() {
		addrs = append(addrs, s.Address)
		if !s.Up || s.AttemptTimeout != 500*time.Millisecond {
			t.Errorf("%s: up=%v attempt timeout %s, want up with the 500ms initial timeout", s.Address, s.Up, s.AttemptTimeout)
		}
	}
	if want := []string{"127.0.0.1:8600", "[::1]:53"}; !slices.Equal(addrs, want) {
		t.Errorf("servers %q, want %q", addrs, want)
	}
}

// startOnClock starts resolving m with g, whose clock is clk, with a
// deadline d from clk's now; the outcome comes on the returned channel.
func startOnClock(t *testing.T, g *Group, clk *dnstest.Clock, m *dns.Msg, d time.Duration) recvChan {
	t.Helper()
	packed, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	recv := make(recvChan, 1)
	var c WireCall
	g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packed, Deadline: clk.Now().Add(d)}, recv)
	return recv
}

// awaitReply waits for a resolution's outcome and unpacks its reply.
func awaitReply(t *testing.T, recv recvChan) (*dns.Msg, error) {
	t.Helper()
	select {
	case got := <-recv:
		if got.wr.Raw == nil {
			return nil, got.err
		}
		reply := new(dns.Msg)
		if err := reply.Unpack(got.wr.Raw); err != nil {
			t.Fatalf("unpacking the reply: %v", err)
		}
		return reply, got.err
	case <-time.After(waitTimeout): // a bound against hanging, not a speed
		t.Fatal("no outcome of the resolution")
		return nil, nil
	}
}
