package consul

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// reply is one scripted answer of the fake Consul HTTP API.
type reply struct {
	status int    // 0 = 200
	index  uint64 // X-Consul-Index
	body   any    // JSON-encoded when status is 200
}

// request is what the fake API saw of one query.
type request struct {
	path   string
	index  uint64 // the ?index= parameter; 0 when absent
	cached bool   // ?cached: served by the agent's cache or streaming
	stale  bool   // ?stale: any server may answer the agent
	token  string
	outage bool // answered by the scripted outage
}

// fakeAPI is an httptest server that plays a Consul agent's HTTP API from
// per-path scripts. When a path's script runs out, its queries block until
// the script grows or the client gives up, like a blocking query.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	scripts  map[string][]reply
	requests []request
	seen     chan struct{} // closed and replaced on every request
	scripted chan struct{} // closed and replaced whenever a script grows
	self     reply         // the /v1/agent/self reply
	// outage fails the next outageLeft requests, of any path, with this
	// status: an agent that is down or not ready.
	outage     int
	outageLeft int
	outages    int // outages started: a blocked query sees a new one and fails
	blocked    map[string]int
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{
		scripts:  map[string][]reply{},
		blocked:  map[string]int{},
		seen:     make(chan struct{}),
		scripted: make(chan struct{}),
		self: reply{body: map[string]any{
			"Config":      map[string]any{"Datacenter": "dc1"},
			"DebugConfig": map[string]any{"DNSDomain": "consul.", "DNSOnlyPassing": false, "DNSNodeMetaTXT": true},
		}},
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.CloseClientConnections()
		f.Close()
	})
	return f
}

// script appends replies for path (e.g. "/v1/catalog/services").
func (f *fakeAPI) script(path string, replies ...reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[path] = append(f.scripts[path], replies...)
	close(f.scripted) // blocked queries take the new replies
	f.scripted = make(chan struct{})
}

func (f *fakeAPI) setSelf(r reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.self = r
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	index, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	f.mu.Lock()
	f.requests = append(f.requests, request{path: r.URL.Path, index: index, cached: q.Has("cached"),
		stale: q.Has("stale"), token: r.Header.Get("X-Consul-Token")})
	close(f.seen)
	f.seen = make(chan struct{})
	if f.outageLeft > 0 {
		f.outageLeft--
		f.requests[len(f.requests)-1].outage = true
		f.mu.Unlock()
		http.Error(w, "scripted outage", f.outage)
		return
	}
	outages := f.outages
	f.mu.Unlock()
	var rep reply
	for {
		if r.Context().Err() != nil {
			return // the client gave up: it takes no reply
		}
		f.mu.Lock()
		if f.outages != outages {
			// The agent went away under this blocked query: it fails.
			f.mu.Unlock()
			http.Error(w, "scripted outage", http.StatusServiceUnavailable)
			return
		}
		var ok bool
		if r.URL.Path == "/v1/agent/self" {
			rep, ok = f.self, true
		} else if s := f.scripts[r.URL.Path]; len(s) > 0 {
			rep, ok = s[0], true
			f.scripts[r.URL.Path] = s[1:]
		}
		scripted := f.scripted
		f.mu.Unlock()
		if ok {
			break
		}
		// A blocking query: it returns when the script grows (a change)
		// or when the client gives up.
		f.setBlocked(r.URL.Path, +1)
		select {
		case <-scripted:
			f.setBlocked(r.URL.Path, -1)
		case <-r.Context().Done():
			f.setBlocked(r.URL.Path, -1)
			return
		}
	}
	if rep.status != 0 && rep.status != http.StatusOK {
		http.Error(w, "scripted failure", rep.status)
		return
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(rep.index, 10))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep.body)
}

// waitRead waits for a read at index 0 of path among its queries after
// the first from.
func (f *fakeAPI) waitRead(t *testing.T, path string, from int) {
	t.Helper()
	for n := from + 1; ; n++ {
		if got := f.waitQueries(t, path, n); got[n-1].index == 0 {
			return
		}
	}
}

func (f *fakeAPI) setBlocked(path string, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked[path] += d
}

// waitBlocked waits until exactly n queries of path wait in the server for
// a change.
func (f *fakeAPI) waitBlocked(t *testing.T, path string, n int) {
	t.Helper()
	dnstest.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.blocked[path] == n
	}, 10*time.Second, fmt.Sprintf("exactly %d queries of %s blocked", n, path))
}

// startOutage fails every blocked query, and every request until
// endOutage, with status.
func (f *fakeAPI) startOutage(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outage, f.outageLeft = status, math.MaxInt
	f.outages++
	close(f.scripted) // wake the blocked queries
	f.scripted = make(chan struct{})
}

func (f *fakeAPI) endOutage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outageLeft = 0
}

// all returns every request seen so far.
func (f *fakeAPI) all() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

// queries returns the requests seen on path so far.
func (f *fakeAPI) queries(path string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.requests {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// waitQueries waits until path has seen n requests; the last one is then
// blocked in the server (the script ran out) or answered.
func (f *fakeAPI) waitQueries(t *testing.T, path string, n int) []request {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		seen := f.seen
		f.mu.Unlock()
		if got := f.queries(path); len(got) >= n {
			return got
		}
		select {
		case <-seen:
		case <-deadline.C:
			t.Fatalf("%s: %d queries within 10s, want %d", path, len(f.queries(path)), n)
		}
	}
}

// newFakeClock is the loops' clock in tests: Sleep returns at once and
// moves the time on, and every wait asked for is recorded.
func newFakeClock() *dnstest.Clock { return dnstest.NewClock(time.Unix(1_700_000_000, 0)) }

// newTestWatcher is a Watcher on the fake API with the fake clock and a
// fixed jitter.
func newTestWatcher(t *testing.T, f *fakeAPI, cfg Config, clk sleepClock, jitter func(time.Duration) time.Duration) *Watcher {
	t.Helper()
	cfg.Address = strings.TrimPrefix(f.URL, "http://")
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.clock, w.jitter = clk, jitter
	return w
}

func noJitter(time.Duration) time.Duration { return 0 }

// entry is a health/service JSON entry.
func entry(node, nodeAddr, id, addr string, port int, tags []string, checks ...map[string]any) map[string]any {
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{
		"Node": map[string]any{"Node": node, "Address": nodeAddr, "Datacenter": "dc1",
			"TaggedAddresses": map[string]string{"lan": nodeAddr, "lan_ipv4": nodeAddr},
			"Meta":            map[string]string{"consul-network-segment": ""}},
		"Service": map[string]any{"ID": id, "Service": "web", "Address": addr, "Port": port, "Tags": tags,
			"Weights": map[string]int{"Passing": 1, "Warning": 1}},
		"Checks": append([]map[string]any{{"CheckID": "serfHealth", "Status": "passing"}}, checks...),
	}
}

// markWatched makes keys watched without a loop behind them, for tests that
// fill the store by hand.
func markWatched(w *Watcher, keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		w.watches[k] = &serviceLoop{name: k, cancel: func() {}}
	}
	w.publish()
}
