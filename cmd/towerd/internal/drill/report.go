package drill

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// pathSummary is one row of the drill's table: one phase on one path.
type pathSummary struct {
	phase, path                     string
	asked                           time.Duration // how long the clients asked
	queries, ok, timeouts, servfail int
	other, stale                    int
	p50, p99, max                   time.Duration
	successPercent                  float64
}

func summarizePath(phase, path string, asked time.Duration, outs []outcome) pathSummary {
	s := pathSummary{phase: phase, path: path, asked: asked, queries: len(outs)}
	lat := make([]time.Duration, 0, len(outs))
	for _, o := range outs {
		lat = append(lat, o.latency)
		switch {
		case o.ok:
			s.ok++
			if o.stale {
				s.stale++
			}
		case o.timedOut:
			s.timeouts++
		case o.servFail:
			s.servfail++
		default:
			s.other++
		}
	}
	if s.queries > 0 {
		s.successPercent = 100 * float64(s.ok) / float64(s.queries)
		slices.Sort(lat)
		s.p50, s.p99, s.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	}
	return s
}

// percentile of sorted values, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (len(sorted)*p + 99) / 100
	return sorted[max(rank, 1)-1]
}

// formatLatency prints a latency so that time.ParseDuration reads it back.
func formatLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func printTable(w io.Writer, rows []pathSummary) {
	fmt.Fprintf(w, "%-18s %7s  %-15s %7s %9s %9s %9s %9s %8s %8s %5s %5s\n",
		"phase", "asked", "path", "queries", "success", "p50", "p99", "max", "timeouts", "servfail", "other", "stale")
	for _, r := range rows {
		fmt.Fprintf(w, "%-18s %7s  %-15s %7d %8.3f%% %9s %9s %9s %8d %8d %5d %5d\n",
			r.phase, r.asked.Round(100*time.Millisecond), r.path, r.queries, r.successPercent,
			formatLatency(r.p50), formatLatency(r.p99), formatLatency(r.max), r.timeouts, r.servfail, r.other, r.stale)
	}
}
