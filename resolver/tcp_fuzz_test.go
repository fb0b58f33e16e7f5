package resolver

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzTCPStream feeds any byte stream to one TCP connection's loop (issue
// 13): length prefixes of every size, messages cut anywhere, many queries
// in one write. Nothing may panic; every reply must be framed, parse and
// answer one of the queries sent; the connection ends, and its place under
// the cap is given back.
func FuzzTCPStream(f *testing.F) {
	frame := func(msgs ...[]byte) []byte {
		var out []byte
		for _, m := range msgs {
			out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
			out = append(out, m...)
		}
		return out
	}
	seeds := seedPackets(f)
	f.Add(frame(seeds[0], seeds[1], seeds[2]))            // pipelined queries
	f.Add([]byte{0xFF, 0xFF})                             // 65,535 announced, nothing sent
	f.Add([]byte{0x10, 0x01, 0, 0, 0})                    // 4,097 announced: over the limit
	f.Add([]byte{0x0F, 0xA0, 1, 2, 3})                    // 4,000 announced, 3 sent
	f.Add([]byte{0x00})                                   // half a length prefix
	f.Add(frame([]byte{}))                                // an empty message
	f.Add(frame([]byte{0x12, 0x34, 1, 0, 0, 1}))          // a header cut short
	f.Add(append(frame(seeds[0]), seeds[0][:5]...))       // a query, then one cut off
	f.Add(frame(seeds[0], make([]byte, MaxTCPQuerySize))) // a query, then the largest zero message

	h, clock := fuzzHandler(f, nil)

	f.Fuzz(func(t *testing.T, stream []byte) {
		clock.Advance(17 * time.Second)
		var panicked any
		onPanic := func(v any, _ []byte) { panicked = v }
		budget := newTCPBudget(1)
		// Short idle and read timeouts end the connection once the stream
		// is consumed (it is all in memory: a read that waits has reached
		// its end), so a cut message costs milliseconds, not seconds.
		ts := newTCPServer(nil, budget, recoverer{next: h, onPanic: onPanic}, h,
			tcpLimits{idle: 5 * time.Millisecond, read: 5 * time.Millisecond, write: time.Second}, onPanic, nil)
		server, client := net.Pipe()
		defer client.Close()
		tc := budget.admit(ts, server)
		done := make(chan struct{})
		go func() { ts.serveConn(tc); close(done) }()
		go func() { client.Write(stream) }() // fails once the server closes
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		replies, err := io.ReadAll(client)
		if err != nil {
			t.Fatalf("reading replies: %v", err)
		}
		<-done
		if panicked != nil {
			t.Fatalf("panic: %v", panicked)
		}
		if budget.connections() != 0 || len(budget.conns) != 0 {
			t.Fatalf("the connection still counts: %d open", budget.connections())
		}
		ids := map[uint16]bool{}
		for rest := stream; len(rest) >= 2; {
			n := int(binary.BigEndian.Uint16(rest))
			if n > len(rest)-2 || n > MaxTCPQuerySize {
				break
			}
			if n >= 2 {
				ids[binary.BigEndian.Uint16(rest[2:])] = true
			}
			rest = rest[2+n:]
		}
		for len(replies) > 0 {
			if len(replies) < 2 {
				t.Fatalf("a reply's length prefix cut short")
			}
			n := int(binary.BigEndian.Uint16(replies))
			if n > len(replies)-2 {
				t.Fatalf("reply framed as %d bytes, %d follow", n, len(replies)-2)
			}
			m := new(dns.Msg)
			if err := m.Unpack(replies[2 : 2+n]); err != nil {
				t.Fatalf("a reply does not parse: %v", err)
			}
			if !m.Response || !ids[m.Id] {
				t.Fatalf("reply ID %d (QR %v) answers no query sent", m.Id, m.Response)
			}
			replies = replies[2+n:]
		}
	})
}
