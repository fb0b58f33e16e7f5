package consul

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/test/dnstest"
)

const servicesPath = "/v1/catalog/services"

// listLoop runs the service-list loop of w on its own, collecting what it
// delivers.
type listLoop struct {
	mu        sync.Mutex
	delivered []map[string]string
	failures  []int
	cancel    context.CancelFunc
	done      chan struct{}
}

func startListLoop(t *testing.T, w *Watcher) *listLoop {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ll := &listLoop{cancel: cancel, done: make(chan struct{})}
	l := &loop[map[string]string]{
		timing: w.cfg.Timing,
		clock:  w.clock,
		jitter: w.jitter,
		fetch:  w.fetchServiceList,
		equal:  equalMaps,
		deliver: func(m map[string]string) {
			ll.mu.Lock()
			defer ll.mu.Unlock()
			ll.delivered = append(ll.delivered, m)
		},
		failure: func(_ error, n int) {
			ll.mu.Lock()
			defer ll.mu.Unlock()
			ll.failures = append(ll.failures, n)
		},
	}
	go func() {
		defer close(ll.done)
		l.run(ctx)
	}()
	t.Cleanup(ll.stop)
	return ll
}

func (ll *listLoop) stop() {
	ll.cancel()
	<-ll.done
}

func names(list ...string) map[string]string {
	m := map[string]string{}
	for _, n := range list {
		m[n] = n
	}
	return m
}

func body(list ...string) map[string][]string {
	m := map[string][]string{}
	for _, n := range list {
		m[n] = []string{}
	}
	return m
}

// TestLoopIndexRules follows one scripted sequence of replies and checks the
// index each next query carries: unchanged → same index; a lower index →
// reset to 0; an index of 0 → 1; a failure → 0 (resync); identical results
// are dropped; every query allows stale reads and none asks for ?cached
// (which hides revoked tokens, see queryOptions).
func TestLoopIndexRules(t *testing.T) {
	f := newFakeAPI(t)
	f.script(servicesPath,
		reply{index: 0, body: body("web")},        // Consul bug: index 0 → next must be 1
		reply{index: 1, body: body("web")},        // wait ran out, unchanged
		reply{index: 10, body: body("web", "db")}, // change
		reply{index: 10, body: body("web", "db")}, // unchanged
		reply{index: 12, body: body("web", "db")}, // new index, same result: dropped
		reply{index: 5, body: body("api")},        // went backwards: reset, not delivered
		reply{index: 7, body: body("api")},        // the resync's answer
		reply{status: http.StatusInternalServerError},
		reply{index: 7, body: body("api")}, // after the failure: same result, dropped
	)
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{}, clk, noJitter)
	ll := startListLoop(t, w)

	got := f.waitQueries(t, servicesPath, 10) // the 10th blocks: the script ran out
	ll.stop()
	var indexes []uint64
	for _, r := range got {
		indexes = append(indexes, r.index)
		if r.cached || !r.stale {
			t.Errorf("query %+v: want ?stale and no ?cached", r)
		}
	}
	if want := []uint64{0, 1, 1, 10, 10, 12, 0, 7, 0, 7}; !slices.Equal(indexes[:10], want) {
		t.Errorf("indexes sent %v, want %v", indexes, want)
	}
	want := []map[string]string{names("web"), names("web", "db"), names("api")}
	if !reflect.DeepEqual(ll.delivered, want) {
		t.Errorf("delivered %v, want %v", ll.delivered, want)
	}
	if !slices.Equal(ll.failures, []int{1}) {
		t.Errorf("failures %v, want [1]", ll.failures)
	}
	// Every success waits out the minimum spacing; the failure backs off.
	sleeps := clk.Sleeps()
	wantSleeps := []time.Duration{100, 100, 100, 100, 100, 100, 100, 125, 100}
	for i := range wantSleeps {
		wantSleeps[i] *= time.Millisecond
	}
	if len(sleeps) < len(wantSleeps) || !slices.Equal(sleeps[:len(wantSleeps)], wantSleeps) {
		t.Errorf("waits %v, want %v first", sleeps, wantSleeps)
	}
}

