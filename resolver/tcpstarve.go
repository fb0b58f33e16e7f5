package resolver

import "time"

// TCP slots shared with clients that get answers (issue 35). A connection
// that always owes one answer — it asks a name nobody answers, gets the
// SERVFAIL at query_timeout, and asks the next at once — is never waiting
// (tcpbudget.go), so it never gave up its slot: 256 of them held the cap,
// and 1 of 90 new TCP clients was answered. Now, at the cap with no
// connection waiting, the connection that has gone longest without a
// useful answer (anything but SERVFAIL; a stale answer is useful) is
// closed for the newcomer, provided it has gone at least query_timeout
// without one: its owed answer was due by then (the wire waiter answers
// SERVFAIL at query_timeout), so only a connection whose questions are
// all failing can go, the one failing longest first. A connection whose
// answers come keeps its slot however busy it is.
//
// The pipe counts useful answers lock-free (tcpConn.useful); the budget
// turns a change of that count into a time only when it looks, at the cap,
// so the answer path pays one atomic add.

// closeUnansweredLocked closes, for a newcomer, the connection that has
// gone longest without a useful answer, if that is at least the useful
// window; it reports whether one was closed. Called with b.mu held.
func (b *tcpBudget) closeUnansweredLocked(now time.Time) bool {
	window := DefaultQueryTimeout
	if b.usefulWindow != nil {
		window = b.usefulWindow()
	}
	var victim *tcpConn
	for tc := range b.conns {
		if tc.closeAs >= 0 || !tc.counted {
			continue
		}
		if n := tc.useful.Load(); n != tc.usefulSeen {
			tc.usefulSeen, tc.usefulAt = n, now
		}
		if now.Sub(tc.usefulAt) < window {
			continue
		}
		if victim == nil || tc.usefulAt.Before(victim.usefulAt) {
			victim = tc
		}
	}
	if victim == nil {
		return false
	}
	b.closeLocked(victim, tcpClosedUnanswered)
	return true
}

// queryTimeouter is a handler that says how long its clients wait for an
// answer (query_timeout): the TCP budget's useful window.
type queryTimeouter interface {
	QueryTimeout() time.Duration
}

var _ queryTimeouter = (*Handler)(nil)

// QueryTimeout is the running configuration's query_timeout.
func (h *Handler) QueryTimeout() time.Duration { return h.settings.Load().QueryTimeout }
