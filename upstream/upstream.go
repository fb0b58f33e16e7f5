// Package upstream sends DNS queries to the servers towerd forwards to.
//
// One small interface, Upstream, sits in front of every transport (a
// Group is not one: its one resolution is StartWire). Plain is
// classic DNS over UDP with a TCP retry when the reply is truncated; Group
// puts several of them behind one zone with per-server RTT-derived
// retransmission, attempts that wait for each other, health tracking, and
// the scrubber (scrubwire.go), which drops what a server says about names
// it was not asked about. A Group's one resolution is StartWire
// (wirecall.go), on bytes; Wait waits for it.
// NormalizeAddress turns a configured server into host:port.
package upstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// Upstream is anything a query can be forwarded to. The shape follows AdGuard
// dnsproxy's upstream.Upstream, with the context they left as a TODO.
//
// Exchange must not modify m. A SERVFAIL or REFUSED reply is returned together
// with a *RcodeError so that every caller treats failure rcodes the same way
// whichever transport or group produced them.
type Upstream interface {
	// Exchange sends m and returns the reply, which carries m's ID. The
	// context's deadline bounds the whole exchange, retries included.
	Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error)
	// Address names the upstream for logs and metrics.
	Address() string
	// Close releases background work and sockets; it is safe to call twice.
	Close() error
}

var (
	_ Upstream = (*Plain)(nil)
	_ Upstream = (*tlsTransport)(nil)
)

// Sentinel errors that callers branch on (serve stale, count a metric).
var (
	// ErrTimeout means the attempt's or the caller's deadline passed before
	// an acceptable reply arrived.
	ErrTimeout = errors.New("upstream timeout")
	// ErrYielded: the resolution was ended early by its caller
	// (WireCall.Yield) to give its slot to another; no verdict on the
	// question.
	ErrYielded = errors.New("resolution yielded its slot")
	// ErrNetwork means a dial, write or read failed, e.g. an ICMP port
	// unreachable surfacing as "connection refused".
	ErrNetwork = errors.New("upstream network error")
	// ErrNoServers means a group was configured without any server.
	ErrNoServers = errors.New("no upstream servers")
)

// RcodeError is returned, together with the reply, when the final answer was
// SERVFAIL or REFUSED: the reply is real and may be relayed, but the query was
// not answered, so serve-stale and health tracking treat it as a failure.
type RcodeError struct {
	// Server is the host:port that sent the reply.
	Server string
	// Rcode is dns.RcodeServerFailure or dns.RcodeRefused.
	Rcode int
}

// Error implements error.
func (e *RcodeError) Error() string {
	return fmt.Sprintf("upstream %s answered %s", e.Server, dnswire.RcodeName(e.Rcode))
}

// isFailureRcode reports the rcodes that mean "this server could not answer"
// rather than "the answer is no" (NXDOMAIN is an answer; RFC 8767 section 4
// serves stale on SERVFAIL and REFUSED, never on NXDOMAIN).
func isFailureRcode(rcode int) bool {
	return rcode == dns.RcodeServerFailure || rcode == dns.RcodeRefused
}

// Error kinds returned by ErrorKind; they become metric label values, so the
// set is closed and small.
const (
	KindTimeout  = "timeout"
	KindNetwork  = "network"
	KindServFail = "servfail"
	KindRefused  = "refused"
	// KindChain is a reply whose CNAME/DNAME chain is broken
	// (ErrBrokenChain): the server answered, the answer is unusable.
	KindChain = "chain"
	KindOther = "other"
	// KindSuperseded is an attempt still unanswered when another attempt's
	// reply ended its resolution: not a failure, and not an ErrorKind.
	KindSuperseded = "superseded"
)

// ErrorKind classifies err for metrics as "timeout", "network", "servfail",
// "refused" or "other". It returns "" for a nil error so a success can be
// observed through the same call.
func ErrorKind(err error) string {
	if err == nil {
		return ""
	}
	var rcodeErr *RcodeError
	switch {
	case errors.As(err, &rcodeErr):
		switch rcodeErr.Rcode {
		case dns.RcodeServerFailure:
			return KindServFail
		case dns.RcodeRefused:
			return KindRefused
		}
		return KindOther
	case errors.Is(err, ErrBrokenChain):
		return KindChain
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, ErrNetwork):
		return KindNetwork
	}
	return KindOther
}
