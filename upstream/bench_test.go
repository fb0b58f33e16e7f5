package upstream

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// echoResponder answers every query on a loopback UDP socket with itself,
// QR set: a NOERROR reply with no records, made without allocating, so a
// benchmark's allocations are the transport's.
func echoResponder(b *testing.B) string {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() {
		pc.Close()
		<-done
	})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n >= 12 {
				buf[2] |= 0x80
				_, _ = pc.WriteToUDPAddrPort(buf[:n], from)
			}
		}
	}()
	return pc.LocalAddr().String()
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
