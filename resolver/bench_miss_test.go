package resolver

import (
	"encoding/binary"
	"fmt"
	"net/netip"
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

// loopbackHandlers returns a maker of fresh handlers (a new cache each, so
// every name is a miss again) forwarding "." to one group over a loopback
// responder that answers every question: the loopback miss benchmarks'.
func loopbackHandlers(b *testing.B) func() *Handler {
	g, err := upstream.NewGroup(".", []string{answeringResponder(b)}, upstream.GroupOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return func() *Handler { return benchHandlerOver(b, 1<<17, g) }
}

// BenchmarkServeDNSMissLoopback is a whole miss on the general path with
// the real upstream transport: ServeDNS on a new name, the group's
// resolution over loopback (socket, ID, the one reader, unpack, scrub),
// the store, the reply. Its allocations are a miss's (issue 17).
func BenchmarkServeDNSMissLoopback(b *testing.B) {
	newHandler := loopbackHandlers(b)
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

// benchReplier is a wireReplier that only signals each answer.
type benchReplier struct {
	answered chan int
}

func (benchReplier) beginMiss() bool                       { return true }
func (r benchReplier) sendMiss(b []byte, _ netip.AddrPort) { r.answered <- len(b) }
func (benchReplier) endMiss()                              {}
func (benchReplier) missPanicked(v any, _ []byte)          { panic(v) }

// BenchmarkWireMissLoopback is BenchmarkServeDNSMissLoopback on the wire
// miss path: the packet's bytes through answerPacket, the flight, the
// group's wire exchange over loopback, the entry made from the reply's
// bytes and the answer written from it (issue 17's target: at most 10
// allocations per miss).
func BenchmarkWireMissLoopback(b *testing.B) {
	newHandler := loopbackHandlers(b)
	h := newHandler()
	pkts := make([][]byte, 0, 1<<16)
	for i := range cap(pkts) {
		p, err := benchQuery(fmt.Sprintf("w%d.bench.test.", i)).Pack()
		if err != nil {
			b.Fatal(err)
		}
		pkts = append(pkts, p)
	}
	r := benchReplier{answered: make(chan int, 1)}
	q := plainQuery{replier: r}
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	dst := make([]byte, 0, 4096)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(pkts) {
			b.StopTimer()
			h = newHandler()
			i = 0
			b.StartTimer()
		}
		reply, ok := h.answerPacket(dst[:0], pkts[i], from, false, &q)
		if !ok || len(reply) != 0 {
			b.Fatalf("packet %d: not a wire miss", i)
		}
		if n := <-r.answered; n < 12+16+16 {
			b.Fatalf("answer of %d bytes", n)
		}
		i++
	}
}
