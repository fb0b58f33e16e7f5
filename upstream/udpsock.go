package upstream

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"

	"github.com/towerd/towerd/resolver/dnswire"
)

// An attempt's UDP socket (udpSock, one per packet sent: a fresh random
// source port, RFC 5452 section 4.5) is connected to its server, so the
// kernel drops datagrams from any other source. Nobody blocks on it: the
// process's one reader (udpsock_linux.go: a goroutine in the runtime's
// poller watching every attempt socket through one epoll set) reads what
// arrives, drops what is not a response to its query (ID, question:
// accepts), counting a mismatch, and gives the first plausible reply to
// the socket's owner (sockOwner: the resolution, WireCall.datagram, or a
// lone exchange's channel). It then reads nothing more from that socket
// until the owner, having judged the reply, either closes the socket (the
// resolution is over) or rearms it (the reply did not parse: a forgery or
// a broken server; the genuine reply may follow). So a miss costs no
// goroutine per attempt, and every attempt's socket can stay open until
// its resolution ends.

// datagram is what an attempt's socket hands its owner: a reply that passed
// accepts, or the socket's error (ECONNREFUSED: the attempt is over).
type datagram struct {
	sock *udpSock
	raw  []byte
	err  error
}

// sockOwner is who an attempt socket's datagrams go to. datagram is called
// on the reader's goroutine, d.raw in its buffer (valid only during the
// call); it must not block.
type sockOwner interface {
	datagram(d datagram)
}

// replyChan is the owner of a lone exchange's socket (Plain.exchangeUDP):
// the datagram, copied, on a channel with room for one (a socket hands
// over one before it is rearmed).
type replyChan chan datagram

func (ch replyChan) datagram(d datagram) {
	if d.raw != nil {
		d.raw = append([]byte(nil), d.raw...)
	}
	select {
	case ch <- d:
	default:
	}
}

// errBadQuery is a query the UDP transport cannot frame: a compressed or
// malformed question section.
var errBadQuery = errors.New("query's question section cannot be matched")

// errNoPlaintext: a DNS over TLS server's Plain (its name and counters)
// was asked to send in clear, which it never does (tls.go).
var errNoPlaintext = errors.New("refusing to send in clear to a dns over tls server")

// errSelfConnect: every socket opened was handed the server's own address.
var errSelfConnect = errors.New("socket connected to itself")

// packPool recycles the buffers queries are packed into; a query's bytes
// live until its sockets close, since each socket matches replies against
// the question in them.
var packPool = sync.Pool{New: func() any {
	buf := make([]byte, 0, 512)
	return &buf
}}

// questionEnd returns the end of the question section of packed, a query
// of one question.
func questionEnd(packed []byte) (int, error) {
	var q dnswire.Msg
	if q.ParseQuestion(packed) != nil || q.QDCount != 1 {
		return 0, errBadQuery
	}
	return q.QEnd, nil
}

// replyMatch is what a reply must carry to be the one to a query: the
// query's ID and its one question (RFC 5452 section 9.1).
type replyMatch struct {
	id            uint16
	qname         []byte // the query's question name, uncompressed, in the query's bytes
	qtype, qclass uint16
}

// matchOf is the match of packed, a query whose question ends at qend,
// read with the view.
func matchOf(packed []byte, qend int) replyMatch {
	var m dnswire.Msg
	_ = m.ParseQuestion(packed[:qend]) // packed is our own query: it parses
	qname, _ := m.QuestionInPlace()    // and its name is whole (AppendQuery)
	return replyMatch{id: m.ID, qname: qname, qtype: m.QType, qclass: m.QClass}
}

// accepts reports whether b can be the reply to the query: a response with
// its ID and its question, the name compared case-insensitively (RFC
// 4343), read with the view's header and question alone (a truncated reply
// may be cut after them), before anything else is looked at.
func (r *replyMatch) accepts(b []byte) bool {
	var m dnswire.Msg
	return m.ParseQuestion(b) == nil && m.Flags&dnswire.FlagQR != 0 && m.ID == r.id && m.QDCount == 1 &&
		m.QType == r.qtype && m.QClass == r.qclass && m.QuestionIs(r.qname)
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
