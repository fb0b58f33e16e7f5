package upstream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/clock"
)

// ErrNotTLS: CheckTLS was given a plain server.
var ErrNotTLS = errors.New("not a dns over tls server")

// CheckTLS connects to server, a tls://ADDRESS[:PORT]#NAME, exactly as a
// group would (the name verified against roots, nil: the system's), asks
// it ". NS" over the connection and closes it: `towerd doctor`'s check
// that a TLS server answers and its name verifies. It returns nil when a
// reply came, whatever its rcode; else the reason (TLSFailureReasons, ""
// when the handshake succeeded and no reply came) and the error.
func CheckTLS(ctx context.Context, server string, roots *x509.CertPool) (reason string, err error) {
	spec, err := ParseServer(server)
	if err != nil {
		return "", err
	}
	if spec.TLSName == "" {
		return "", fmt.Errorf("%s: %w", server, ErrNotTLS)
	}
	t := newTLSTransport(spec, roots, clock.Real{})
	var mu sync.Mutex
	t.onFailure = func(_, r string, _ error) {
		mu.Lock()
		reason = r
		mu.Unlock()
	}
	t.heard = func() {}
	t.mismatches = new(atomic.Uint64)
	defer t.Close()
	m := new(dns.Msg)
	m.SetQuestion(".", dns.TypeNS)
	reply, err := t.Exchange(ctx, m)
	if reply != nil {
		return "", nil
	}
	mu.Lock()
	defer mu.Unlock()
	return reason, err
}
