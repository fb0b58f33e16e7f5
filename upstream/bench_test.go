package upstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// echoResponder answers every query with itself, QR set: a NOERROR reply
// with no records, made without allocating, so a benchmark's allocations
// are the transport's.
func echoResponder(b *testing.B) string {
	return dnstest.Responder(b, func(in, out []byte) int {
		if len(in) < 12 {
			return 0
		}
		n := copy(out, in)
		out[2] |= 0x80
		return n
	})
}

// BenchmarkGroupExchange is one resolution over loopback through a group of
// one server: pack, a fresh socket and ID, the reply checked, unpacked and
// scrubbed. Its allocations are the transport's share of a miss.
func BenchmarkGroupExchange(b *testing.B) {
	g, err := NewGroup(".", []string{echoResponder(b)}, GroupOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	queries := make([]*dns.Msg, 1024)
	for i := range queries {
		queries[i] = new(dns.Msg).SetQuestion(fmt.Sprintf("m%d.bench.test.", i), dns.TypeA)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := g.Exchange(ctx, queries[i%len(queries)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkGroupExchangeWire is BenchmarkGroupExchange on the wire path:
// the query packed by the caller, the clean reply handed back as bytes.
func BenchmarkGroupExchangeWire(b *testing.B) {
	benchExchangeWire(b, echoResponder(b), GroupOptions{})
}

// benchExchangeWire measures ExchangeWire through a group of server alone,
// 1,024 names asked in turn.
func benchExchangeWire(b *testing.B, server string, opts GroupOptions) {
	g, err := NewGroup(".", []string{server}, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	queries := make([][]byte, 1024)
	for i := range queries {
		m := new(dns.Msg).SetQuestion(fmt.Sprintf("m%d.bench.test.", i), dns.TypeA)
		m.SetEdns0(1232, false)
		if queries[i], err = m.Pack(); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r, err := g.ExchangeWire(ctx, queries[i%len(queries)], time.Time{})
		if err != nil || r.Raw == nil {
			b.Fatal(err, r.Raw == nil)
		}
		i++
	}
}

// BenchmarkGroupExchangeWireTLS is BenchmarkGroupExchangeWire to a DNS
// over TLS server on loopback (issue 37): one connection, every query on
// it; beside the UDP one it is the TLS path's own cost per miss.
func BenchmarkGroupExchangeWireTLS(b *testing.B) {
	ca := dnstest.NewCA(b)
	cert, _, _ := ca.Leaf(b, "dns.test")
	srv := dnstest.NewDoTServer(b, cert, dnstest.DoTAnswer)
	benchExchangeWire(b, "tls://"+srv.Addr+"#dns.test", GroupOptions{TLSRoots: ca.Pool()})
}
