package doctor

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An agent (or whoever took its port) that fails with a 500 is reported as
// failing, not as refusing the token; a 403 stays an ACL refusal; and the
// agent's text reaches the terminal with its control characters escaped
// (issue 35: escape sequences, CR and BS were printed raw).
func TestHostileAgentTextAndStatuses(t *testing.T) {
	t.Parallel()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent/self":
			http.Error(w, "No cluster leader\x1b[2J\x1b[H\rall checks passing\b\b\x1b]0;owned\x07", http.StatusInternalServerError)
		case "/v1/agent/services":
			http.Error(w, "ACL not found", http.StatusForbidden)
		case "/v1/agent/checks":
			http.Error(w, "rpc error\u202egnp", http.StatusBadGateway)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(agent.Close)

	r := diagnose(t, cleanNode(t).write(t), Options{ConsulAddr: strings.TrimPrefix(agent.URL, "http://")})
	expectItems(t, finding(t, r, "consul-acl-denied"), "/v1/agent/services")
	failed := finding(t, r, "consul-agent-error")
	expectItems(t, failed, "/v1/agent/self", "/v1/agent/checks")
	if d := failed.Items[0].Detail; !strings.Contains(d, "HTTP 500 Internal Server Error") {
		t.Errorf("the 500 is reported as %q", d)
	}

	var out bytes.Buffer
	r.writeText(&out)
	text := out.String()
	for _, raw := range []string{"\x1b", "\r", "\b", "\x07", "\u202e"} {
		if strings.Contains(text, raw) {
			t.Errorf("doctor's report holds %q raw:\n%s", raw, text)
		}
	}
	for _, want := range []string{`No cluster leader\x1b[2J\x1b[H\rall`, `passing\b\b\x1b]0;owned\a`, `rpc error\u202egnp`} {
		if !strings.Contains(text, want) {
			t.Errorf("doctor's report lacks %q:\n%s", want, text)
		}
	}
}
