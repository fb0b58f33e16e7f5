package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// tlsGroup is a group of one DNS over TLS server at addr, named name,
// verified against ca; failures are sent on the returned channel.
func tlsGroup(t *testing.T, addr, name string, ca *dnstest.CA, opts GroupOptions) (*Group, chan string) {
	t.Helper()
	fails := make(chan string, 64)
	opts.TLSRoots = ca.Pool()
	opts.OnTLSFailure = func(server, reason string, err error) {
		select {
		case fails <- reason:
		default:
		}
	}
	g, err := NewGroup(".", []string{"tls://" + addr + "#" + name}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g, fails
}

func askA(ctx context.Context, g *Group, name string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	return g.Exchange(ctx, m)
}

func TestTLSPipelinesOnOneConnection(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	srv := dnstest.NewDoTServer(t, cert, dnstest.DoTAnswer)
	g, _ := tlsGroup(t, srv.Addr, "dns.test", ca, GroupOptions{})

	// One first query opens the connection; then many at once share it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := askA(ctx, g, "first.example."); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := askA(ctx, g, fmt.Sprintf("n%d.example.", i))
			if err == nil && (len(reply.Answer) != 1 || !strings.EqualFold(reply.Question[0].Name, fmt.Sprintf("n%d.example.", i))) {
				err = fmt.Errorf("reply %v", reply)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := srv.Connections(); c != 1 {
		t.Errorf("%d connections, want 1", c)
	}
	if q := srv.Queries(); q != n+1 {
		t.Errorf("server read %d queries, want %d", q, n+1)
	}
	sizes, padded, keepalive := srv.QuerySizes()
	for _, s := range sizes {
		if s%128 != 0 {
			t.Fatalf("query of %d bytes, not padded to a 128-octet block (RFC 8467)", s)
		}
	}
	if padded != n+1 || keepalive != n+1 {
		t.Errorf("%d padded, %d with keepalive, want %d", padded, keepalive, n+1)
	}
	st := g.Servers()[0]
	if st.Address != "tls://"+srv.Addr+"#dns.test" || st.TLS == nil || st.TLS.Handshakes != 1 || st.TLS.Reused != n {
		t.Errorf("status %+v %+v", st, st.TLS)
	}
}

// TestTLSNeverInClear: a certificate for another name, one from another
// CA, a plain DNS server on the TLS port: no answer, no query read by the
// server, the reason told once however many queries fail, and the server
// marked down by the silence rule.
func TestTLSNeverInClear(t *testing.T) {
	ca := dnstest.NewCA(t)
	otherCA := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	for _, tc := range []struct {
		name, auth string
		roots      *dnstest.CA
		plain      bool
		reason     string
	}{
		{name: "wrong name", auth: "other.test", roots: ca, reason: TLSFailName},
		{name: "unknown CA", auth: "dns.test", roots: otherCA, reason: TLSFailCertificate},
		{name: "plain DNS on the port", auth: "dns.test", roots: ca, plain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := ""
			var srv *dnstest.DoTServer
			var plain *dnstest.Upstream
			if tc.plain {
				plain = dnstest.NewUpstream(t)
				addr = plain.Addr
			} else {
				srv = dnstest.NewDoTServer(t, cert, dnstest.DoTAnswer)
				addr = srv.Addr
			}
			g, fails := tlsGroup(t, addr, tc.auth, tc.roots, GroupOptions{MinSilence: 100 * time.Millisecond, MaxSilence: 500 * time.Millisecond})
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				reply, err := askA(ctx, g, fmt.Sprintf("q%d.example.", i))
				cancel()
				if err == nil || reply != nil {
					t.Fatalf("answered: %v", reply)
				}
			}
			reason := <-fails
			if tc.reason != "" && reason != tc.reason {
				t.Errorf("reason %q, want %q", reason, tc.reason)
			}
			select {
			case r := <-fails:
				t.Errorf("reason told twice (%q)", r)
			default:
			}
			if srv != nil && srv.Queries() != 0 {
				t.Errorf("server read %d queries", srv.Queries())
			}
			if plain != nil && plain.Total() != 0 {
				t.Errorf("plain server read %d queries in clear", plain.Total())
			}
			select {
			case <-g.AllDownSignal():
			case <-time.After(5 * time.Second):
				t.Error("server not marked down")
			}
		})
	}
}

