package dnstest

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/upstream"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("Now after Advance = %v, want %v", got, start.Add(time.Minute))
	}
	if err := c.Sleep(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a done context = %v, want context.Canceled", err)
	}
	if got, want := c.Now(), start.Add(time.Minute+time.Second); !got.Equal(want) {
		t.Errorf("Now after the sleeps = %v, want %v", got, want)
	}
	if got, want := c.Sleeps(), []time.Duration{time.Second, -time.Second}; !slices.Equal(got, want) {
		t.Errorf("Sleeps = %v, want %v", got, want)
	}
}

func TestListenPair(t *testing.T) {
	pc, ln := ListenPair(t)
	if pc.LocalAddr().String() != ln.Addr().String() {
		t.Fatalf("udp %s and tcp %s differ", pc.LocalAddr(), ln.Addr())
	}
}

// exchange asks u one question over network and fails the test on an error.
func exchange(t *testing.T, u *Upstream, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(q, u.Addr)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func TestUpstreamZone(t *testing.T) {
	u := NewUpstream(t)
	u.Add(t, "www.example. 300 IN A 192.0.2.1")
	for _, network := range []string{"udp", "tcp"} {
		r := exchange(t, u, network, "WWW.example.", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Errorf("%s: A = %v, want 192.0.2.1", network, r)
		}
	}
	if r := exchange(t, u, "udp", "www.example.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("AAAA = %v, want NODATA with an SOA", r)
	}
	if r := exchange(t, u, "udp", "nowhere.example.", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
		t.Errorf("unknown name = %v, want NXDOMAIN with an SOA", r)
	}
	u.SetTTL("www.example", 7)
	if r := exchange(t, u, "udp", "www.example.", dns.TypeA); r.Answer[0].Header().Ttl != 7 {
		t.Errorf("TTL after SetTTL = %d, want 7", r.Answer[0].Header().Ttl)
	}
	if got := []int{u.Count("www.example", dns.TypeA), u.CountNet("www.example.", dns.TypeA, "tcp"), u.Total()}; !slices.Equal(got, []int{3, 1, 5}) {
		t.Errorf("Count, CountNet tcp, Total = %v, want [3 1 5]", got)
	}
}

func TestUpstreamFaults(t *testing.T) {
	u := NewUpstream(t)
	u.Add(t, "a.example. 60 IN A 192.0.2.1")
	u.SetScript(func(q *dns.Msg, network string) *dns.Msg {
		r := new(dns.Msg)
		r.SetRcode(q, dns.RcodeRefused)
		return r
	})
	if r := exchange(t, u, "udp", "a.example.", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Errorf("with a script: %v, want the script's REFUSED", r)
	}
	u.SetScript(nil)

	for _, tt := range []struct {
		name    string
		fault   Fault
		network string
		check   func(*dns.Msg) bool
	}{
		{"servfail", Fault{Rcode: dns.RcodeServerFailure}, "udp", func(r *dns.Msg) bool { return r.Rcode == dns.RcodeServerFailure && len(r.Answer) == 0 }},
		{"truncated over udp", Fault{TruncateUDP: true}, "udp", func(r *dns.Msg) bool { return r.Truncated && len(r.Answer) == 0 }},
		{"whole over tcp", Fault{TruncateUDP: true}, "tcp", func(r *dns.Msg) bool { return !r.Truncated && len(r.Answer) == 1 }},
		{"nxdomain", Fault{NXDOMAIN: true}, "udp", func(r *dns.Msg) bool { return r.Rcode == dns.RcodeNameError && len(r.Ns) == 1 }},
		{"nodata", Fault{NODATA: true}, "udp", func(r *dns.Msg) bool { return r.Rcode == dns.RcodeSuccess && len(r.Answer) == 0 && len(r.Ns) == 1 }},
		{"delayed", Fault{Delay: time.Millisecond}, "udp", func(r *dns.Msg) bool { return len(r.Answer) == 1 }},
	} {
		u.SetFault("a.example.", tt.fault)
		if r := exchange(t, u, tt.network, "a.example.", dns.TypeA); !tt.check(r) {
			t.Errorf("%s: got %v", tt.name, r)
		}
	}

	// The shorthands add up, as the old setters did; SetFault replaces.
	u.SetFault("a.example.", Fault{})
	u.SetNODATA("a.example.")
	u.TruncateUDP("a.example.")
	if r := exchange(t, u, "udp", "a.example.", dns.TypeA); !r.Truncated {
		t.Errorf("NODATA then TruncateUDP over udp: %v, want TC (both set, truncation first)", r)
	}
	if r := exchange(t, u, "tcp", "a.example.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("NODATA then TruncateUDP over tcp: %v, want NODATA", r)
	}
	u.SetRcode("a.example.", dns.RcodeServerFailure)
	u.SetNXDOMAIN("a.example.")
	if r := exchange(t, u, "tcp", "a.example.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("SetRcode then SetNXDOMAIN: %v, want SERVFAIL (rcode first)", r)
	}

	u.SetFault("a.example.", Fault{Drop: true})
	arrived := u.Arrived("a.example.", 1)
	q := new(dns.Msg)
	q.SetQuestion("a.example.", dns.TypeA)
	c := &dns.Client{Timeout: 50 * time.Millisecond}
	if r, _, err := c.Exchange(q, u.Addr); !isTimeout(err) {
		t.Errorf("dropped: %v, %v; want a timeout", r, err)
	}
	<-arrived // counted although never answered
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A held name is answered once released; Arrived fires on the n-th query,
// Answered on the n-th reply written;
// Stop lets held queries go and closes the port.
func TestUpstreamHoldArrivedStop(t *testing.T) {
	u := NewUpstream(t)
	u.Add(t, "held.example. 60 IN A 192.0.2.1")
	arrived, release := u.Hold("held.example.")
	second := u.Arrived("held.example.", 2)
	done := make(chan *dns.Msg, 2)
	for range 2 {
		go func() {
			q := new(dns.Msg)
			q.SetQuestion("held.example.", dns.TypeA)
			r, _, _ := (&dns.Client{Timeout: 10 * time.Second}).Exchange(q, u.Addr)
			done <- r
		}()
	}
	answered := u.Answered("held.example.", 2)
	<-arrived
	<-second
	select {
	case <-answered:
		t.Fatal("Answered fired while the answers were held")
	default:
	}
	select {
	case r := <-done:
		t.Fatalf("answered while held: %v", r)
	default:
	}
	release()
	for range 2 {
		if r := <-done; r == nil || len(r.Answer) != 1 {
			t.Errorf("after release: %v, want the A record", r)
		}
	}
	<-answered

	arrived, _ = u.Hold("held.example.")
	stuck := make(chan error, 1)
	go func() {
		q := new(dns.Msg)
		q.SetQuestion("held.example.", dns.TypeA)
		_, _, err := (&dns.Client{Net: "tcp", Timeout: 10 * time.Second}).Exchange(q, u.Addr)
		stuck <- err
	}()
	<-arrived
	u.Stop()
	if err := <-stuck; err == nil {
		t.Error("a held query was answered after Stop")
	}
	if _, err := net.Dial("tcp", u.Addr); err == nil {
		t.Error("the port still accepts connections after Stop")
	}
}

// ExchangeFunc is an upstream.Upstream.
var _ upstream.Upstream = ExchangeFunc(nil)

func TestExchangeFunc(t *testing.T) {
	u := ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
		r := new(dns.Msg)
		r.SetRcode(q, dns.RcodeRefused)
		return r, nil
	})
	q := new(dns.Msg)
	q.SetQuestion("x.example.", dns.TypeA)
	if r, err := u.Exchange(context.Background(), q); err != nil || r.Rcode != dns.RcodeRefused || r.Id != q.Id {
		t.Errorf("Exchange = %v, %v; want the function's REFUSED", r, err)
	}
	if u.Address() != "memory" || u.Close() != nil {
		t.Errorf("Address %q, Close %v; want memory, nil", u.Address(), u.Close())
	}
}

