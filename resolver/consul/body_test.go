package consul

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// endlessAgent is a Consul agent's HTTP API that answers /v1/agent/self as
// a real one does and every health query with a body that never ends: a
// chunked 200 (a JSON array that goes on) or a 429 whose text goes on. It
// counts the bytes it managed to write.
func endlessAgent(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/agent/self" {
			_ = json.NewEncoder(w).Encode(map[string]any{"Config": map[string]any{"Datacenter": "dc1"},
				"DebugConfig": map[string]any{"DNSDomain": "consul."}})
			return
		}
		w.Header().Set("X-Consul-Index", "7")
		w.WriteHeader(status)
		chunk := []byte(strings.Repeat(`{"Node":{"Node":"n1","Address":"10.0.0.1"},"Service":{"ID":"x"}},`, 64))
		if status == http.StatusOK {
			_, _ = w.Write([]byte("["))
		}
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv, &written
}

// TestBodyBounds: an endless 200 fails the read at the bound with
// ErrBodyTooLarge, the watch backs off on its own (5 s doubling, not the
// agent's backoff) and its names go to the agent's DNS; an endless 429
// still reads as a 429, its text cut short; a body announced too long is
// refused before a byte of it is read.
func TestBodyBounds(t *testing.T) {
	const maxBody = 256 << 10
	srv, written := endlessAgent(t, http.StatusOK)
	clk := newFakeClock()
	w, err := New(Config{Address: strings.TrimPrefix(srv.URL, "http://"), Services: []string{"web"},
		MaxBody: maxBody, MaxStale: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.clock, w.jitter = clk, noJitter
	startWatcher(t, w) // no first sync: web's reads all fail
	st := waitState(t, w, "a body over the bound", func(s State) bool { return s.OversizeBodies >= 2 })
	if !errors.Is(st.LastErr, ErrBodyTooLarge) || st.Services != 0 {
		t.Errorf("after an endless body: %+v, want ErrBodyTooLarge and nothing held", st)
	}
	if _, _, ok := ask(w, question("web.service.consul.", dns.TypeA)); ok {
		t.Error("web answered from memory after its reply broke the bound; its names belong to the agent's DNS")
	}
	var waits []time.Duration
	for _, d := range clk.Sleeps() {
		if d > 0 {
			waits = append(waits, d)
		}
	}
	if len(waits) < 1 || waits[0] != serviceBackoffBase/2 {
		t.Errorf("waits after oversize bodies %v, want the service's own backoff from %v", waits, serviceBackoffBase/2)
	}
	// What the server could push before towerd stopped reading: the bound
	// and what the sockets buffer, not the stream.
	t.Logf("the endless server wrote %d bytes for %d reads", written.Load(), st.OversizeBodies)

	// The same through the API client directly: each of the three shapes.
	srv429, _ := endlessAgent(t, http.StatusTooManyRequests)
	cs, err := newClients(Config{Address: strings.TrimPrefix(srv429.URL, "http://"), MaxBody: maxBody})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cs.pooled.Health().Service("web", "", false, nil)
	err = classify(err)
	if !errors.Is(err, ErrThrottled) || len(err.Error()) > maxErrorText+100 {
		t.Errorf("endless 429: %d bytes of error %.200q, want ErrThrottled, cut short", len(err.Error()), err)
	}

	long := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(maxBody+1))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(long.Close)
	cs, err = newClients(Config{Address: strings.TrimPrefix(long.URL, "http://"), MaxBody: maxBody})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = cs.probe.Health().Service("web", "", false, nil); !errors.Is(classify(err), ErrBodyTooLarge) {
		t.Errorf("a body announced past the bound: %v, want ErrBodyTooLarge", err)
	}
}

// TestBodyBudget: the bodies open at once share one budget, so however
// many watches a hostile agent answers at the bound, towerd holds a few
// bounds' worth; a body that closes gives its bytes back.
func TestBodyBudget(t *testing.T) {
	budget := &bodyBudget{max: 100}
	open := func() *boundedBody {
		return &boundedBody{rc: io.NopCloser(strings.NewReader(strings.Repeat("x", 80))), left: 80, limit: 80, budget: budget}
	}
	a, b := open(), open()
	if n, err := io.Copy(io.Discard, a); err != nil || n != 80 {
		t.Fatalf("first body: %d %v, want all 80 bytes", n, err)
	}
	if _, err := io.Copy(io.Discard, b); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("second body past the shared budget: %v, want ErrBodyTooLarge", err)
	}
	a.Close()
	b.Close()
	if used := budget.used.Load(); used != 0 {
		t.Errorf("%d bytes still counted after both closed", used)
	}
	c := open()
	if n, err := io.Copy(io.Discard, c); err != nil || n != 80 {
		t.Errorf("after the others closed: %d %v, want all 80 bytes", n, err)
	}
	exact := &boundedBody{rc: io.NopCloser(strings.NewReader("12345")), left: 5, limit: 5, budget: &bodyBudget{max: 10}}
	if n, err := io.Copy(io.Discard, exact); err != nil || n != 5 {
		t.Errorf("a body of exactly its bound: %d %v, want it whole", n, err)
	}
}
