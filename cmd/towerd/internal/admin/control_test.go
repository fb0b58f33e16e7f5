package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// Every endpoint that changes state is POST only and refused cross-site,
// like /cache/flush: a page in a browser can neither reload towerd, nor
// switch its query log, nor load a cache, nor make it send queries.
func TestControlWritesArePostAndSameOrigin(t *testing.T) {
	ta := newTestAdmin(t)
	reloads := 0
	ta.SetReloader(func() (ReloadResult, error) {
		reloads++
		return ReloadResult{Applied: []string{"upstream.timeout"}}, nil
	})
	crossSite := http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/reload", nil},
		{"/log-queries", url.Values{"state": {"on"}}},
		{"/cache/load", nil},
		{"/lookup", url.Values{"name": {"www.example."}}},
	} {
		if code, _ := ta.post(t, tc.path, tc.form, crossSite); code != http.StatusForbidden {
			t.Errorf("cross-site POST %s: %d, want 403", tc.path, code)
		}
		if tc.path != "/log-queries" {
			if code, _ := ta.get(t, tc.path); code != http.StatusMethodNotAllowed {
				t.Errorf("GET %s: %d, want 405", tc.path, code)
			}
		}
	}
	if reloads != 0 || ta.handler.LogQueries() {
		t.Fatalf("a refused request acted: %d reloads, query log %v", reloads, ta.handler.LogQueries())
	}
	if code, body := ta.post(t, "/reload", nil, nil); code != 200 || reloads != 1 || !strings.Contains(body, `"applied": [`) {
		t.Errorf("POST /reload: %d %s", code, body)
	}
	if code, body := ta.post(t, "/log-queries", url.Values{"state": {"on"}}, nil); code != 200 || !ta.handler.LogQueries() ||
		!strings.Contains(body, `"log_queries": true`) || !strings.Contains(body, `"was": false`) {
		t.Errorf("POST /log-queries on: %d %s", code, body)
	}
	if code, _ := ta.post(t, "/log-queries", url.Values{"state": {"yes"}}, nil); code != http.StatusBadRequest {
		t.Errorf("POST /log-queries state=yes: %d, want 400", code)
	}
	ta.SetReloader(func() (ReloadResult, error) { return ReloadResult{}, errors.New("broken file") })
	if code, body := ta.post(t, "/reload", nil, nil); code != http.StatusConflict || !strings.Contains(body, "broken file") {
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
		code, body := ta.get(t, "/cache/list"+tc.query)
		for _, w := range tc.want {
			if code != 200 || !strings.Contains(body, w) {
				t.Errorf("/cache/list%s: %d, want %s in\n%s", tc.query, code, w, body)
			}
		}
		if tc.not != "" && strings.Contains(body, tc.not) {
			t.Errorf("/cache/list%s lists %s", tc.query, tc.not)
		}
	}
	if code, body := ta.post(t, "/cache/flush", url.Values{"zone": {"example."}, "name": {"x.example."}}, nil); code != http.StatusBadRequest {
		t.Errorf("flush with name and zone: %d %s, want 400", code, body)
	}
	if code, body := ta.post(t, "/cache/flush", url.Values{"zone": {"corp.example."}}, nil); code != 200 || !strings.Contains(body, `"removed": 1`) || ta.cache.Len() != 1 {
		t.Errorf("flush zone: %d %s, %d left", code, body, ta.cache.Len())
	}
}