// Responder sends what reply wrote, and nothing for a length of 0.
func TestResponder(t *testing.T) {
	addr := Responder(t, func(in, out []byte) int {
		q := new(dns.Msg)
		if q.Unpack(in) != nil || q.Question[0].Name == "silent.test." {
			return 0
		}
		r := new(dns.Msg)
		r.SetRcode(q, dns.RcodeRefused)
		b, _ := r.Pack()
		return copy(out, b)
	})
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	reply, _, err := c.Exchange(new(dns.Msg).SetQuestion("loud.test.", dns.TypeA), addr)
	if err != nil || reply.Rcode != dns.RcodeRefused {
		t.Fatalf("reply %v, %v; want REFUSED", reply, err)
	}
	if _, _, err := c.Exchange(new(dns.Msg).SetQuestion("silent.test.", dns.TypeA), addr); err == nil {
		t.Fatal("an answer for a query reply left unanswered")
	}
}

func TestWriteTreeAndDiffTrees(t *testing.T) {
	root := t.TempDir()
	WriteTree(t, root, map[string]string{
		"etc/resolv.conf": "->../run/resolv.conf",
		"run/resolv.conf": "nameserver 192.0.2.1\n",
		"var/empty/":      "",
	})
	got := Tree(t, root)
	want := map[string]Node{
		".":               {Kind: "dir", Mode: got["."].Mode},
		"etc":             {Kind: "dir", Mode: 0o755},
		"etc/resolv.conf": {Kind: "link", Data: "../run/resolv.conf"},
		"run":             {Kind: "dir", Mode: 0o755},
		"run/resolv.conf": {Kind: "file", Mode: 0o644, Data: "nameserver 192.0.2.1\n"},
		"var":             {Kind: "dir", Mode: 0o755},
		"var/empty":       {Kind: "dir", Mode: 0o755},
	}
	DiffTrees(t, want, got)
	if p := WriteFile(t, "t.toml", "x = 1\n"); filepath.Dir(p) == "." || Tree(t, filepath.Dir(p))["t.toml"].Data != "x = 1\n" {
		t.Errorf("WriteFile of a bare name wrote %s", p)
	}
}
