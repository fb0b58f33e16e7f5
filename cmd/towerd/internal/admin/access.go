package admin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
)

// Who may use the control channel (issue 21): root, towerd's own user, and
// the members of the operators' group. The socket file's mode (0660, that
// group) already keeps everyone else from connecting; the kernel's record of
// the peer is checked as well, so a socket whose mode was loosened by hand,
// or one systemd created with other settings, still refuses them (dnsmasq
// takes signals only from root or its user; unbound-control's socket is
// guarded by its file mode alone).

// peer is who is at the other end of a control connection, as the kernel
// recorded it at connect time (peercred_linux.go).
type peer struct {
	uid, gid uint32
	pid      int32
	// groups are the supplementary groups; groupsKnown is false when the
	// kernel could not say (before Linux 4.13), and then only the primary
	// group counts.
	groups      []uint32
	groupsKnown bool
}

// AccessPolicy says who may use the control channel besides root.
type AccessPolicy struct {
	// UID is towerd's own effective user.
	UID uint32
	// Group names the operators' group, for messages; GID is its id, and
	// HaveGroup is false when there is none (only root and UID then).
	Group     string
	GID       uint32
	HaveGroup bool
}

// allows says whether p may use the channel, and if not, why.
func (ap AccessPolicy) allows(p peer) (bool, string) {
	switch {
	case p.uid == 0, p.uid == ap.UID:
		return true, ""
	case ap.HaveGroup && (p.gid == ap.GID || slices.Contains(p.groups, ap.GID)):
		return true, ""
	}
	who := "root or towerd's own user (uid " + strconv.FormatUint(uint64(ap.UID), 10) + ")"
	if ap.HaveGroup {
		who = "root, towerd's own user or a member of group " + ap.Group
	}
	why := fmt.Sprintf("uid %d (pid %d) may not use towerd's control socket: only %s may", p.uid, p.pid, who)
	if ap.HaveGroup && !p.groupsKnown {
		why += " (this kernel does not report supplementary groups, so only a primary group counts)"
	}
	return false, why
}

// verdictKey carries a control connection's verdict in its context.
type verdictKey struct{}

// verdict is the access decision for one connection, made once when it
// was accepted.
type verdict struct {
	allowed bool
	why     string
	peer    peer
	known   bool // the kernel told who the peer is
}

// connVerdict is the control server's ConnContext: it reads the peer's
// credentials once per connection.
func (ap AccessPolicy) connVerdict(ctx context.Context, c net.Conn) context.Context {
	p, err := peerOf(c)
	v := verdict{peer: p, known: err == nil}
	if err != nil {
		v.why = "cannot tell who is connecting, so refusing: " + err.Error()
	} else {
		v.allowed, v.why = ap.allows(p)
	}
	return context.WithValue(ctx, verdictKey{}, v)
}

// requireAllowed answers 403 to every request of a connection the policy
// refused, before any handler runs.
func requireAllowed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := r.Context().Value(verdictKey{}).(verdict)
		if !ok || !v.allowed {
			why := v.why
			if !ok {
				why = "no peer credentials for this connection"
			}
			http.Error(w, "towerd control: "+why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// peerUID is the uid of the peer that sent r, for logs: who changed what.
func peerUID(r *http.Request) int64 {
	if v, ok := r.Context().Value(verdictKey{}).(verdict); ok {
		return int64(v.peer.uid)
	}
	return -1
}
