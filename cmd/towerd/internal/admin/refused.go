package admin

import (
	"context"
	"net"
	"sync"
	"time"
)

// Refused control connections are answered (403, naming the caller and who
// may) and, from issue 21's report on, counted and logged: an operator who
// forgot sudo, or a user probing the socket, shows in the metrics and the
// log. The log line is rate-limited: a user may connect as fast as the
// kernel lets them, and the log must not become their megaphone.

// refusalLogInterval is the least time between two log lines about refused
// control connections; the refusals in between are counted in the next
// line.
const refusalLogInterval = 10 * time.Second

// refusalLog decides which refusals are logged: the first at once, then at
// most one per refusalLogInterval, each saying how many were left out
// before it.
type refusalLog struct {
	mu     sync.Mutex
	last   time.Time // of the last line; zero before the first
	unsaid int       // refusals since the last line, not logged
}

// note counts one refusal at now and reports whether to log it, with the
// number of refusals left unlogged since the last line.
func (l *refusalLog) note(now time.Time) (logIt bool, unsaid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < refusalLogInterval {
		l.unsaid++
		return false, 0
	}
	unsaid, l.last, l.unsaid = l.unsaid, now, 0
	return true, unsaid
}

// connVerdict is the control server's ConnContext: the peer check's
// verdict on a new connection (AccessPolicy.connVerdict), and for a
// refused one the count in towerd_control_refused_total and a log line
// that names the caller, within refusalLog's rate. It runs on the accept
// loop, once per connection, before any request is read.
func (a *Server) connVerdict(policy AccessPolicy) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		ctx = policy.connVerdict(ctx, c)
		v, _ := ctx.Value(verdictKey{}).(verdict)
		if v.allowed {
			return ctx
		}
		a.tel.controlRefused.Inc()
		logIt, unsaid := a.refusals.note(a.now())
		if !logIt {
			return ctx
		}
		attrs := []any{"why", v.why, "refused_unlogged_since_last_line", unsaid}
		if v.known {
			attrs = append(attrs, "peer_uid", v.peer.uid, "peer_gid", v.peer.gid, "peer_pid", v.peer.pid)
		}
		a.log.Warn("control socket connection refused", attrs...)
		return ctx
	}
}
