package resolver

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// answeringResponder answers every A query on a loopback UDP socket with one
// address, TTL 1 h, the query's OPT record kept, written from the query's
// bytes without allocating: the benchmark's allocations are towerd's.
func answeringResponder(b *testing.B) string {
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
		in := make([]byte, 4096)
		out := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(in)
			if err != nil {
				return
			}
			// The question ends after its name and 4 bytes of type, class.
			off := 12
			for off < n && in[off] != 0 {
				off += int(in[off]) + 1
			}
			off += 5
			if n < 12 || off > n {
				continue
			}
			copy(out, in[:off])
			out[2] |= 0x80 // QR
			out[3] |= 0x80 // RA
			binary.BigEndian.PutUint16(out[6:], 1)
			rr := []byte{0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, byte(off)}
			m := off + copy(out[off:], rr)
			m += copy(out[m:], in[off:n]) // the OPT record
			_, _ = pc.WriteToUDPAddrPort(out[:m], from)
		}
	}()
	return pc.LocalAddr().String()
}

// BenchmarkServeDNSMissLoopback is a whole miss on the general path with
// the real upstream transport: ServeDNS on a new name, the group's
// resolution over loopback (socket, ID, the one reader, unpack, scrub),
// the store, the reply. Its allocations are a miss's (issue 17).
func BenchmarkServeDNSMissLoopback(b *testing.B) {
	g, err := upstream.NewGroup(".", []string{answeringResponder(b)}, upstream.GroupOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	newHandler := func() *Handler {
		c, err := cache.New(cache.Config{Capacity: 1 << 17, MaxStaleAge: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		h, err := NewHandler(Config{
			Zones:              []Zone{{Name: ".", Upstream: g}},
			ServeStale:         true,
			Prefetch:           true,
			StaleClientTimeout: 1800 * time.Millisecond,
			StaleAnswerTTL:     30 * time.Second,
			FailureRecheck:     30 * time.Second,
		}, c, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Close)
		return h
	}
	h := newHandler()
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	names := make([]*dns.Msg, 0, 1<<16)
	for i := range cap(names) {
		names = append(names, benchQuery(fmt.Sprintf("w%d.bench.test.", i)))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(names) {
			b.StopTimer()
			h = newHandler()
			i = 0
			b.StartTimer()
		}
		w.reply = nil
		h.ServeDNS(w, names[i])
		if len(w.reply) == 0 {
			b.Fatal("no reply")
		}
		i++
	}
	b.StopTimer()
	reply := new(dns.Msg)
	if err := reply.Unpack(w.reply); err != nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
		b.Fatalf("last reply %v, %v; want NOERROR with one A", reply, err)
	}
}
