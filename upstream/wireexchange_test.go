package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// packedQuery is name/qtype as the resolver packs an upstream query.
func packedQuery(t *testing.T, name string, qtype uint16) []byte {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.AuthenticatedData = true
	m.SetEdns0(1232, false)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ExchangeWire hands back every reply as bytes, scrubbed: over TCP after
// TC, with the rcode error of a SERVFAIL; Exchange, waiting on the same
// resolution, unpacks the same records.
func TestExchangeWire(t *testing.T) {
	u := dnstest.NewUpstream(t)
	u.Add(t, "www.example. 60 IN A 192.0.2.1", "cname.example. 60 IN CNAME www.example.",
		"big.example. 60 IN A 192.0.2.2")
	u.SetNXDOMAIN("nx.example.")
	u.SetNODATA("nodata.example.")
	u.TruncateUDP("big.example.")
	u.SetRcode("fail.example.", dns.RcodeServerFailure)
	g, err := NewGroup(".", []string{u.Addr}, GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()

	tests := []struct {
		name    string
		qtype   uint16
		rcode   int
		answers int
		rcodeEr bool
	}{
		{"www.example.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"nx.example.", dns.TypeA, dns.RcodeNameError, 0, false},
		{"nodata.example.", dns.TypeAAAA, dns.RcodeSuccess, 0, false},
		{"cname.example.", dns.TypeCNAME, dns.RcodeSuccess, 1, false},
		{"big.example.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"fail.example.", dns.TypeA, dns.RcodeServerFailure, 0, true},
	}
	for _, tt := range tests {
		query := packedQuery(t, tt.name, tt.qtype)
		got, err := g.ExchangeWire(ctx, query, time.Time{})
		var rcodeErr *RcodeError
		if tt.rcodeEr != errors.As(err, &rcodeErr) || (!tt.rcodeEr && err != nil) {
			t.Errorf("%s: err %v", tt.name, err)
			continue
		}
		if got.Raw == nil || got.Server != u.Addr {
			t.Errorf("%s: raw %v server %q", tt.name, got.Raw != nil, got.Server)
			continue
		}
		m := new(dns.Msg)
		if err := m.Unpack(got.Raw); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if m.Rcode != tt.rcode || len(m.Answer) != tt.answers {
			t.Errorf("%s: %s with %d answers, want %s with %d", tt.name, dns.RcodeToString[m.Rcode], len(m.Answer),
				dns.RcodeToString[tt.rcode], tt.answers)
		}
		want, _, _ := g.ExchangeScrubbed(ctx, new(dns.Msg).SetQuestion(tt.name, tt.qtype))
		if want == nil || len(want.Answer) != len(m.Answer) || len(want.Ns) != len(m.Ns) {
			t.Errorf("%s: ExchangeScrubbed gave %v, ExchangeWire %v", tt.name, want, m)
		}
	}
	if n := u.CountNet("big.example.", dns.TypeA, "tcp"); n != 2 {
		t.Errorf("big.example. asked %d times over TCP, want 2 (once per exchange)", n)
	}
}

// ExchangeWire's deadline ends the resolution as a context's would: a
// timeout, the server's silence counted.
func TestExchangeWireDeadline(t *testing.T) {
	u := dnstest.NewUpstream(t)
	u.SetFault("drop.example.", dnstest.Fault{Drop: true})
	g, err := NewGroup(".", []string{u.Addr}, GroupOptions{MinAttemptTimeout: 10 * time.Millisecond, InitialAttemptTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	got, err := g.ExchangeWire(context.Background(), packedQuery(t, "drop.example.", dns.TypeA), time.Now().Add(100*time.Millisecond))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || got.Raw != nil {
		t.Fatalf("got %+v, %v; want a timeout", got, err)
	}
	if n := u.Count("drop.example.", dns.TypeA); n == 0 || n > 3 {
		t.Errorf("%d attempts, want 1 to 3 (MaxAttempts)", n)
	}
}
