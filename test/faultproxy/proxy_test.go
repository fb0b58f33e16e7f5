package faultproxy

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/towerd/towerd/test/dnstest"
)

// target starts a DNS server on 127.0.0.1 (UDP and TCP, same port) that
// answers every question with an A record 192.0.2.1.
func target(t *testing.T) string {
	return targetServer(t).Addr
}

func targetServer(t *testing.T) *dnstest.Upstream {
	t.Helper()
	u := dnstest.NewUpstream(t)
	u.SetScript(func(r *dns.Msg, _ string) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.1")
		m.Answer = []dns.RR{rr}
		return m
	})
	return u
}

// rawExchange sends a query from an unconnected socket and returns every
// datagram that arrives within wait, with the port it came from.
func rawExchange(t *testing.T, addr string, wait time.Duration) (msgs []*dns.Msg, ports []int) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	q := new(dns.Msg)
	q.SetQuestion("www.example.", dns.TypeA)
	wire, _ := q.Pack()
	to, _ := net.ResolveUDPAddr("udp", addr)
	if _, err := pc.WriteTo(wire, to); err != nil {
		t.Fatal(err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return msgs, ports
		}
		m := new(dns.Msg)
		if m.Unpack(buf[:n]) == nil {
			msgs, ports = append(msgs, m), append(ports, from.(*net.UDPAddr).Port)
		}
	}
}

func TestFaults(t *testing.T) {
	// Registered first, so it runs after every other cleanup (the target).
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := target(t)
	tests := []struct {
		name   string
		faults Faults
		check  func(t *testing.T, msgs []*dns.Msg, ports []int, proxyPort int)
	}{
		{"transparent", Faults{}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 1 || len(msgs[0].Answer) != 1 {
				t.Errorf("got %v, want the target's one reply", msgs)
			}
		}},
		{"servfail", Faults{ServFail: 1}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 1 || msgs[0].Rcode != dns.RcodeServerFailure {
				t.Errorf("got %v, want one SERVFAIL", msgs)
			}
		}},
		{"truncate", Faults{Truncate: 1}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 1 || !msgs[0].Truncated || len(msgs[0].Answer) != 0 {
				t.Errorf("got %v, want one empty TC reply", msgs)
			}
		}},
		{"duplicate", Faults{Duplicate: 1}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 2 || msgs[0].Id != msgs[1].Id {
				t.Errorf("got %d replies, want the same reply twice", len(msgs))
			}
		}},
		{"forgeries first", Faults{WrongID: 1, WrongQuestion: 1, WrongSource: 1}, func(t *testing.T, msgs []*dns.Msg, ports []int, proxyPort int) {
			if len(msgs) != 4 {
				t.Fatalf("got %d datagrams, want three forgeries and the reply", len(msgs))
			}
			last := msgs[3]
			if ports[3] != proxyPort || addrsOf(last) != "192.0.2.1" {
				t.Errorf("last datagram from port %d with %s, want the genuine reply from %d", ports[3], addrsOf(last), proxyPort)
			}
			for i, m := range msgs[:3] {
				if addrsOf(m) != ForgedAddr {
					t.Errorf("forgery %d carries %s, want %s", i, addrsOf(m), ForgedAddr)
				}
			}
			if msgs[0].Id == last.Id || msgs[1].Question[0].Name == last.Question[0].Name || ports[2] == proxyPort {
				t.Errorf("forgeries not wrong in ID, question and source: %v %v", msgs[:3], ports)
			}
		}},
		{"loss", Faults{Loss: 1}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 0 {
				t.Errorf("got %d replies through a proxy losing everything", len(msgs))
			}
		}},
		{"black hole", Faults{Blackhole: true}, func(t *testing.T, msgs []*dns.Msg, _ []int, _ int) {
			if len(msgs) != 0 {
				t.Errorf("got %d replies through a black hole", len(msgs))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Options{Target: addr, Faults: tc.faults, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// Silence is only proven by waiting; 300 ms is ample on loopback
			// for the replies that should come.
			msgs, ports := rawExchange(t, p.Addr(), 300*time.Millisecond)
			tc.check(t, msgs, ports, p.pc.LocalAddr().(*net.UDPAddr).Port)
		})
	}
}

