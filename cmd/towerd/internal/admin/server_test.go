package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// testAdmin is an admin server over a real cache (on a fake clock), handler
// and registry, served by httptest.
type testAdmin struct {
	*Server
	url     string // the admin port, served by httptest
	control string // the control socket's path
	clock   *dnstest.Clock
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestAdmin(t *testing.T) *testAdmin {
	t.Helper()
	return newTestAdminWith(t, nil)
}

// newTestAdminWith is newTestAdmin with records answered before the
// cache (the daemon's local data and Consul watch), and a third zone,
// corp., forwarded to its own server.
func newTestAdminWith(t *testing.T, records resolver.RecordSource) *testAdmin {
	t.Helper()
	clock := dnstest.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	c, err := cache.New(cache.Config{Capacity: 100, MaxStaleAge: 24 * time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tel := NewTelemetry(c, clock.Now(), "test")
	// The groups are never asked anything: these tests send no DNS query.
	var groups []*upstream.Group
	var zones []resolver.Zone
	zoneServers := []struct{ name, server string }{{".", "192.0.2.53:53"}, {"consul.", "127.0.0.1:8600"}}
	if records != nil {
		zoneServers = append(zoneServers, struct{ name, server string }{"corp.", "192.0.2.54:53"})
	}
	for _, z := range zoneServers {
		g, err := upstream.NewGroup(z.name, []string{z.server}, upstream.GroupOptions{Observe: tel.Upstreams.Observer(z.name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		groups = append(groups, g)
		zones = append(zones, resolver.Zone{Name: z.name, Upstream: g})
	}
	h, err := resolver.NewHandler(resolver.Config{Zones: zones, Records: records}, c, nil, tel.Resolver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := tel.Resolver.Instrument(h, &resolver.Server{}); err != nil {
		t.Fatal(err)
	}
	tel.Upstreams.SetGroups(groups, 0)
	a := NewServer(discardLogger(), tel, c, h, "test")
	a.now, a.loopbackOnly = clock.Now, true
	a.SetView(&View{Config: config.DefaultConfig(), Groups: groups, LoadedAt: clock.Now(), StaleUntil: 24 * time.Hour})
	srv := httptest.NewServer(a.routes())
	t.Cleanup(srv.Close)
	return &testAdmin{Server: a, url: srv.URL, control: startTestControl(t, a), clock: clock}
}

// startTestControl serves a's control channel on a Unix socket in a
// directory of its own (a short path: sun_path holds 108 bytes), for this
// process's user, who is the daemon's too.
func startTestControl(t *testing.T, a *Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "control.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	a.StartControl(l, AccessPolicy{UID: uint32(os.Geteuid())}, 4)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	return path
}

// ctl sends one request to the control socket and returns its status and
// body.
func (ta *testAdmin) ctl(t *testing.T, method, path string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	target := "http://localhost" + path
	if method == http.MethodGet && form != nil {
		target += "?" + form.Encode()
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ta.control)
	}}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// get returns the status and body of GET path.
func (ta *testAdmin) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(ta.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (ta *testAdmin) post(t *testing.T, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ta.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAdminHealthAndReadiness(t *testing.T) {
	ta := newTestAdmin(t)
	if code, body := ta.get(t, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := ta.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the listeners serve: %d, want 503", code)
	}
	ta.SetReady(true)
	if code, body := ta.get(t, "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz once serving: %d %q, want 200 ready", code, body)
	}
	// Ready while the Consul watch still syncs (issue 32: READY=1 does not
	// wait for it), and /readyz says where the watch is.
	state := "syncing"
	ta.tel.SetWatchStatus(func() *WatchStatus { return &WatchStatus{State: state} })
	if code, body := ta.get(t, "/readyz"); code != 200 || body != "ready\nconsul watch: syncing\n" {
		t.Errorf("/readyz with the watch syncing: %d %q", code, body)
	}
	state = "watching"
	if _, body := ta.get(t, "/readyz"); body != "ready\nconsul watch: watching\n" {
		t.Errorf("/readyz once the watch synced: %q", body)
	}
	code, body := ta.get(t, "/metrics")
	if code != 200 || !strings.Contains(body, `towerd_build_info{goversion="`) || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, "process_start_time_seconds") {
		t.Errorf("/metrics: %d, want build info, Go and process metrics:\n%.2000s", code, body)
	}
	if code, _ := ta.get(t, "/nothing"); code != 404 {
		t.Errorf("/nothing: %d, want 404", code)
	}
}

func setAnswer(t *testing.T, c *cache.Cache, name string, qtype uint16, rr string) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response = true
	if rr != "" {
		r, err := dns.NewRR(rr)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = []dns.RR{r}
	}
	if ok, reason := dnstest.SetMsg(c, cache.NewKey(name, qtype, dns.ClassINET, false, false), m); !ok {
		t.Fatalf("not cached: %s", reason)
	}
}

func TestAdminCacheInspectAndFlush(t *testing.T) {
	ta := newTestAdmin(t)
	setAnswer(t, ta.cache, "www.example.org.", dns.TypeA, "www.example.org. 300 IN A 192.0.2.1")
	setAnswer(t, ta.cache, "www.example.org.", dns.TypeAAAA, "www.example.org. 0 IN AAAA 2001:db8::1")
	setAnswer(t, ta.cache, "web.service.consul.", dns.TypeA, "web.service.consul. 0 IN A 10.0.0.1")
	ta.clock.Advance(100 * time.Second)

	var got struct {
		Name    string       `json:"name"`
		Entries []cacheEntry `json:"entries"`
	}
	code, body := ta.ctl(t, http.MethodGet, "/cache?name=WWW.example.org", nil)
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("/cache: %d %v\n%s", code, err, body)
	}
	if got.Name != "WWW.example.org." || len(got.Entries) != 2 {
		t.Fatalf("name %q, %d entries; want both types of www.example.org.\n%s", got.Name, len(got.Entries), body)
	}
	a, aaaa := got.Entries[0], got.Entries[1]
	if a.Type != "A" || a.State != "fresh" || a.RemainingSeconds != 200 || a.TTLSeconds != 300 ||
		a.Source != "upstream zone ." || a.Origin != "upstream" || len(a.Answer) != 1 || !strings.Contains(a.Answer[0], "200\tIN\tA\t192.0.2.1") {
		t.Errorf("A entry: %+v; want fresh, 200 s of 300 left, from zone .", a)
	}
	if aaaa.Type != "AAAA" || aaaa.State != "stale" || aaaa.ExpiredSeconds != 100 {
		t.Errorf("AAAA entry (TTL 0): %+v; want stale, expired 100 s ago", aaaa)
	}

	// Filtered by type; and an entry past the stale window is "expired".
	ta.clock.Advance(25 * time.Hour)
	code, body = ta.ctl(t, http.MethodGet, "/cache?name=web.service.consul&type=a", nil)
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || len(got.Entries) != 1 {
		t.Fatalf("/cache?type=a: %d %v\n%s", code, err, body)
	}
	if e := got.Entries[0]; e.State != "expired" || e.Source != "upstream zone consul." {
		t.Errorf("consul entry: %+v; want expired, from zone consul.", e)
	}
	for _, bad := range []string{"/cache", "/cache?name=a..b", "/cache?name=x.example&type=NOPE"} {
		if code, _ := ta.ctl(t, http.MethodGet, bad, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}

	// Flush one name (every type of it), then everything.
	if code, body := ta.ctl(t, http.MethodPost, "/cache/flush", url.Values{"name": {"www.example.org"}}); code != 200 || !strings.Contains(body, `"removed": 2`) {
		t.Errorf("flush one name: %d %s; want 2 removed", code, body)
	}
	if n := ta.cache.Len(); n != 1 {
		t.Errorf("%d entries left, want 1", n)
	}
	if code, body := ta.ctl(t, http.MethodPost, "/cache/flush", url.Values{}); code != 200 || !strings.Contains(body, `"removed": 1`) {
		t.Errorf("flush all: %d %s; want 1 removed", code, body)
	}
	if code, _ := ta.ctl(t, http.MethodGet, "/cache/flush", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /cache/flush: %d, want 405", code)
	}
}

// The admin port serves only what anyone may read: every control endpoint
// answers 403 there, naming the control socket, and changes nothing
// (issue 21: as nobody, POST /cache/flush, /cache/load, /log-queries and
// /reload all worked through it).
func TestAdminPortRefusesControl(t *testing.T) {
	ta := newTestAdmin(t)
	reloads := 0
	ta.SetReloader(func() (ReloadResult, error) { reloads++; return ReloadResult{}, nil })
	setAnswer(t, ta.cache, "keep.example.", dns.TypeA, "keep.example. 300 IN A 192.0.2.9")
	for _, path := range controlPaths {
		for _, do := range []func() (int, string){
			func() (int, string) { return ta.get(t, path+"?name=keep.example") },
			func() (int, string) {
				return ta.post(t, path, url.Values{"state": {"on"}, "name": {"keep.example"}}, nil)
			},
		} {
			if code, body := do(); code != http.StatusForbidden || !strings.Contains(body, "control socket") {
				t.Errorf("%s on the admin port: %d %q, want 403 naming the control socket", path, code, body)
			}
		}
	}
	if ta.cache.Len() != 1 || reloads != 0 || ta.handler.LogQueries() {
		t.Errorf("a refused request acted: %d entries, %d reloads, query log %v", ta.cache.Len(), reloads, ta.handler.LogQueries())
	}
}

// On loopback, a request naming another host (a page that rebound its name
// to 127.0.0.1) is refused; loopback addresses and localhost are served.
func TestAdminRefusesForeignHosts(t *testing.T) {
	ta := newTestAdmin(t)
	for host, want := range map[string]int{
		"evil.example":      http.StatusForbidden,
		"evil.example:9253": http.StatusForbidden,
		"localhost:9253":    http.StatusOK,
		"127.0.0.1:9253":    http.StatusOK,
		"[::1]:9253":        http.StatusOK,
		"127.0.0.1":         http.StatusOK,
		"192.0.2.1:9253":    http.StatusForbidden,
	} {
		req, err := http.NewRequest(http.MethodGet, ta.url+"/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}
