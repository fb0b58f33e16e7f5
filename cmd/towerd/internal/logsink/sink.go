// Package logsink is where towerd's log lines go on their way to stderr
// (the journal, under systemd): a writer that never makes the goroutine
// that logs wait. Every line towerd writes goes through it: the query log,
// warnings, the debug lines of the query path, the admin server's error
// log.
//
// Issue 21: with the query log on and stderr a pipe nobody read, 312 of
// 50,312 queries were answered and `towerd log-queries off` blocked for
// 14.9 s. A slog handler writes each record under its lock with one Write;
// on a full pipe that Write blocks, every goroutine that logs queues on the
// lock, and so does every answer whose route logs. Here Write copies the
// line into a bounded buffer and returns; one goroutine of the sink's own
// writes the buffer out. When the buffer is full, the line is dropped and
// counted (towerd_log_lines_dropped_total), and once the sink takes lines
// again it says how many it dropped, at most once per DropReportInterval.
package logsink

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/resolver/clock"
)

const (
	// MaxBuffered is the most bytes of lines waiting for the sink: about
	// 1,300 query-log lines, a few seconds of a journal that stalls. The
	// sink holds two such buffers (one filling, one being written).
	MaxBuffered = 256 << 10
	// DropReportInterval is the least time between two lines that report
	// dropped lines.
	DropReportInterval = 10 * time.Second
)

// Sink is an io.Writer for log handlers that never blocks its callers.
// Each Write is taken as one whole line (slog's handlers write a record
// with one call) and is kept whole or dropped whole.
type Sink struct {
	out io.Writer

	mu      sync.Mutex
	pending []byte // lines waiting, at most MaxBuffered bytes
	closed  bool
	wake    chan struct{} // one wake-up pending at most
	done    chan struct{} // closed when the writer goroutine returns

	dropped    atomic.Uint64 // lines dropped since New
	reported   uint64        // dropped as of the last report; the writer's
	lastReport time.Time     // the writer's
	report     func(dropped uint64)
	// clock times the report interval and Close's wait (issue 33):
	// clock.Real; tests step a fake.
	clock clock.Clock
	every time.Duration // DropReportInterval

	droppedDesc *prometheus.Desc
}

var _ prometheus.Collector = (*Sink)(nil)

// New returns a sink in front of out; Start starts its writer.
func New(out io.Writer) *Sink {
	return &Sink{
		out:     out,
		pending: make([]byte, 0, 4096),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		clock:   clock.Real{},
		every:   DropReportInterval,
		droppedDesc: prometheus.NewDesc("towerd_log_lines_dropped_total",
			"Log lines (query lines included) dropped because stderr, the journal or whatever reads towerd's log did not take them fast enough.", nil, nil),
	}
}

// Start starts the writer. report is called from it, at most once per
// DropReportInterval, with the number of lines dropped since the last
// call; it is meant to log a line, which then goes through the sink like
// any other.
func (s *Sink) Start(report func(dropped uint64)) {
	s.report = report
	go s.run()
}

// Write takes one log line without waiting: it is queued, or dropped and
// counted when MaxBuffered bytes already wait. It never fails, so a
// handler never sees the sink's trouble.
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.closed || len(s.pending)+len(p) > MaxBuffered {
		s.mu.Unlock()
		s.dropped.Add(1)
	} else {
		s.pending = append(s.pending, p...)
		s.mu.Unlock()
	}
	select { // a drop wakes the writer too: its report is due at some point
	case s.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// run writes what is pending until Close. A write may block for as long
// as the sink's reader wants: only this goroutine waits.
func (s *Sink) run() {
	defer close(s.done)
	spare := make([]byte, 0, 4096)
	// Armed while dropped lines wait for their report, so that it comes
	// even when nothing is logged after them.
	reportTimer, reportDue := s.clock.NewTimer(s.every)
	reportTimer.Stop()
	defer reportTimer.Stop()
	for {
		select {
		case <-s.wake:
		case <-reportDue:
		}
		s.mu.Lock()
		lines, closed := s.pending, s.closed
		s.pending = spare[:0]
		s.mu.Unlock()
		if len(lines) > 0 {
			_, _ = s.out.Write(lines) // nothing to do about a failed stderr
		}
		spare = lines
		if cap(spare) > 4*4096 {
			spare = make([]byte, 0, 4096) // a burst's buffer is not kept
		}
		if closed {
			return
		}
		if wait := s.reportDrops(); wait > 0 {
			reportTimer.Reset(wait)
		}
	}
}

// reportDrops calls report when lines were dropped since the last report
// and DropReportInterval has passed, and otherwise returns how long until
// it may (0: nothing to report). Its line goes through Write: it is
// dropped too when the buffer is full again, and counted.
func (s *Sink) reportDrops() time.Duration {
	n := s.dropped.Load()
	if n == s.reported || s.report == nil {
		return 0
	}
	now := s.clock.Now()
	if wait := s.every - now.Sub(s.lastReport); !s.lastReport.IsZero() && wait > 0 {
		return wait
	}
	s.lastReport = now
	since := n - s.reported
	s.reported = n
	s.report(since)
	return 0
}

// Close writes out what is pending and stops the writer, waiting for it
// at most timeout: a sink that does not read keeps its lines. Lines
// written after Close are dropped.
func (s *Sink) Close(timeout time.Duration) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	t, expired := s.clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-expired:
	}
}

// Dropped is how many lines were dropped since New.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

// Describe implements prometheus.Collector.
func (s *Sink) Describe(ch chan<- *prometheus.Desc) { ch <- s.droppedDesc }

// Collect implements prometheus.Collector.
func (s *Sink) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.droppedDesc, prometheus.CounterValue, float64(s.Dropped()))
}
