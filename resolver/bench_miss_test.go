package resolver

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
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
	return loopbackHandlersOver(b, answeringResponder(b), upstream.GroupOptions{})
}

// loopbackHandlersOver is loopbackHandlers forwarding to server.
func loopbackHandlersOver(b *testing.B, server string, opts upstream.GroupOptions) func() *Handler {
	g, err := upstream.NewGroup(".", []string{server}, opts)
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
	r := benchReplier{answered: make(chan int, 1)}
	benchWireMiss(b, loopbackHandlers(b), false, r, func() int { return <-r.answered })
}

// BenchmarkTLSWireMissLoopback is BenchmarkWireMissLoopback forwarded over
// DNS over TLS to a server on loopback (issue 37): one connection, every
// miss pipelined on it. The server's own allocations (it unpacks and
// packs each query with miekg/dns) are counted too; the memory profile
// tells them apart.
func BenchmarkTLSWireMissLoopback(b *testing.B) {
	ca := dnstest.NewCA(b)
	cert, _, _ := ca.Leaf(b, "dns.test")
	srv := dnstest.NewDoTServer(b, cert, dnstest.DoTAnswer)
	r := benchReplier{answered: make(chan int, 1)}
	handlers := loopbackHandlersOver(b, "tls://"+srv.Addr+"#dns.test", upstream.GroupOptions{TLSRoots: ca.Pool()})
	benchWireMiss(b, handlers, false, r, func() int { return <-r.answered })
}

// BenchmarkTCPMissLoopback is BenchmarkWireMissLoopback for a query read
// from a TCP connection (issue 22: TCP misses take the wire path; the
// answer is written to a loopback connection by whoever ends the flight,
// tcpPipe, and read back by the benchmark).
func BenchmarkTCPMissLoopback(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	tc := &tcpConn{conn: server, owner: &tcpServer{stop: make(chan struct{})}, closeAs: -1}
	pipe := newTCPPipe(server, time.Second, nil, newTCPBudget(1), tc)
	rd := bufio.NewReader(client)
	buf := make([]byte, dns.MaxMsgSize)
	prefix := make([]byte, 2)
	benchWireMiss(b, loopbackHandlers(b), true, pipe, func() int {
		if _, err := io.ReadFull(rd, prefix); err != nil {
			b.Fatal(err)
		}
		n := int(binary.BigEndian.Uint16(prefix))
		if _, err := io.ReadFull(rd, buf[:n]); err != nil {
			b.Fatal(err)
		}
		return n
	})
}

// benchWireMiss asks new names through answerPacket of newHandler's
// handlers, over TCP or UDP, with replier, and waits for each answer's
// length.
func benchWireMiss(b *testing.B, newHandler func() *Handler, tcp bool, replier wireReplier, answered func() int) {
	h := newHandler()
	pkts := benchPackets(b, "w", 1<<16)
	q := plainQuery{replier: replier}
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
		reply, ok := h.answerPacket(dst[:0], pkts[i], from, tcp, &q)
		if !ok || len(reply) != 0 {
			b.Fatalf("packet %d: not a wire miss", i)
		}
		if n := answered(); n < 12+16+16 {
			b.Fatalf("answer of %d bytes", n)
		}
		i++
	}
}

// BenchmarkPrefetchLoopback is a prefetch: a hit in the last tenth of its
// entry's TTL, on the fast path, starts the entry's refresh, which runs
// the one resolution over loopback with nobody waiting (issue 22). The
// benchmark waits for each refresh to end; its allocations are the hit's
// (none) and the refresh's.
func BenchmarkPrefetchLoopback(b *testing.B) { benchRefresh(b, 3599*time.Second) }

// BenchmarkRefreshLoopback is a stale answer's refresh: the fast path asked
// for an entry expired a moment ago answers it stale at once, as bytes
// (its refresh runs behind the answer, staleAtOnce; issue 22), and the
// refresh runs the one resolution. The allocations are the refresh's.
func BenchmarkRefreshLoopback(b *testing.B) { benchRefresh(b, 3601*time.Second) }

// benchRefresh asks names cached an hour ago (TTL 1 h) after advance, on
// the fast path: a prefetch (fresh, near expiry) or a stale answer
// (expired), each starting one refresh the benchmark waits for.
func benchRefresh(b *testing.B, advance time.Duration) {
	g, err := upstream.NewGroup(".", []string{answeringResponder(b)}, upstream.GroupOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	clock := newFakeClock()
	const names = 1 << 12
	newHandler := func() (*Handler, [][]byte) {
		c, err := cache.New(cache.Config{Capacity: 2 * names, MaxStaleAge: 24 * time.Hour, Now: clock.Now})
		if err != nil {
			b.Fatal(err)
		}
		h, err := NewHandler(Config{Zones: []Zone{{Name: ".", Upstream: g}}, ServeStale: true, Prefetch: true,
			StaleClientTimeout: 1800 * time.Millisecond, StaleAnswerTTL: 30 * time.Second, FailureRecheck: 30 * time.Second,
			Now: clock.Now}, c, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Close)
		pkts := make([][]byte, names)
		w := &benchWriter{buf: make([]byte, 0, 4096)}
		for i := range pkts {
			m := benchQuery(fmt.Sprintf("r%d.bench.test.", i))
			h.ServeDNS(w, m) // cached, TTL 1 h
			pkts[i], _ = m.Pack()
		}
		clock.Advance(advance)
		return h, pkts
	}
	h, pkts := newHandler()
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery
	dst := make([]byte, 0, 4096)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(pkts) {
			b.StopTimer()
			h, pkts = newHandler()
			i = 0
			b.StartTimer()
		}
		if _, ok := h.answerPacket(dst[:0], pkts[i], from, false, &q); !ok {
			b.Fatalf("packet %d: declined by the fast path", i)
		}
		for h.Inflight() != 0 {
			time.Sleep(time.Microsecond) // parks: the poller runs, the reply is read
		}
		i++
	}
}

// benchPackets packs n A queries for new names starting with prefix.
func benchPackets(b *testing.B, prefix string, n int) [][]byte {
	pkts := make([][]byte, 0, n)
	for i := range n {
		p, err := benchQuery(fmt.Sprintf("%s%d.bench.test.", prefix, i)).Pack()
		if err != nil {
			b.Fatal(err)
		}
		pkts = append(pkts, p)
	}
	return pkts
}
