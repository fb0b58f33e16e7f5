package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/clock"
)

// DNS over TLS to one server (RFC 7858, issue 37): one connection at a
// time, opened on the first query and kept, every query of every
// resolution (misses, refreshes, prefetches, a second attempt, the
// health probes) pipelined on it with an ID of its own and matched by ID
// and question as answers come, in any order (RFC 7766 section 6.2.1.1).
// The certificate must verify against the zone's roots and carry the
// configured name (RFC 8310's strict profile): a connection that fails
// that, or does not speak TLS at all, carries no query, and none is ever
// sent in clear instead; the attempt fails like a packet to a dead
// server, and the silence rule marks the server down (silence.go).
//
// The bounds of what a server can make towerd hold (docs/security.md):
const (
	// tlsMaxInFlight bounds the queries waiting on one connection, and
	// so the frames queued for writing (each at most a padded query);
	// beyond it an attempt fails at once (unbound's max-reuse-tcp-queries
	// is 200).
	tlsMaxInFlight = 256
	// tlsHandshakeTimeout bounds connecting and the TLS handshake: a
	// server that accepts and never finishes it holds the queries queued
	// meanwhile no longer than this.
	tlsHandshakeTimeout = 3 * time.Second
	// tlsReadTimeout: with queries in flight, a connection on which no
	// reply arrives for this long is closed (each reply restarts it); a
	// reply's frame must arrive within it too.
	tlsReadTimeout = 5 * time.Second
	// tlsIdleTimeout closes a connection without queries in flight,
	// sooner when the server's edns-tcp-keepalive says so (RFC 7828).
	tlsIdleTimeout = 10 * time.Second
	// tlsMaxBogusFrames is how many replies that match no query in
	// flight a connection may bring before it is closed: a server that
	// streams without end is cut off, not read forever.
	tlsMaxBogusFrames = 16
	// tlsMinBackoff and tlsMaxBackoff bound the wait before dialling
	// again after a failed connection, doubling per failure; until then
	// an attempt fails at once, with the reason of the last failure.
	tlsMinBackoff = 100 * time.Millisecond
	tlsMaxBackoff = 5 * time.Second
)

// TLS failure reasons: the label values of the failures counter, and what
// OnTLSFailure is told.
const (
	TLSFailCertificate = "certificate"       // does not verify against the roots
	TLSFailName        = "name"              // verifies, but not for the configured name
	TLSFailNotTLS      = "not_tls"           // the server does not speak TLS (plain DNS on 853)
	TLSFailTimeout     = "handshake_timeout" // connect or handshake not done in time
	TLSFailNetwork     = "network"           // refused, reset, closed during the handshake
)

// TLSFailureReasons lists every reason, for metrics.
var TLSFailureReasons = []string{TLSFailCertificate, TLSFailName, TLSFailNotTLS, TLSFailTimeout, TLSFailNetwork}

// errTLSBusy: the connection has tlsMaxInFlight queries waiting.
var errTLSBusy = errors.New("too many queries in flight on the tls connection")

// tlsTransport is one DNS over TLS server of a group.
type tlsTransport struct {
	spec    ServerSpec
	display string // spec.String()
	config  *tls.Config
	dialer  net.Dialer
	// clock decides the backoff and when a cancelled query's ID is free
	// again (the group's); socket deadlines are the kernel's, the wall
	// clock's.
	clock clock.Clock
	// onFailure is told a failed connection's reason when it differs
	// from the last one told (a log line per change, not per dial).
	onFailure func(server, reason string, err error)
	// heard is told of every reply frame (the server's silence.go).
	heard func()
	// mismatches counts replies whose ID is in flight but whose question
	// is not the query's (Plain.Mismatches' count for this server).
	mismatches *atomic.Uint64

	mu         sync.Mutex
	conn       *tlsConn // the current one; nil before the first query and after it closed
	retryAt    time.Time
	backoff    time.Duration
	lastErr    error
	lastReason string // told onFailure; "" after a connection succeeded
	closed     bool

	handshakes  atomic.Uint64 // connections whose handshake completed
	resumptions atomic.Uint64 // of which resumed a session (no full handshake)
	queries     atomic.Uint64 // queries written
	reused      atomic.Uint64 // queries that found the connection open
	resent      atomic.Uint64 // queries sent again after their connection closed
	failures    [5]atomic.Uint64
}

