package admin

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A refused control connection is counted every time and logged at most
// once per refusalLogInterval, the next line saying how many went unlogged
// (issue 21's report: refusals were answered, neither logged nor counted).
// A connection whose peer the kernel cannot name (here a pipe) is refused
// as one that names an outsider is; test/e2e_control_test.go has nobody's,
// with the uid, gid and pid in the line.
func TestRefusedControlConnections(t *testing.T) {
	ta := newTestAdmin(t)
	var logged bytes.Buffer
	ta.log = slog.New(slog.NewTextHandler(&logged, nil))
	hook := ta.connVerdict(AccessPolicy{UID: 998})
	refuse := func() {
		t.Helper()
		client, server := net.Pipe()
		defer client.Close()
		defer server.Close()
		if v, _ := hook(context.Background(), server).Value(verdictKey{}).(verdict); v.allowed {
			t.Fatal("a pipe's peer was allowed")
		}
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(logged.String()), "\n") }

	refuse()
	refuse()
	refuse()
	if n := testutil.ToFloat64(ta.tel.controlRefused); n != 3 {
		t.Errorf("towerd_control_refused_total %v after 3 refusals", n)
	}
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], `msg="control socket connection refused"`) ||
		!strings.Contains(l[0], "cannot tell who is connecting") || !strings.Contains(l[0], "refused_unlogged_since_last_line=0") ||
		strings.Contains(l[0], "peer_uid") {
		t.Fatalf("after 3 refusals within the interval:\n%s", logged.String())
	}
	ta.clock.Advance(refusalLogInterval - time.Millisecond)
	refuse()
	if l := lines(); len(l) != 1 {
		t.Fatalf("a second line within the interval:\n%s", logged.String())
	}
	ta.clock.Advance(time.Millisecond)
	refuse()
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "refused_unlogged_since_last_line=3") {
		t.Fatalf("after the interval, want a line counting the 3 left out:\n%s", logged.String())
	}
	if n := testutil.ToFloat64(ta.tel.controlRefused); n != 5 {
		t.Errorf("towerd_control_refused_total %v after 5 refusals", n)
	}
}