// TestTLSAttacks: a server that never finishes the handshake, one that
// streams replies to nothing without end, one that goes silent: each
// resolution ends by its deadline, the connection is given up, and the
// silent one is marked down like any silent server.
//
// The group runs on the fake clock (issue 33): the resolution's deadline,
// its RTO and the silence rule are the clock's, so "ends by its deadline"
// is shown by advancing the clock to it, not by a wall-clock bound. The
// sockets' own timeouts (the handshake's) stay the kernel's.
func TestTLSAttacks(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	for _, tc := range []struct {
		name   string
		mode   dnstest.DoTMode
		reason string
	}{
		{"no handshake", dnstest.DoTNoHandshake, TLSFailTimeout},
		{"endless stream", dnstest.DoTEndless, ""},
		{"silent", dnstest.DoTSilent, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := dnstest.NewDoTServer(t, cert, tc.mode)
			clk := dnstest.NewClock(time.Unix(1700000000, 0))
			g, fails := tlsGroup(t, srv.Addr, "dns.test", ca, GroupOptions{MinSilence: 100 * time.Millisecond, MaxSilence: time.Second, Clock: clk})
			recv := make(recvChan, 1)
			var c WireCall
			g.StartWire(&c, WireQuery{Ctx: context.Background(), Packed: packedQuery(t, "a.example.", dns.TypeA),
				Deadline: clk.Now().Add(time.Second)}, recv)
			// At the deadline every timer of the resolution has fired on
			// this goroutine: it has ended, whatever the server does.
			clk.Advance(time.Second)
			select {
			case got := <-recv:
				if got.err == nil {
					t.Fatalf("answered %x", got.wr.Raw)
				}
				if tc.mode == dnstest.DoTSilent && !errors.Is(got.err, ErrTimeout) {
					t.Errorf("error %v, want ErrTimeout", got.err)
				}
			case <-time.After(waitTimeout): // a bound against hanging, not a speed
				t.Fatal("resolution still running at its deadline on the clock")
			}
			if tc.reason != "" {
				if r := <-fails; r != tc.reason {
					t.Errorf("reason %q, want %q", r, tc.reason)
				}
			}
			// The clock stands at the silence's upper bound from the
			// unanswered attempt: the watcher marks the server down
			// without waiting.
			select {
			case <-g.AllDownSignal():
			case <-time.After(waitTimeout):
				t.Error("server not marked down")
			}
			if tc.mode == dnstest.DoTEndless {
				// Cut off after tlsMaxBogusFrames, not read forever.
				dnstest.Eventually(t, func() bool {
					g.servers[0].tls.mu.Lock()
					defer g.servers[0].tls.mu.Unlock()
					return g.servers[0].tls.conn == nil
				}, waitTimeout, "the endless stream's connection given up")
			}
		})
	}
}

// TestTLSCloseAfterEachAnswer: a server that closes after every answer
// costs a connection per query, resumed rather than a full handshake, and
// every query is still answered.
func TestTLSCloseAfterEachAnswer(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	srv := dnstest.NewDoTServer(t, cert, dnstest.DoTCloseAfterAnswer)
	g, _ := tlsGroup(t, srv.Addr, "dns.test", ca, GroupOptions{})
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		_, err := askA(ctx, g, fmt.Sprintf("c%d.example.", i))
		cancel()
		if err != nil && !errors.Is(err, ErrNetwork) {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
	}
	st := g.Servers()[0].TLS
	if st.Handshakes < 2 || st.Resumptions == 0 {
		t.Errorf("handshakes %d, resumptions %d: want reconnects resumed", st.Handshakes, st.Resumptions)
	}
	if srv.Resumptions() != int(st.Resumptions) {
		t.Errorf("server saw %d resumptions, client %d", srv.Resumptions(), st.Resumptions)
	}
}

