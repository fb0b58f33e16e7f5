package dnstap

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are the dnstap counters, kept across reloads: the daemon makes one
// and every Writer of its configurations counts into it.
type Stats struct {
	dropped   atomic.Uint64
	sent      atomic.Uint64
	connected atomic.Int32 // writers connected to a reader

	droppedDesc, sentDesc, connectedDesc *prometheus.Desc
}

var _ prometheus.Collector = (*Stats)(nil)

// NewStats returns zeroed counters.
func NewStats() *Stats {
	return &Stats{
		droppedDesc: prometheus.NewDesc("towerd_dnstap_dropped_total",
			"dnstap messages dropped: the buffer was full because the reader was slow, stopped or gone, or a write to it failed.", nil, nil),
		sentDesc: prometheus.NewDesc("towerd_dnstap_sent_total",
			"dnstap messages written to the reader.", nil, nil),
		connectedDesc: prometheus.NewDesc("towerd_dnstap_connected",
			"1 while towerd's dnstap writer has a reader (its Frame Streams handshake done), else 0.", nil, nil),
	}
}

func (s *Stats) setConnected(on bool) {
	if on {
		s.connected.Add(1)
	} else {
		s.connected.Add(-1)
	}
}

// Dropped is how many messages were dropped.
func (s *Stats) Dropped() uint64 { return s.dropped.Load() }

// Sent is how many messages were written.
func (s *Stats) Sent() uint64 { return s.sent.Load() }

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.droppedDesc
	ch <- s.sentDesc
	ch <- s.connectedDesc
}

// Collect implements prometheus.Collector.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.droppedDesc, prometheus.CounterValue, float64(s.Dropped()))
	ch <- prometheus.MustNewConstMetric(s.sentDesc, prometheus.CounterValue, float64(s.Sent()))
	c := s.connected.Load()
	if c > 1 {
		c = 1 // a reload's old writer still ending beside the new one
	}
	ch <- prometheus.MustNewConstMetric(s.connectedDesc, prometheus.GaugeValue, float64(c))
}