// newTLSTransport makes the transport of spec, verified against roots
// (nil: the system's).
func newTLSTransport(spec ServerSpec, roots *x509.CertPool, clk clock.Clock) *tlsTransport {
	return &tlsTransport{
		clock:   clk,
		spec:    spec,
		display: spec.String(),
		config: &tls.Config{
			ServerName: spec.TLSName,
			RootCAs:    roots,
			MinVersion: tls.VersionTLS12,
			// Session tickets, so a reconnect skips the full handshake
			// (TLS 1.3 resumption); a few, for a server behind a pool.
			ClientSessionCache: tls.NewLRUClientSessionCache(4),
		},
	}
}

// Address is the server as configured: tls://ADDRESS:PORT#NAME.
func (t *tlsTransport) Address() string { return t.display }

// send queues query (one question, ending at qend; not kept) on the
// connection, opening one if none is open, for owner; a is what owner
// is told the reply of. It never blocks: an error is the attempt's
// failure now (the last connection failed and its backoff runs, the
// connection is full, the transport closed).
func (t *tlsTransport) send(query []byte, qend int, owner tlsOwner, a *attempt) (*tlsQuery, error) {
	q := newTLSQuery(t, query, qend, owner, a)
	if err := t.sendQuery(q); err != nil {
		return nil, err
	}
	return q, nil
}

// sendQuery queues q on the connection, opening one if none is open: a
// query's first sending, or a next one after its connection closed.
func (t *tlsTransport) sendQuery(q *tlsQuery) error {
	// Read before q is pending: then its connection's close may send it on.
	resend := q.resends > 0
	for range 2 { // a second time when the connection closed meanwhile
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return fmt.Errorf("tls to %s: %w: transport closed", t.display, ErrNetwork)
		}
		c := t.conn
		reused := c != nil
		if c == nil {
			if now := t.clock.Now(); now.Before(t.retryAt) {
				err, wait := t.lastErr, t.retryAt.Sub(now)
				t.mu.Unlock()
				return fmt.Errorf("tls to %s: %w: %w (next connection in %s)",
					t.display, ErrNetwork, err, wait.Round(time.Millisecond))
			}
			c = t.dialLocked()
		}
		t.mu.Unlock()
		err := c.enqueue(q)
		if errors.Is(err, errConnClosed) {
			t.dropped(c) // it may not have told the transport yet
			continue
		}
		if err == nil {
			t.queries.Add(1)
			if reused {
				t.reused.Add(1)
			}
			if resend {
				t.resent.Add(1)
			}
		}
		return err
	}
	return fmt.Errorf("tls to %s: %w: connection closed", t.display, ErrNetwork)
}

// dialLocked starts a connection: its handshake runs on a goroutine,
// and queries queue on it meanwhile.
func (t *tlsTransport) dialLocked() *tlsConn {
	c := newTLSConn(t)
	t.conn = c
	go c.run()
	return c
}

// connected is a handshake's success: the backoff ends, the failure
// reason is forgotten (the next failure is told again).
func (t *tlsTransport) connected(cs tls.ConnectionState) {
	t.handshakes.Add(1)
	if cs.DidResume {
		t.resumptions.Add(1)
	}
	t.mu.Lock()
	t.backoff, t.lastReason, t.lastErr = 0, "", nil
	t.mu.Unlock()
}

