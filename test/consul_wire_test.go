package test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// askWire sends m to addr over network ("udp" or "tcp") and returns the
// reply's bytes as they came (5 s timeout): the byte comparison of
// TestConsulAnswersOnEveryPath reads them, not a dns.Msg packed again.
func askWire(addr, network string, m *dns.Msg) ([]byte, error) {
	pkt, err := m.Pack()
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	if network == "udp" {
		if _, err := conn.Write(pkt); err != nil {
			return nil, err
		}
		buf := make([]byte, 65535)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return nil, err
			}
			if n >= 2 && buf[0] == pkt[0] && buf[1] == pkt[1] {
				return buf[:n], nil
			}
		}
	}
	if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(pkt))), pkt...)); err != nil {
		return nil, err
	}
	var size [2]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	reply := make([]byte, binary.BigEndian.Uint16(size[:]))
	_, err = io.ReadFull(conn, reply)
	return reply, err
}

// generalQuery is query(name, qtype, true) with an EDNS option of the
// local range (RFC 6891 6.1.2), which the fast path declines
// (resolver/fastpath.go fastOption): ServeDNS answers it, on the general
// path, from the same cache and watch.
func generalQuery(name string, qtype uint16) *dns.Msg {
	m := query(name, qtype, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1}})
	return m
}

// wireForm is a reply's bytes reduced to what is the same on every path
// for one question: the ID, the TTLs and a SOA's serial (a clock reading
// of the agent) zeroed, the OPT record (a stale answer's EDE) left out and
// not counted. Names keep their letter case: the comparison is
// case-sensitive.
type wireForm struct {
	// exact is the reply's bytes so reduced, compression as sent; ordered
	// says the order of its records is the server's, not a shuffle's (no
	// section holds two records), so that exact compares as is.
	exact   []byte
	ordered bool
	// head is the header and question; records each section's records
	// uncompressed (their names spelled as sent), in byte order: the same
	// answer whatever the shuffle's order.
	head    []byte
	records [3][]string
}

// wireFormOf reduces reply (see wireForm).
func wireFormOf(reply []byte) (wireForm, error) {
	var f wireForm
	if len(reply) < 12 {
		return f, fmt.Errorf("a reply of %d bytes", len(reply))
	}
	b := slices.Clone(reply)
	b[0], b[1] = 0, 0
	counts := [3]int{int(binary.BigEndian.Uint16(b[6:])), int(binary.BigEndian.Uint16(b[8:])), int(binary.BigEndian.Uint16(b[10:]))}
	if binary.BigEndian.Uint16(b[4:]) != 1 {
		return f, fmt.Errorf("%d questions", binary.BigEndian.Uint16(b[4:]))
	}
	_, off, err := dns.UnpackDomainName(b, 12)
	if err != nil {
		return f, err
	}
	off += 4
	questionEnd := off
	f.ordered = true
	var opt []int // the OPT record's start and end
	for section, n := range counts {
		if n > 1 {
			f.ordered = false
		}
		for range n {
			start := off
			_, nameEnd, err := dns.UnpackDomainName(b, off)
			if err != nil || nameEnd+10 > len(b) {
				return f, fmt.Errorf("record at %d: %v", start, err)
			}
			rrtype := binary.BigEndian.Uint16(b[nameEnd:])
			rr, end, err := dns.UnpackRR(b, start)
			if err != nil {
				return f, fmt.Errorf("record at %d: %v", start, err)
			}
			off = end
			if rrtype == dns.TypeOPT {
				opt = []int{start, end}
				continue
			}
			binary.BigEndian.PutUint32(b[nameEnd+4:], 0)
			rr.Header().Ttl = 0
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Serial = 0
				_, rdata, _ := dns.UnpackDomainName(b, nameEnd+10)
				_, rdata, _ = dns.UnpackDomainName(b, rdata)
				binary.BigEndian.PutUint32(b[rdata:], 0)
			}
			whole := make([]byte, dns.Len(rr)+64)
			n, err := dns.PackRR(rr, whole, 0, nil, false)
			if err != nil {
				return f, err
			}
			f.records[section] = append(f.records[section], hex.EncodeToString(whole[:n]))
		}
	}
	if off != len(b) {
		return f, fmt.Errorf("%d bytes after the last record", len(b)-off)
	}
	if opt != nil {
		b = append(b[:opt[0]], b[opt[1]:]...)
		binary.BigEndian.PutUint16(b[10:], uint16(counts[2]-1))
	}
	for i := range f.records {
		slices.Sort(f.records[i])
	}
	f.exact, f.head = b, slices.Clone(b[:questionEnd])
	return f, nil
}

// differs says how f and g, two paths' replies to one question, differ,
// or "" when they are the same bytes: exactly, when both are ordered;
// else the header, the question and every record's bytes. countsOnly
// compares the header and question alone (an answer the agent cut to a
// shuffled subset of its records).
func (f wireForm) differs(g wireForm, countsOnly bool) string {
	if !bytes.Equal(f.head, g.head) {
		return fmt.Sprintf("header and question\n% x\n% x", f.head, g.head)
	}
	if countsOnly {
		return ""
	}
	if f.ordered && g.ordered && !bytes.Equal(f.exact, g.exact) {
		return fmt.Sprintf("bytes\n% x\n% x", f.exact, g.exact)
	}
	for i, name := range []string{"answer", "authority", "additional"} {
		if !slices.Equal(f.records[i], g.records[i]) {
			return fmt.Sprintf("%s records\n%s\n%s", name, strings.Join(f.records[i], " "), strings.Join(g.records[i], " "))
		}
	}
	return ""
}
