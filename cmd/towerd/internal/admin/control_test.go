package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// The control endpoints over the socket: state changes are POST only, a
// bad argument is 400, a rejected reload 409 with its error.
func TestControlEndpoints(t *testing.T) {
	ta := newTestAdmin(t)
	reloads := 0
	ta.SetReloader(func() (ReloadResult, error) {
		reloads++
		return ReloadResult{Applied: []string{"upstream.timeout"}}, nil
	})
	for _, path := range []string{"/reload", "/cache/load", "/lookup", "/cache/flush"} {
		if code, _ := ta.ctl(t, http.MethodGet, path, nil); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 405", path, code)
		}
	}
	if reloads != 0 || ta.handler.LogQueries() {
		t.Fatalf("a refused request acted: %d reloads, query log %v", reloads, ta.handler.LogQueries())
	}
	if code, body := ta.ctl(t, http.MethodPost, "/reload", nil); code != 200 || reloads != 1 || !strings.Contains(body, `"applied": [`) {
		t.Errorf("POST /reload: %d %s", code, body)
	}
	if code, body := ta.ctl(t, http.MethodPost, "/log-queries", url.Values{"state": {"on"}}); code != 200 || !ta.handler.LogQueries() ||
		!strings.Contains(body, `"log_queries": true`) || !strings.Contains(body, `"was": false`) {
		t.Errorf("POST /log-queries on: %d %s", code, body)
	}
	if code, _ := ta.ctl(t, http.MethodPost, "/log-queries", url.Values{"state": {"yes"}}); code != http.StatusBadRequest {
		t.Errorf("POST /log-queries state=yes: %d, want 400", code)
	}
	if code, body := ta.ctl(t, http.MethodGet, "/stats", nil); code != 200 || !strings.Contains(body, `"version": "test"`) {
		t.Errorf("GET /stats over the socket: %d %.200s", code, body)
	}
	ta.SetReloader(func() (ReloadResult, error) { return ReloadResult{}, errors.New("broken file") })
	if code, body := ta.ctl(t, http.MethodPost, "/reload", nil); code != http.StatusConflict || !strings.Contains(body, "broken file") {
		t.Errorf("POST /reload of a broken file: %d %s, want 409 naming the error", code, body)
	}
}

// /cache/list filters by zone and by state; /cache/flush takes a zone.
func TestCacheListAndZoneFlush(t *testing.T) {
	ta := newTestAdmin(t)
	setAnswer(t, ta.cache, "a.corp.example.", dns.TypeA, "a.corp.example. 60 IN A 192.0.2.1")
	setAnswer(t, ta.cache, "www.example.", dns.TypeA, "www.example. 300 IN A 192.0.2.2")
	ta.clock.Advance(120e9) // a.corp.example. is now stale
	for _, tc := range []struct {
		query string
		want  []string
		not   string
	}{
		{"", []string{`"name": "a.corp.example."`, `"name": "www.example."`}, ""},
		{"?zone=corp.example", []string{`"name": "a.corp.example."`, `"zone": "corp.example."`}, "www.example."},
		{"?stale=1", []string{`"name": "a.corp.example."`, `"state": "stale"`}, "www.example."},
	} {
		code, body := ta.ctl(t, http.MethodGet, "/cache/list"+tc.query, nil)
		for _, w := range tc.want {
			if code != 200 || !strings.Contains(body, w) {
				t.Errorf("/cache/list%s: %d, want %s in\n%s", tc.query, code, w, body)
			}
		}
		if tc.not != "" && strings.Contains(body, tc.not) {
			t.Errorf("/cache/list%s lists %s", tc.query, tc.not)
		}
	}
	if code, body := ta.ctl(t, http.MethodPost, "/cache/flush", url.Values{"zone": {"example."}, "name": {"x.example."}}); code != http.StatusBadRequest {
		t.Errorf("flush with name and zone: %d %s, want 400", code, body)
	}
	if code, body := ta.ctl(t, http.MethodPost, "/cache/flush", url.Values{"zone": {"corp.example."}}); code != 200 || !strings.Contains(body, `"removed": 1`) || ta.cache.Len() != 1 {
		t.Errorf("flush zone: %d %s, %d left", code, body, ta.cache.Len())
	}
}