// failed is a connection that could not be made: counted by reason,
// told once per change of reason, and the next dial backs off.
func (t *tlsTransport) failed(err error) {
	reason := tlsFailureReason(err)
	for i, r := range TLSFailureReasons {
		if r == reason {
			t.failures[i].Add(1)
		}
	}
	t.mu.Lock()
	t.backoff = min(max(2*t.backoff, tlsMinBackoff), tlsMaxBackoff)
	t.retryAt = t.clock.Now().Add(t.backoff)
	t.lastErr = err
	tell := reason != t.lastReason
	t.lastReason = reason
	t.mu.Unlock()
	if tell && t.onFailure != nil {
		t.onFailure(t.display, reason, err)
	}
}

// dropped forgets c as the current connection once it closed.
func (t *tlsTransport) dropped(c *tlsConn) {
	t.mu.Lock()
	if t.conn == c {
		t.conn = nil
	}
	t.mu.Unlock()
}

// Close closes the connection; later queries fail.
func (t *tlsTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	c := t.conn
	t.mu.Unlock()
	if c != nil {
		c.close(fmt.Errorf("tls to %s: %w: transport closed", t.display, ErrNetwork))
	}
	return nil
}

// Exchange asks m over the connection and waits for the reply (the
// health probes' way); ctx bounds the wait.
func (t *tlsTransport) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", t.display, err)
	}
	qend, err := questionEnd(packed)
	if err != nil {
		return nil, fmt.Errorf("packing query for %s: %w", t.display, err)
	}
	ch := make(tlsWait, 1)
	q, err := t.send(packed, qend, ch, nil)
	if err != nil {
		return nil, err
	}
	var o tlsOutcome
	select {
	case o = <-ch:
	case <-ctx.Done():
		if q.cancel() {
			return nil, fmt.Errorf("reading from %s: %w", t.display, classify(ctx, ctx.Err()))
		}
		o = <-ch
	}
	if o.err != nil {
		return nil, o.err
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(o.raw); err != nil {
		return nil, fmt.Errorf("reading from %s: %w: %w", t.display, ErrNetwork, err)
	}
	reply.Id = m.Id
	if isFailureRcode(reply.Rcode) {
		return reply, &RcodeError{Server: t.display, Rcode: reply.Rcode}
	}
	return reply, nil
}

// tlsWait is Exchange's owner.
type tlsWait chan tlsOutcome

type tlsOutcome struct {
	raw []byte
	err error
}

func (w tlsWait) tlsReply(_ *tlsQuery, raw []byte, err error) {
	w <- tlsOutcome{bytes.Clone(raw), err} // raw is the reader's
}

// tlsFailureReason sorts a failed connection's error into a reason.
func tlsFailureReason(err error) string {
	var hostErr x509.HostnameError
	var unknownErr x509.UnknownAuthorityError
	var invalidErr x509.CertificateInvalidError
	var verifyErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case errors.As(err, &hostErr):
		return TLSFailName
	case errors.As(err, &unknownErr), errors.As(err, &invalidErr), errors.As(err, &verifyErr):
		return TLSFailCertificate
	case errors.As(err, &recordErr):
		return TLSFailNotTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return TLSFailTimeout
	}
	return TLSFailNetwork
}

// TLSStatus is a TLS server's connection counters, for metrics.
type TLSStatus struct {
	Handshakes  uint64 // connections whose handshake completed
	Resumptions uint64 // of which resumed a TLS session
	Queries     uint64 // queries written, probes included
	Reused      uint64 // of which found the connection already open
	Resent      uint64 // of which were sent again after their connection closed
	// Failures counts connections that failed, by TLSFailureReasons.
	Failures map[string]uint64
}

func (t *tlsTransport) status() *TLSStatus {
	st := &TLSStatus{Handshakes: t.handshakes.Load(), Resumptions: t.resumptions.Load(),
		Queries: t.queries.Load(), Reused: t.reused.Load(), Resent: t.resent.Load(), Failures: map[string]uint64{}}
	for i, r := range TLSFailureReasons {
		st.Failures[r] = t.failures[i].Load()
	}
	return st
}
