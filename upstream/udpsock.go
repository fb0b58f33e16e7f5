package upstream

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"

	"github.com/miekg/dns"
)

// An attempt's UDP socket (udpSock, one per packet sent: a fresh random
// source port, RFC 5452 section 4.5) is connected to its server, so the
// kernel drops datagrams from any other source. Nobody blocks on it: the
// process's one reader (udpsock_linux.go: a goroutine in the runtime's
// poller watching every attempt socket through one epoll set) reads what
// arrives, drops what is not a response to its query (ID, question:
// accepts), counting a mismatch, and hands the first plausible reply to the
// socket's channel as a datagram (or, for the first attempt of a StartWire
// resolution, gives it to the resolution itself: wirecall.go). It then
// reads nothing more from that socket until the owner, having unpacked the
// reply, either closes the socket (the resolution is over) or rearms it
// (the reply did not unpack: a forgery or a broken server; the genuine
// reply may follow). So a miss costs no goroutine per attempt, and every
// attempt's socket can stay open until its resolution ends.

// datagram is what an attempt's socket hands its owner: a reply that passed
// accepts, or the socket's error (ECONNREFUSED: the attempt is over).
type datagram struct {
	sock *udpSock
	raw  []byte
	err  error
}

// errBadQuery is a query the UDP transport cannot frame: a compressed or
// malformed question section.
var errBadQuery = errors.New("query's question section cannot be matched")

// errSelfConnect: every socket opened was handed the server's own address.
var errSelfConnect = errors.New("socket connected to itself")

// packPool recycles the buffers queries are packed into; a query's bytes
// live until its sockets close, since each socket matches replies against
// the question in them.
var packPool = sync.Pool{New: func() any {
	buf := make([]byte, 0, 512)
	return &buf
}}

// questionEnd returns the end of the question section of packed (a query
// as dns.Msg.Pack writes it: names uncompressed) and its QDCOUNT.
func questionEnd(packed []byte) (int, uint16, error) {
	if len(packed) < 12 {
		return 0, 0, errBadQuery
	}
	qd := binary.BigEndian.Uint16(packed[4:])
	off := 12
	for range qd {
		for {
			if off >= len(packed) {
				return 0, 0, errBadQuery
			}
			l := int(packed[off])
			if l > 63 {
				return 0, 0, errBadQuery
			}
			off += 1 + l
			if l == 0 {
				break
			}
		}
		off += 4
	}
	if off > len(packed) {
		return 0, 0, errBadQuery
	}
	return off, qd, nil
}

// accepts reports whether b can be the reply to s's query: a response with
// its ID and its question (RFC 5452 section 9.1), names compared
// case-insensitively (RFC 4343), read from the wire before any unpacking.
func (s *udpSock) accepts(b []byte) bool {
	if len(b) < 12 || b[2]&0x80 == 0 || binary.BigEndian.Uint16(b) != s.id ||
		binary.BigEndian.Uint16(b[4:]) != s.qdcount || len(b) < 12+len(s.question) {
		return false
	}
	q, r := s.question, b[12:12+len(s.question)]
	for i := 0; i < len(q); {
		// Names: label by label. A compression pointer in the reply's
		// question never equals a length byte of the query's.
		for {
			l := int(q[i])
			if r[i] != q[i] {
				return false
			}
			for j := i + 1; j <= i+l; j++ {
				if lower(r[j]) != lower(q[j]) {
					return false
				}
			}
			i += 1 + l
			if l == 0 {
				break
			}
		}
		if r[i] != q[i] || r[i+1] != q[i+1] || r[i+2] != q[i+2] || r[i+3] != q[i+3] {
			return false
		}
		i += 4
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// unpackReply unpacks a datagram's reply; on failure it counts a mismatch
// and rearms the socket, so the genuine reply can still be heard.
func (s *udpSock) unpackReply(raw []byte) (*dns.Msg, bool) {
	reply := new(dns.Msg)
	if reply.Unpack(raw) != nil {
		s.plain.mismatches.Add(1)
		s.rearm()
		return nil, false
	}
	return reply, true
}

// parseServer is the server address as the raw transport needs it.
func parseServer(addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ap, err
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// randomID is a query ID from the kernel's random source (RFC 5452 section
// 9.2), as dns.Id, without its allocations (binary.Read through an
// io.Reader).
func randomID() uint16 {
	var b [2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return binary.BigEndian.Uint16(b[:])
}
