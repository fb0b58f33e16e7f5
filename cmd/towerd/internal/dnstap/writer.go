// Package dnstap writes towerd's DNS messages as dnstap (dnstap.info,
// issue 38): protobuf dnstap.Dnstap in Frame Streams, to a collector's
// Unix socket or TCP address (fstrm_capture, dnscollector, Vector,
// golang-dnstap's dnstap). A Writer is the resolver's Tap.
//
// It never stands in an answer's way. Unbound drops silently once its
// per-thread queue fills and does not recover when the reader comes back
// (NLnetLabs/unbound#304); here a message is encoded on the answering
// goroutine into one bounded buffer (MaxBuffered bytes) and nothing more:
// one goroutine of the Writer's own writes the buffer out, a batch per
// write, each write bounded by WriteTimeout. A reader that is slow,
// stopped or gone costs the answers nothing: the buffer fills, messages
// are dropped and counted (towerd_dnstap_dropped_total), a line says how
// many at most every DropReportInterval, and the writer connects again,
// every ReconnectInterval, until the reader is back.
package dnstap

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/clock"
)

const (
	// MaxBuffered is the most bytes of framed messages waiting for the
	// reader: about 10,000 client messages, seconds of a busy node. The
	// writer holds two such buffers (one filling, one being written).
	MaxBuffered = 2 << 20
	// WriteTimeout bounds one write to the reader (and the handshake): a
	// reader that takes nothing for this long is dropped and connected to
	// again.
	WriteTimeout = 2 * time.Second
	// ReconnectInterval is the wait between two tries to connect.
	ReconnectInterval = 500 * time.Millisecond
	// DropReportInterval is the least time between two lines that report
	// dropped messages.
	DropReportInterval = 10 * time.Second
	// batchDelay is how long the writer lets messages gather after the
	// first of a batch, unless flushAt bytes come first: a write and a
	// wake-up per batch, not per answer (at 20k answers a second one per
	// message tripled towerd's CPU per answer; make bench, scenario 11).
	batchDelay = 20 * time.Millisecond
	// flushAt cuts batchDelay short: a quarter of the buffer waiting.
	flushAt = MaxBuffered / 4
)

// Options are a Writer's settings (the config's [dnstap] section).
type Options struct {
	// Network is "unix" or "tcp", Address the socket's path or host:port.
	Network, Address string
	// Identity and Version go into every message ("" leaves them out).
	Identity, Version string
	// Types are the message types written; empty means DefaultTypes.
	Types []MessageType
	// Log gets the drop reports and the connection's state changes.
	Log *slog.Logger
	// Clock makes the writer's timers; nil is the real clock.
	Clock clock.Clock
}

// DefaultTypes are the message types written when Options.Types is empty.
var DefaultTypes = []MessageType{ClientQuery, ClientResponse, ForwarderQuery, ForwarderResponse}

// Writer is a dnstap output: the resolver's Tap for one configuration.
type Writer struct {
	o     Options
	types [ForwarderResponse + 1]bool
	stats *Stats
	clk   clock.Clock

	mu      sync.Mutex
	pending []byte // framed messages waiting, at most MaxBuffered bytes
	frames  uint64 // how many in pending
	closed  bool
	wake    chan struct{} // one wake-up pending at most
	done    chan struct{} // closed when the writer goroutine returns
	stopped chan struct{} // closed by Close

	reported uint64 // the writer's: dropped as of the last report
}

var _ resolver.Tap = (*Writer)(nil)

