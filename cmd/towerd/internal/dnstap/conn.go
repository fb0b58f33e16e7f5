package dnstap

import (
	"net"
	"time"
)

// run is the writer goroutine: it connects, writes what is pending a batch
// at a time, connects again after a failed write, and reports drops, until
// Close. Only it waits on the reader.
func (w *Writer) run() {
	defer close(w.done)
	retry, retryC := w.clk.NewTimer(time.Hour)
	retry.Stop()
	report, reportC := w.clk.NewTimer(time.Hour)
	report.Stop()
	batch, batchC := w.clk.NewTimer(time.Hour)
	batch.Stop()
	defer batch.Stop()
	defer retry.Stop()
	defer report.Stop()
	var (
		conn       net.Conn
		spare      = make([]byte, 0, 64<<10)
		down       bool // the reader's absence was logged
		lastReport time.Time
	)
	reportDrops := func() {
		if wait := w.reportDrops(&lastReport); wait > 0 {
			report.Reset(wait)
		}
	}
	for {
		if conn == nil {
			c, err := w.dial()
			if err != nil {
				if !down {
					w.o.Log.Warn("dnstap: no reader; connecting again every "+ReconnectInterval.String(),
						"address", w.o.Address, "error", err.Error())
					down = true
				}
				retry.Reset(ReconnectInterval)
				select {
				case <-retryC:
				case <-reportC:
					retry.Stop()
				case <-w.stopped:
					w.dropPending(spare)
					return
				}
				reportDrops()
				continue
			}
			conn = c
			w.stats.setConnected(true)
			w.o.Log.Info("dnstap: writing to the reader", "address", w.o.Address)
			down = false
		}
		select {
		case <-w.wake:
			// The first message of a batch: let the batch form.
			batch.Reset(batchDelay)
			select {
			case <-batchC:
			case <-w.wake: // flushAt bytes wait
				batch.Stop()
			case <-w.stopped:
				batch.Stop()
			}
		case <-reportC:
		case <-w.stopped:
		}
		pending, frames, closed := w.take(spare)
		if len(pending) > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(WriteTimeout)) // the kernel's time, whatever the clock
			if _, err := conn.Write(pending); err != nil {
				// Part of a frame may have gone out: the stream is
				// broken, and a new one begins with a handshake.
				w.stats.dropped.Add(frames)
				_ = conn.Close()
				conn = nil
				w.stats.setConnected(false)
				w.o.Log.Warn("dnstap: the reader took nothing for a while or went away; connecting again",
					"address", w.o.Address, "error", err.Error())
				down = true
			} else {
				w.stats.sent.Add(frames)
			}
		}
		spare = pending[:0]
		if closed {
			if conn != nil {
				stop(conn, time.Second)
				_ = conn.Close()
				w.stats.setConnected(false)
			}
			return
		}
		reportDrops()
	}
}

// dial connects to the reader and opens the stream.
func (w *Writer) dial() (net.Conn, error) {
	c, err := net.DialTimeout(w.o.Network, w.o.Address, WriteTimeout)
	if err != nil {
		return nil, err
	}
	if err := handshake(c, WriteTimeout); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// dropPending counts what was never written when the writer closes without
// a reader.
func (w *Writer) dropPending(spare []byte) {
	_, frames, _ := w.take(spare)
	w.stats.dropped.Add(frames)
}

// reportDrops logs how many messages were dropped since the last report,
// at most once per DropReportInterval, and otherwise returns how long until
// it may (0: nothing to report).
func (w *Writer) reportDrops(last *time.Time) time.Duration {
	n := w.stats.dropped.Load()
	if n == w.reported {
		return 0
	}
	now := w.clk.Now()
	if wait := DropReportInterval - now.Sub(*last); !last.IsZero() && wait > 0 {
		return wait
	}
	*last = now
	w.o.Log.Warn("dnstap: messages dropped: the reader did not take them fast enough",
		"dropped", n-w.reported, "address", w.o.Address)
	w.reported = n
	return 0
}
