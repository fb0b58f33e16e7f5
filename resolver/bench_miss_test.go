package resolver

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// answeringResponder answers every A query with one address, TTL 1 h, the
// query's OPT record kept, written from the query's bytes without
// allocating: the benchmark's allocations are towerd's.
func answeringResponder(b *testing.B) string {
	return dnstest.Responder(b, func(in, out []byte) int {
		// The question ends after its name and 4 bytes of type, class.
		n, off := len(in), 12
		for off < n && in[off] != 0 {
			off += int(in[off]) + 1
		}
		off += 5
		if n < 12 || off > n {
			return 0
		}
		copy(out, in[:off])
		out[2] |= 0x80 // QR
		out[3] |= 0x80 // RA
		binary.BigEndian.PutUint16(out[6:], 1)
		rr := []byte{0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 192, 0, 2, byte(off)}
		m := off + copy(out[off:], rr)
		return m + copy(out[m:], in[off:n]) // the OPT record
	})
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
	newHandler := func() *Handler { return benchHandlerOver(b, 1<<17, g) }
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
