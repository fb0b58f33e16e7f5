package drill

import (
	"fmt"
	"io"
	"slices"
	"strings"
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

// target is one line of the verdict: what is measured, its figure, the
// goal it is held to, and whether it met it.
type target struct {
	what, figure, goal string
	met                bool
}

// printTargets prints every target beside its figure with PASS or FAIL and
// a last line with the verdict; it reports whether every target was met.
func printTargets(w io.Writer, targets []target) bool {
	fmt.Fprintf(w, "%-46s %-10s %-7s %s\n", "target", "figure", "verdict", "goal")
	var missed []string
	for _, t := range targets {
		verdict := "PASS"
		if !t.met {
			verdict = "FAIL"
			missed = append(missed, t.what)
		}
		fmt.Fprintf(w, "%-46s %-10s %-7s %s\n", t.what, t.figure, verdict, t.goal)
	}
	fmt.Fprintln(w)
	if len(missed) > 0 {
		fmt.Fprintf(w, "FAIL: %d of %d targets missed: %s\n", len(missed), len(targets), strings.Join(missed, "; "))
		return false
	}
	fmt.Fprintf(w, "PASS: every target met (%d)\n", len(targets))
	return true
}

// successTarget holds one phase's success through towerd to the threshold.
func successTarget(r pathSummary, threshold float64) target {
	return target{
		what:   "success through towerd, " + r.phase,
		figure: fmt.Sprintf("%.3f%%", r.successPercent),
		goal:   fmt.Sprintf("at least %.3f%% (-threshold)", threshold),
		met:    r.queries > 0 && r.successPercent >= threshold,
	}
}
