package logsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/towerd/towerd/test/dnstest"
)

// gatedWriter blocks every Write until open is closed, as a pipe whose
// reader stopped does, then keeps what it is given.
type gatedWriter struct {
	open  chan struct{}
	wrote chan struct{} // a write happened (if anyone listens)
	mu    sync.Mutex
	buf   bytes.Buffer
}

func newGatedWriter() *gatedWriter {
	return &gatedWriter{open: make(chan struct{}), wrote: make(chan struct{}, 1)}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case g.wrote <- struct{}{}:
	default:
	}
	return g.buf.Write(p)
}

func (g *gatedWriter) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// within fails the test if f takes more than a few seconds: a Write that
// waits for the reader would take forever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a bound on a hang, not a measurement
		t.Fatalf("%s blocked", what)
	}
}

// TestWriteNeverWaitsForTheReader is issue 21's attack on the sink itself:
// a reader that stopped. 100,000 lines are taken without waiting, what
// does not fit is dropped and counted, and what was kept comes out whole
// and in order once the reader reads again.
func TestWriteNeverWaitsForTheReader(t *testing.T) {
	out := newGatedWriter()
	s := New(out)
	s.Start(nil)
	const lines = 100000
	within(t, "Write to a sink whose reader stopped", func() {
		for i := range lines {
			fmt.Fprintf(s, "level=INFO msg=query n=%d\n", i)
		}
	})
	if d := s.Dropped(); d == 0 || d >= lines {
		t.Fatalf("%d of %d lines dropped", d, lines)
	}
	close(out.open)
	within(t, "Close", func() { s.Close(5 * time.Second) })
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if uint64(len(got))+s.Dropped() != lines {
		t.Errorf("%d lines out, %d dropped, of %d", len(got), s.Dropped(), lines)
	}
	prev := -1
	for _, l := range got {
		var n int
		if _, err := fmt.Sscanf(l, "level=INFO msg=query n=%d", &n); err != nil || n <= prev {
			t.Fatalf("line %q after n=%d: cut, or out of order", l, prev)
		}
		prev = n
	}
}

// TestCloseDoesNotWaitForAStoppedReader: at shutdown, a reader that never
// reads again costs Close its timeout, no more.
func TestCloseDoesNotWaitForAStoppedReader(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := New(w)
	// Close's wait on the fake clock (issue 33): it returns when the clock
	// reaches its timeout, not a nanosecond before, however the machine runs.
	clk := dnstest.NewClock(time.Unix(1e9, 0))
	s.clock = clk
	s.Start(nil)
	line := strings.Repeat("x", 1000) + "\n"
	for range 1000 { // 1 MB: more than the pipe holds
		io.WriteString(s, line)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); s.Close(200 * time.Millisecond) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil {
		t.Fatalf("Close armed no timer: %v", err)
	}
	clk.Advance(200*time.Millisecond - 1)
	select {
	case <-closed:
		t.Fatal("Close returned before its timeout: the writer cannot have finished")
	default:
	}
	clk.Advance(1)
	within(t, "Close at its timeout", func() { <-closed })
	io.WriteString(s, line) // after Close: dropped, not blocked
}

// TestDropsReportedOncePerInterval: dropped lines are reported with their
// count when the sink takes lines again, and not again before the interval
// has passed by the sink's clock.
func TestDropsReportedOncePerInterval(t *testing.T) {
	out := newGatedWriter()
	s := New(out)
	clk := dnstest.NewClock(time.Unix(1e9, 0))
	s.clock = clk
	reports := make(chan uint64, 10)
	s.Start(func(n uint64) { reports <- n })
	fill := func() {
		for s.Dropped() == 0 || s.pendingLen() < MaxBuffered-100 {
			io.WriteString(s, strings.Repeat("y", 99)+"\n")
		}
	}
	fill()
	first := s.Dropped()
	close(out.open)
	select {
	case n := <-reports:
		if n < first {
			t.Errorf("reported %d dropped, at least %d were", n, first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dropped lines never reported")
	}
	// More drops within the interval: the writer keeps writing, no report.
	s.mu.Lock()
	s.pending = append(s.pending, make([]byte, MaxBuffered-len(s.pending))...)
	s.mu.Unlock()
	io.WriteString(s, "dropped\n")
	io.WriteString(s, "kept once the buffer drains\n")
	for !strings.Contains(out.String(), "kept once") {
		<-out.wrote // the full buffer went out: the next line is kept
		io.WriteString(s, "kept once the buffer drains\n")
	}
	select {
	case n := <-reports:
		t.Fatalf("a second report (%d) within the interval", n)
	default:
	}
	// The writer armed its report timer for the interval's end: the
	// report comes then though nothing more is logged.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitTimers(ctx, 1); err != nil {
		t.Fatalf("no report timer armed: %v", err)
	}
	clk.Advance(DropReportInterval)
	select {
	case n := <-reports:
		if n == 0 {
			t.Error("reported 0 dropped")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second batch of drops never reported")
	}
	s.Close(time.Second)
}

// pendingLen is how many bytes wait in the buffer now.
func (s *Sink) pendingLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// TestMetricLints: the sink's counter passes promlint and counts drops.
func TestMetricLints(t *testing.T) {
	out := newGatedWriter()
	s := New(out)
	s.Start(nil)
	defer func() { close(out.open); s.Close(time.Second) }()
	for s.Dropped() == 0 {
		io.WriteString(s, strings.Repeat("z", 1000)+"\n")
	}
	problems, err := testutil.CollectAndLint(s)
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
	if got := testutil.ToFloat64(s); got != float64(s.Dropped()) || got == 0 {
		t.Errorf("towerd_log_lines_dropped_total = %v, want %d", got, s.Dropped())
	}
}
