package doctor

import (
	"context"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/upstream"
)

// tlsUpstream is what one DNS over TLS server of the config answered to
// doctor's connection (issue 37): the handshake verified against the
// zone's tls_ca_file (or the system's roots) for the configured name, and
// one ". NS" asked over it.
type tlsUpstream struct {
	Zone, Server string
	// Reason is why the connection failed (upstream.TLSFailureReasons),
	// "" when it was made; Err is nil when the server answered.
	Reason string
	Err    error
}

// readTLSUpstreams connects to every tls:// server of cfg's zones, each
// within timeout, at most maxTLSChecks of them: a config may list many,
// and doctor must end.
func readTLSUpstreams(ctx context.Context, cfg config.Config, timeout time.Duration) []tlsUpstream {
	const maxTLSChecks = 16
	var out []tlsUpstream
	for _, z := range cfg.MergedZones() {
		for _, s := range z.Servers {
			if !strings.HasPrefix(strings.TrimSpace(s), "tls://") || len(out) == maxTLSChecks {
				continue
			}
			u := tlsUpstream{Zone: z.Name, Server: s}
			roots, err := z.TLSRoots()
			if err != nil {
				u.Err = err
			} else {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				u.Reason, u.Err = upstream.CheckTLS(cctx, s, roots)
				cancel()
			}
			out = append(out, u)
		}
	}
	return out
}

// checkTLSUpstreams reports the TLS servers that did not answer over a
// verified connection.
func checkTLSUpstreams(n *Node) []Finding {
	var out []Finding
	for _, u := range n.TLSUpstreams {
		if u.Err == nil {
			continue
		}
		why := "no answer over the connection"
		if u.Reason != "" {
			why = "the connection failed (" + u.Reason + ")"
		}
		out = append(out, newFinding("towerd-tls-upstream-fails", Problem, "zone %s, %s: %s: %s", u.Zone, u.Server, why, oneLineErr(u.Err)))
	}
	return out
}

// hasTLSServers reports whether any zone of cfg has a tls:// server.
func hasTLSServers(cfg config.Config) bool {
	for _, z := range cfg.MergedZones() {
		for _, s := range z.Servers {
			if strings.HasPrefix(strings.TrimSpace(s), "tls://") {
				return true
			}
		}
	}
	return false
}
