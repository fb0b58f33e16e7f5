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

// warmResult is the warm-up's outcome: names answered of all, and how long
// it took.
type warmResult struct {
	answered, names int
	took            time.Duration
}

// targets holds the drill's figures to their targets, in the order printed.
func (r phases) targets(o Options, p plan, w warmResult) []target {
	targets := []target{{
		what:   "names answered in the warm-up",
		figure: fmt.Sprintf("%d/%d", w.answered, w.names),
		goal:   fmt.Sprintf("all, asked for at most %v (took %s)", p.warmup, formatLatency(w.took)),
		met:    w.answered == w.names,
	}}
	for _, row := range []pathSummary{r.faultsThrough, r.blackhole, r.back} {
		targets = append(targets, target{
			what:   "success through towerd, " + row.phase,
			figure: fmt.Sprintf("%.3f%%", row.successPercent),
			goal:   fmt.Sprintf("at least %.3f%% (-threshold)", o.Threshold),
			met:    row.queries > 0 && row.successPercent >= o.Threshold,
		})
	}
	targets = append(targets, target{
		what:   "cached p99 through towerd, " + phaseFaults,
		figure: formatLatency(r.faultsThrough.p99),
		goal:   fmt.Sprintf("under %v (-p99; direct: %s)", o.P99, formatLatency(r.faultsDirect.p99)),
		met:    r.faultsThrough.queries > 0 && r.faultsThrough.p99 < o.P99,
	})
	stale := target{what: "first stale answer after the black-hole", figure: "none",
		goal: fmt.Sprintf("under %v%s", p.staleWithin, p.staleWhy)}
	if after, ok := r.stale.after(); ok {
		stale.figure, stale.met = formatLatency(after), after < p.staleWithin
	}
	recovery := target{what: "recovery after the upstream returns", figure: "not seen",
		goal: fmt.Sprintf("under %v%s", p.recoverWithin, p.recoverWhy)}
	if took, ok := r.recovered.recovery(); ok {
		recovery.figure, recovery.met = formatLatency(took), took < p.recoverWithin
	}
	return append(targets, stale, recovery)
}