func addrsOf(m *dns.Msg) string {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	return ""
}

// TestTCPAndTruncation: a truncated UDP reply sends a client to TCP, which
// the proxy passes through; Stats count both.
func TestTCPAndTruncation(t *testing.T) {
	// Registered first, so it runs after every other cleanup (the target).
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, err := New(Options{Target: target(t), Faults: Faults{Truncate: 1, Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	q := new(dns.Msg)
	q.SetQuestion("www.example.", dns.TypeA)
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 5 * time.Second}
		m, _, err := c.Exchange(q, p.Addr())
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if network == "tcp" && (m.Truncated || addrsOf(m) != "192.0.2.1") {
			t.Errorf("tcp: %v, want the target's reply", m)
		}
	}
	if st := p.Stats(); st.Truncated != 1 || st.TCPQueries != 1 || st.Replies != 1 {
		t.Errorf("stats %+v, want 1 truncated, 1 TCP query, 1 genuine reply", st)
	}
}

// TestSeedReplays: two choosers with one seed draw the same fates, so a run
// can be replayed; another seed draws others.
func TestSeedReplays(t *testing.T) {
	f := Faults{Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Loss: 0.3, WrongID: 0.5}
	draw := func(seed uint64) []fate {
		c := newChooser(f, seed)
		var out []fate
		for range 100 {
			out = append(out, c.draw())
		}
		return out
	}
	if !slices.Equal(draw(42), draw(42)) {
		t.Error("the same seed drew different fates")
	}
	if slices.Equal(draw(42), draw(43)) {
		t.Error("different seeds drew the same fates")
	}
	// Reseed starts a used chooser over: its draws are a new one's.
	c := newChooser(f, 7)
	for range 37 {
		c.draw()
	}
	c.reseed(42)
	var again []fate
	for range 100 {
		again = append(again, c.draw())
	}
	if !slices.Equal(again, draw(42)) {
		t.Error("a chooser reseeded with 42 drew other fates than a new one seeded 42")
	}
}

// TestFlapAndClose: Flap switches the black hole on and off on its timer,
// stop leaves it off, and Close leaves no goroutine behind.
func TestFlapAndClose(t *testing.T) {
	// Registered first, so it runs after every other cleanup (the target).
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, err := New(Options{Target: target(t), Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	stop := p.Flap(time.Hour, time.Hour)
	if !p.Faults().Blackhole {
		t.Error("Flap did not start down")
	}
	stop()
	if p.Faults().Blackhole {
		t.Error("stopped Flap left the black hole on")
	}
	p.Flap(time.Millisecond, time.Hour) // still running at Close
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestCountNames: with CountNames the proxy counts the queries it reads per
// question name, over UDP and TCP, whatever their case, including those it
// answers itself (a truncation here) and never forwards; without it, none.
func TestCountNames(t *testing.T) {
	// Registered first, so it runs after every other cleanup (the target).
	t.Cleanup(func() { goleak.VerifyNone(t) })
	up := targetServer(t)
	counting, err := New(Options{Target: up.Addr, Seed: 7, CountNames: true})
	if err != nil {
		t.Fatal(err)
	}
	defer counting.Close()
	plain, err := New(Options{Target: up.Addr, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ask := func(p *Proxy, network, name string, qtype uint16) {
		t.Helper()
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		if _, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(q, p.Addr()); err != nil {
			t.Fatalf("%s over %s: %v", name, network, err)
		}
	}
	ask(counting, "udp", "WWW.Example.", dns.TypeA)
	ask(counting, "tcp", "www.example.", dns.TypeAAAA)
	ask(plain, "udp", "www.example.", dns.TypeA)
	counting.SetFaults(Faults{Truncate: 1})
	ask(counting, "udp", "tc.example.", dns.TypeA)
	if got := []int{counting.Count("www.example"), counting.Count("tc.example."), counting.Count("other.example."), plain.Count("www.example.")}; !slices.Equal(got, []int{2, 1, 0, 0}) {
		t.Errorf("counts www, tc, other, www without CountNames = %v, want [2 1 0 0]", got)
	}
	if n := up.Count("tc.example.", dns.TypeA); n != 0 {
		t.Errorf("the truncated query reached the target %d times, want 0", n)
	}
}