// New returns a Writer counting into stats; Start starts it.
func New(o Options, stats *Stats) (*Writer, error) {
	if o.Network != "unix" && o.Network != "tcp" {
		return nil, fmt.Errorf("dnstap network %q: want unix or tcp", o.Network)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{o: o, stats: stats, clk: clock.Or(o.Clock), pending: make([]byte, 0, 64<<10),
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	types := o.Types
	if len(types) == 0 {
		types = DefaultTypes
	}
	for _, t := range types {
		if t < ClientQuery || t > ForwarderResponse {
			return nil, fmt.Errorf("dnstap message type %d: not one towerd writes", t)
		}
		w.types[t] = true
	}
	return w, nil
}

// Start starts the writer goroutine.
func (w *Writer) Start() { go w.run() }

// Client implements resolver.Tap: CLIENT_QUERY and CLIENT_RESPONSE. As
// unbound writes them, the response carries the response's bytes only
// (the query's are in CLIENT_QUERY); its query_time is kept, so a
// collector sees how long the answer took.
func (w *Writer) Client(e resolver.ClientExchange) {
	extra := "source=" + e.Source + " zone=" + e.Zone
	var q, r *message
	if w.types[ClientQuery] {
		q = &message{typ: ClientQuery, tcp: e.TCP, queryAddr: e.Client, queryTime: e.QueryTime,
			query: e.Query, extra: extra}
	}
	if w.types[ClientResponse] {
		r = &message{typ: ClientResponse, tcp: e.TCP, queryAddr: e.Client, queryTime: e.QueryTime,
			respTime: e.ResponseTime, response: e.Response, extra: extra}
	}
	w.enqueue(q, r)
}

// Forwarder implements resolver.Tap: FORWARDER_QUERY and
// FORWARDER_RESPONSE (the response without the query's bytes, as Client's).
// A hedge's exchange says source=hedge.
func (w *Writer) Forwarder(e resolver.ForwarderExchange) {
	extra := "source=upstream zone=" + e.Zone
	if e.Hedge {
		extra = "source=hedge zone=" + e.Zone
	}
	var q, r *message
	if w.types[ForwarderQuery] {
		q = &message{typ: ForwarderQuery, tcp: e.TCP, respAddr: e.Server, queryTime: e.QueryTime,
			query: e.Query, extra: extra}
	}
	if w.types[ForwarderResponse] {
		r = &message{typ: ForwarderResponse, tcp: e.TCP, respAddr: e.Server, queryTime: e.QueryTime,
			respTime: e.ResponseTime, response: e.Response, extra: extra}
	}
	w.enqueue(q, r)
}

// enqueue frames the messages that are not nil into the buffer, under one
// hold of its lock, or drops and counts each that does not fit. It never
// waits but for the lock, which the writer holds only to swap buffers.
func (w *Writer) enqueue(ms ...*message) {
	var dropped uint64
	wake := false
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	for _, m := range ms {
		if m == nil {
			continue
		}
		at := len(w.pending)
		buf := append(w.pending, 0, 0, 0, 0) // the frame's length, written below
		buf = appendDnstap(buf, w.o.Identity, w.o.Version, m)
		n := len(buf) - at - 4
		if len(buf) > MaxBuffered {
			w.pending = buf[:at]
			dropped++
			continue
		}
		buf[at], buf[at+1], buf[at+2], buf[at+3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		w.pending = buf
		w.frames++
		// The first message of a batch wakes the writer, which then waits
		// batchDelay; crossing flushAt wakes it from that wait.
		wake = wake || w.frames == 1 || (at < flushAt && len(buf) >= flushAt)
	}
	w.mu.Unlock()
	if dropped > 0 {
		w.stats.dropped.Add(dropped)
		wake = true // its report is due at some point
	}
	if wake {
		w.signal()
	}
}

func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close stops the writer: what is pending is written if the reader takes
// it within timeout, the stream is ended (STOP, FINISH) and the
// connection closed. Messages after Close are not written.
func (w *Writer) Close(timeout time.Duration) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stopped)
	t, c := w.clk.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-c:
	}
}

// take swaps the pending buffer for spare and returns it and its frames.
func (w *Writer) take(spare []byte) (batch []byte, frames uint64, closed bool) {
	w.mu.Lock()
	batch, frames, closed = w.pending, w.frames, w.closed
	w.pending, w.frames = spare[:0], 0
	w.mu.Unlock()
	return batch, frames, closed
}
