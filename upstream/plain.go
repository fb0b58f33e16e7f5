package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// maxMessageSize is the largest DNS message either transport can carry; a
// UDP read buffer any smaller could silently cut a large EDNS reply.
const maxMessageSize = 65535

// plainFallbackTimeout bounds an exchange whose context has no deadline, so a
// lost UDP datagram can never block a caller forever.
const plainFallbackTimeout = 2 * time.Second

// longAgo is a deadline already in the past: setting it wakes a blocked read
// at once, which is how a cancelled context aborts an exchange.
var longAgo = time.Unix(1, 0)

// Plain is classic DNS to one server: UDP first, TCP when the reply is
// truncated (RFC 7766 section 5). It keeps no sockets between exchanges, so
// it is safe for concurrent use and Close has nothing to release.
type Plain struct {
	addr       string
	raw        *sockServer // addr as the UDP transport's socket address
	dialer     net.Dialer  // TCP only
	mismatches atomic.Uint64
}

// NewPlain returns a Plain for addr, which NormalizeAddress accepts.
func NewPlain(addr string) (*Plain, error) {
	normalized, err := NormalizeAddress(addr)
	if err != nil {
		return nil, err
	}
	raw, err := newSockServer(normalized)
	if err != nil {
		return nil, fmt.Errorf("upstream address %s: %w", normalized, err)
	}
	return &Plain{addr: normalized, raw: raw}, nil
}

// Address returns the server's host:port.
func (p *Plain) Address() string { return p.addr }

// Close implements Upstream; Plain holds no resources between exchanges.
func (p *Plain) Close() error { return nil }

// Mismatches counts replies rejected because they did not unpack, were not
// responses, or carried the wrong ID or question. A rising count is the mark
// of a spoofing attempt or of a confused middlebox.
func (p *Plain) Mismatches() uint64 { return p.mismatches.Load() }

// Exchange sends m with a fresh random ID over a new UDP socket and returns
// the first reply that matches it; a truncated reply is fetched again over
// TCP. ctx's deadline bounds both; without one, 2s does. The reply carries
// m's original ID. Failures wrap ErrTimeout or ErrNetwork, or are the
// context's error when the caller cancelled; a SERVFAIL or REFUSED reply
// comes back with a *RcodeError. (A Group's health probe asks with it; a
// resolution's attempts are the Group's own, on bytes.)
func (p *Plain) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, plainFallbackTimeout)
		defer cancel()
	}
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", p.addr, err)
	}
	raw, err := p.exchangeUDP(ctx, packed)
	if err == nil && dnswire.Truncated(raw) {
		raw, err = p.exchangeTCP(ctx, packed)
	}
	if err != nil {
		return nil, err
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(raw); err != nil {
		return nil, fmt.Errorf("reading from %s: %w: %w", p.addr, ErrNetwork, err)
	}
	reply.Id = m.Id
	if isFailureRcode(reply.Rcode) {
		return reply, &RcodeError{Server: p.addr, Rcode: reply.Rcode}
	}
	return reply, nil
}

// exchangeUDP is one query over a new UDP socket (udpsock.go): a fresh
// random source port from the kernel (RFC 5452 section 4.5), a fresh random
// ID in a copy of packed, the first reply that matches and parses; ctx
// bounds the wait.
func (p *Plain) exchangeUDP(ctx context.Context, packed []byte) ([]byte, error) {
	qend, err := questionEnd(packed)
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", p.addr, err)
	}
	query := append([]byte(nil), packed...)
	dnswire.SetID(query, randomID())
	out := make(replyChan, 1)
	sock, err := p.openUDP(query, qend, out, nil)
	if err != nil {
		return nil, fmt.Errorf("sending to %s over udp: %w", p.addr, classify(ctx, err))
	}
	defer sock.close()
	for {
		select {
		case d := <-out:
			if d.err != nil {
				return nil, fmt.Errorf("reading from %s over udp: %w", p.addr, classify(ctx, d.err))
			}
			var m dnswire.Msg
			if m.Parse(d.raw) == nil || m.Flags&dnswire.FlagTC != 0 {
				return d.raw, nil
			}
			p.mismatches.Add(1)
			sock.rearm()
		case <-ctx.Done():
			return nil, fmt.Errorf("reading from %s over udp: %w", p.addr, classify(ctx, ctx.Err()))
		}
	}
}

// exchangeTCP performs one query/response over a new TCP connection
// (RFC 7766 section 5: the retry of a truncated UDP reply): packed with a
// fresh random ID, the first reply that matches it. RFC 1035 section
// 4.2.2: a two-byte length prefix frames each message.
func (p *Plain) exchangeTCP(ctx context.Context, packed []byte) ([]byte, error) {
	if p.raw == nil {
		return nil, errNoPlaintext
	}
	qend, err := questionEnd(packed)
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", p.addr, err)
	}
	query := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(packed)), uint16(len(packed)))
	query = append(query, packed...)
	dnswire.SetID(query[2:], randomID())
	match := matchOf(query[2:], qend)

	conn, err := p.dial(ctx, "tcp")
	if err != nil {
		return nil, fmt.Errorf("dialing %s over tcp: %w", p.addr, classify(ctx, err))
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("setting deadline for %s over tcp: %w", p.addr, classify(ctx, err))
	}
	// The deadline covers expiry; cancellation has no deadline, so wake the
	// blocked read by moving the deadline into the past.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(longAgo) })
	defer stop()

	if _, err := conn.Write(query); err != nil {
		return nil, fmt.Errorf("writing to %s over tcp: %w", p.addr, classify(ctx, err))
	}
	for {
		raw, err := readTCPMessage(conn)
		if err != nil {
			return nil, fmt.Errorf("reading from %s over tcp: %w", p.addr, classify(ctx, err))
		}
		var m dnswire.Msg
		if !match.accepts(raw) || m.Parse(raw) != nil {
			p.mismatches.Add(1)
			continue
		}
		return raw, nil
	}
}

// maxSelfConnects bounds redials when the kernel hands out the server's own
// port as our source port.
const maxSelfConnects = 3

// dial connects to the server. When the server is on this host and its port
// lies in the ephemeral range, the kernel can pick that very port as the
// source, and a socket would talk to itself (TCP's simultaneous open makes
// that possible too). Such a socket is discarded and the dial repeated; the
// UDP attempts check the same in openUDP.
func (p *Plain) dial(ctx context.Context, network string) (net.Conn, error) {
	for range maxSelfConnects {
		conn, err := p.dialer.DialContext(ctx, network, p.addr)
		if err != nil {
			return nil, err
		}
		if conn.LocalAddr().String() != conn.RemoteAddr().String() {
			return conn, nil
		}
		conn.Close()
	}
	return nil, errSelfConnect
}

// readTCPMessage reads one DNS message from conn, whose length prefix says
// how much to read.
func readTCPMessage(conn net.Conn) ([]byte, error) {
	var prefix [2]byte
	if _, err := io.ReadFull(conn, prefix[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(prefix[:]))
	if _, err := io.ReadFull(conn, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// classify wraps a socket error in the sentinel callers branch on. The
// context is consulted first: when it is done, the socket error is only the
// echo of the deadline or of the cancellation that woke the read.
func classify(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.Canceled) {
			// The caller went away; that says nothing about the server.
			return ctxErr
		}
		return fmt.Errorf("%w: %w", ErrTimeout, ctxErr)
	}
	var netErr net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		// The socket deadline came from ctx, whose own timer may fire a hair
		// later than the kernel's.
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrNetwork, err)
}
