package consul

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollector: the metric names pass promlint, and an ACL refusal shows
// as towerd_consul_watch_acl_denied 1 until the agent answers again.
func TestCollector(t *testing.T) {
	w, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	w.clock = newFakeClock()
	c := NewCollector(w)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	w.listFailure(classify(errors.New("Unexpected response code: 403 (ACL not found)")), 1)
	want := `
# HELP towerd_consul_watch_acl_denied 1 while the agent refuses the watch's ACL token (the last query failed that way).
# TYPE towerd_consul_watch_acl_denied gauge
towerd_consul_watch_acl_denied 1
# HELP towerd_consul_watch_errors_total Failed Consul watch queries, of every loop.
# TYPE towerd_consul_watch_errors_total counter
towerd_consul_watch_errors_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"towerd_consul_watch_acl_denied", "towerd_consul_watch_errors_total"); err != nil {
		t.Error(err)
	}
	if st := w.State(); !errors.Is(st.LastErr, ErrACL) || st.Connected || st.ConsecutiveErrors != 1 {
		t.Errorf("state after an ACL refusal: %+v", st)
	}

	w.listContact(9)
	want = strings.Replace(want, "towerd_consul_watch_acl_denied 1\n", "towerd_consul_watch_acl_denied 0\n", 1)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"towerd_consul_watch_acl_denied", "towerd_consul_watch_errors_total"); err != nil {
		t.Errorf("after contact: %v", err)
	}
}