// TestTLSResendsWhenTheConnectionCloses: queries in flight on a
// connection the server closes (after each answer, or with a reset) are
// sent again on the next connection at once, not lost to the read
// timeout or a second attempt of their resolution; a server that resets
// every connection gets each query once more, on one more connection,
// and no loop.
func TestTLSResendsWhenTheConnectionCloses(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	const n = 20
	for _, tc := range []struct {
		name string
		mode dnstest.DoTMode
		// Of the n queries asked at once: how many are answered, and
		// the TLS handshakes and queries read the server should see.
		answered, handshakes, read int
		resent                     uint64
	}{
		// Each connection answers one query: n connections, every query
		// read once by the server.
		{"close after each answer", dnstest.DoTCloseAfterAnswer, n, n, n, 0},
		// All n read on the first connection, reset, all sent again.
		{"reset with queries in flight", dnstest.DoTResetFirst, n, 2, 2 * n, n},
		// The second connection answers nothing either: no third.
		{"reset every connection", dnstest.DoTResetAll, 0, 2, 2 * n, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := dnstest.NewDoTServer(t, cert, tc.mode)
			srv.SetResetAfter(n)
			// One attempt per resolution: an answer here is the
			// connection's doing, not a second attempt's.
			g, _ := tlsGroup(t, srv.Addr, "dns.test", ca, GroupOptions{MaxAttempts: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					reply, err := askA(ctx, g, fmt.Sprintf("r%d.example.", i))
					if err == nil && len(reply.Answer) != 1 {
						err = fmt.Errorf("reply %v", reply)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			answered := 0
			for err := range errs {
				switch {
				case err == nil:
					answered++
				case !errors.Is(err, ErrNetwork):
					t.Errorf("failed with %v, want a network error", err)
				}
			}
			st := g.Servers()[0].TLS
			handshakes, read := srv.Handshakes(), srv.Queries()
			if answered < n && handshakes == tc.handshakes+1 && read == tc.read+1 {
				// The silence rule's probe of the failing server, on a
				// connection of its own.
				handshakes, read = tc.handshakes, tc.read
			}
			if answered != tc.answered || handshakes != tc.handshakes || read != tc.read {
				t.Errorf("%d of %d answered, %d handshakes, %d queries read; want %d, %d, %d",
					answered, n, handshakes, read, tc.answered, tc.handshakes, tc.read)
			}
			if tc.resent != 0 && st.Resent != tc.resent {
				t.Errorf("%d queries sent again, want %d", st.Resent, tc.resent)
			}
			// (Where queries fail, the silence rule's probe may be one more.)
			if tc.answered == n && st.Queries-st.Resent != n {
				t.Errorf("%d queries sent, %d of them again: want %d first ones", st.Queries, st.Resent, n)
			}
		})
	}
}

func TestParseServer(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":                     "192.0.2.1:53",
		"tls://192.0.2.1#dns.example":   "tls://192.0.2.1:853#dns.example",
		"tls://192.0.2.1:8853#DNS.Ex.":  "tls://192.0.2.1:8853#dns.ex",
		"tls://[2001:db8::1]#dns.ex":    "tls://[2001:db8::1]:853#dns.ex",
		"tls://[2001:db8::1]:99#dns.ex": "tls://[2001:db8::1]:99#dns.ex",
	} {
		if got, err := NormalizeServer(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tls://192.0.2.1", "tls://192.0.2.1#", "https://192.0.2.1#x", "tls://host#x", "tls://192.0.2.1#192.0.2.1"} {
		if _, err := ParseServer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFrameTLSQueryPads(t *testing.T) {
	// A name whose frame fits the query's room (tlsFrameRoom), and one of
	// 250 octets, framed in three blocks beyond it.
	long := strings.Repeat(strings.Repeat("x", 62)+".", 4)[:249] + "."
	for _, tc := range []struct {
		name string
		edns bool
	}{{"a-rather-long-name.for-padding.example.", true}, {"a-rather-long-name.for-padding.example.", false}, {long, true}} {
		edns := tc.edns
		m := new(dns.Msg)
		m.SetQuestion(tc.name, dns.TypeAAAA)
		if edns {
			m.SetEdns0(1232, true)
		}
		packed, _ := m.Pack()
		qend, _ := questionEnd(packed)
		frame := newTLSQuery(nil, packed, qend, nil, nil).frame
		if len(frame)-2 != int(frame[0])<<8|int(frame[1]) || (len(frame)-2)%128 != 0 {
			t.Fatalf("frame of %d, prefix %d", len(frame), int(frame[0])<<8|int(frame[1]))
		}
		if blocks := (len(frame) - 2) / 128; (tc.name == long) != (blocks == 3) || (tc.name != long) != (blocks == 1) {
			t.Fatalf("%d-octet name framed in %d blocks", len(tc.name), blocks)
		}
		if len(frame)-2 != int(frame[0])<<8|int(frame[1]) || (len(frame)-2)%128 != 0 {
			t.Fatalf("frame of %d, prefix %d", len(frame), int(frame[0])<<8|int(frame[1]))
		}
		var got dns.Msg
		if err := got.Unpack(frame[2:]); err != nil {
			t.Fatal(err)
		}
		opt := got.IsEdns0()
		if opt == nil || len(opt.Option) != 2 || (edns && !opt.Do()) {
			t.Fatalf("opt %v", opt)
		}
		// Byte for byte what miekg/dns packs for the same query and options.
		want := m.Copy()
		if !edns {
			want.SetEdns0(tlsAdvertisedUDPSize, false)
		}
		pad := opt.Option[1].(*dns.EDNS0_PADDING).Padding
		want.IsEdns0().Option = append(want.IsEdns0().Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE},
			&dns.EDNS0_PADDING{Padding: make([]byte, len(pad))})
		wire, err := want.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if string(frame[2:]) != string(wire) {
			t.Fatalf("framed\n% x\nmiekg/dns packs\n% x", frame[2:], wire)
		}
	}
}

func TestCheckTLS(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	srv := dnstest.NewDoTServer(t, cert, dnstest.DoTAnswer)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if reason, err := CheckTLS(ctx, "tls://"+srv.Addr+"#dns.test", ca.Pool()); err != nil {
		t.Errorf("good server: %s %v", reason, err)
	}
	if reason, err := CheckTLS(ctx, "tls://"+srv.Addr+"#other.test", ca.Pool()); err == nil || reason != TLSFailName {
		t.Errorf("wrong name: %q %v", reason, err)
	}
	if srv.Queries() != 1 {
		t.Errorf("server read %d queries, want the good check's 1", srv.Queries())
	}
}

// A first attempt waiting on a TLS connection is hedged like a packet,
// to the next server: the TLS server is not asked again on its own line.
func TestHedgeFromATLSAttempt(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	silent := dnstest.NewDoTServer(t, cert, dnstest.DoTSilent)
	fast := startHeld(t)
	onHedge, events := hedgeEvents()
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g, err := NewGroup(".", []string{"tls://" + silent.Addr + "#dns.test", fast.addr}, GroupOptions{
		MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, OnHedge: onHedge, Clock: clk, TLSRoots: ca.Pool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.roll = func() float64 { return 0.5 }
	g.budget.tokens = hedgeBurst
	for _, s := range g.servers {
		s.addSample(10 * time.Millisecond)
	}
	tail := g.Servers()[0].Tail
	done := startExchange(t, g, "late.example.")
	waitTimers(t, clk, 1)
	clk.Advance(tail)
	if e := nextEvent(t, events); e != HedgeSent {
		t.Fatalf("event %s at the tail, want sent", e)
	}
	r := <-done
	if r.err != nil || r.wr.Server != fast.addr {
		t.Fatalf("answer from %s, %v; want the hedge's, from %s", r.wr.Server, r.err, fast.addr)
	}
	if st := g.Servers()[0]; st.TLS.Queries != 1 {
		t.Errorf("TLS server asked %d times, want once", st.TLS.Queries)
	}
}

// A first attempt waiting on the zone's only server's TLS connection can
// never be hedged (the server is not asked again on its own line): no
// hedge is armed, and the call's timer is its RTO's, not set and stopped
// for nothing at the tail estimate on every miss.
func TestNoHedgeArmedOnTheOnlyTLSServer(t *testing.T) {
	ca := dnstest.NewCA(t)
	cert, _, _ := ca.Leaf(t, "dns.test")
	silent := dnstest.NewDoTServer(t, cert, dnstest.DoTSilent)
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	g, err := NewGroup(".", []string{"tls://" + silent.Addr + "#dns.test"}, GroupOptions{
		MinAttemptTimeout: waitTimeout, MaxAttemptTimeout: waitTimeout, Clock: clk, TLSRoots: ca.Pool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	g.budget.tokens = hedgeBurst
	g.servers[0].addSample(10 * time.Millisecond)
	if tail := g.Servers()[0].Tail; tail <= 0 || tail >= waitTimeout {
		t.Fatalf("tail %v: a hedge would not be armed anyway", tail)
	}
	startExchange(t, g, "late.example.")
	waitTimers(t, clk, 1)
	g.timers.mu.Lock()
	due := g.timers.calls[0].timerDue
	g.timers.mu.Unlock()
	if want := clk.Now().Add(waitTimeout); !due.Equal(want) {
		t.Fatalf("call due in %v, want its RTO's %v", due.Sub(clk.Now()), waitTimeout)
	}
}