// TestLoopBackoff: consecutive failures double the wait up to the cap, a
// success resets it, and jitter only ever adds to the lower half.
func TestLoopBackoff(t *testing.T) {
	f := newFakeAPI(t)
	fail := reply{status: http.StatusServiceUnavailable}
	f.script(servicesPath, fail, fail, fail, fail, fail, fail, reply{index: 3, body: body("web")}, fail, fail)
	clk := newFakeClock()
	w := newTestWatcher(t, f, Config{}, clk, noJitter)
	ll := startListLoop(t, w)
	f.waitQueries(t, servicesPath, 10)
	ll.stop()

	ms := time.Millisecond
	want := []time.Duration{125 * ms, 250 * ms, 500 * ms, 1000 * ms, 2000 * ms, 2500 * ms, // capped at 5s/2
		100 * ms,           // success: spacing only
		125 * ms, 250 * ms} // reset after the success
	if got := clk.Sleeps(); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("waits %v, want %v first", got, want)
	}
	if !slices.Equal(ll.failures, []int{1, 2, 3, 4, 5, 6, 1, 2}) {
		t.Errorf("consecutive failure counts %v", ll.failures)
	}

	// With the largest jitter the wait reaches the full step, never more.
	l := &loop[int]{timing: Timing{}.withDefaults(), jitter: func(n time.Duration) time.Duration { return n - 1 }}
	for n, full := range map[int]time.Duration{1: 250 * ms, 2: 500 * ms, 5: 4 * time.Second, 6: 5 * time.Second, 30: 5 * time.Second} {
		if got := l.backoff(n); got != full {
			t.Errorf("backoff(%d) with the largest jitter = %v, want %v", n, got, full)
		}
	}
	// And the real jitter stays within [step/2, step].
	l.jitter = randomJitter
	for range 1000 {
		if got := l.backoff(3); got < 500*ms || got > time.Second {
			t.Fatalf("backoff(3) = %v, want within [500ms, 1s]", got)
		}
	}
}

// TestLoopStopsOnContext: a loop ends promptly whether it waits in a
// blocking query, in a backoff or in the spacing between queries.
func TestLoopStopsOnContext(t *testing.T) {
	hour := time.Hour
	cases := map[string]struct {
		replies []reply
		timing  Timing
	}{
		"blocking query": {nil, Timing{}},
		"backoff":        {[]reply{{status: http.StatusInternalServerError}}, Timing{BackoffBase: hour, BackoffMax: hour}},
		"spacing":        {[]reply{{index: 2, body: body("web")}}, Timing{MinInterval: hour}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeAPI(t)
			f.script(servicesPath, tc.replies...)
			w := newTestWatcher(t, f, Config{Timing: tc.timing}, timerClock{clock.Real{}}, randomJitter)
			ll := startListLoop(t, w)
			f.waitQueries(t, servicesPath, 1)
			ll.cancel()
			// Each wait here is an hour: a loop that ends within the
			// bound ended on its context. The bound keeps a broken loop
			// from hanging the test; it asserts no speed (issue 33).
			select {
			case <-ll.done:
			case <-time.After(10 * time.Second):
				t.Fatal("loop still running 10s after its context ended, in a wait of an hour")
			}
		})
	}
}

// Config.Clock is the watch's clock (issue 33): it reads the time from it,
// and its loops' waits are the clock's timers, so a daemon on a test's
// clock has its Consul loops wait until the test steps that clock; they do
// not move it themselves.
func TestConfigClockRunsTheWaits(t *testing.T) {
	clk := dnstest.NewClock(time.Unix(1700000000, 0))
	w, err := New(Config{Address: "127.0.0.1:1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if !w.clock.Now().Equal(clk.Now()) {
		t.Fatalf("the watch reads %v, its clock %v", w.clock.Now(), clk.Now())
	}
	slept := make(chan error, 1)
	go func() { slept <- w.clock.Sleep(context.Background(), time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil {
		t.Fatalf("the wait armed no timer of the clock: %v", err)
	}
	clk.Advance(time.Second - 1)
	select {
	case <-slept:
		t.Fatal("the wait ended before its time on the clock")
	default:
	}
	if !clk.Now().Equal(time.Unix(1700000000, 0).Add(time.Second - 1)) {
		t.Fatalf("the wait moved the clock to %v", clk.Now())
	}
	clk.Advance(1)
	select {
	case err := <-slept:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done(): // a bound against hanging, not a speed
		t.Fatal("the wait did not end when the clock reached its time")
	}
}
