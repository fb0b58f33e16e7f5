package drill

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Verdict is a drill's outcome, and each target's.
type Verdict int

const (
	// Pass: every target met.
	Pass Verdict = iota
	// Inconclusive: no target failed, but a timing target was missed while
	// the machine's CPU was busy with other work, so the miss says nothing
	// about towerd (issue 25); rerun when the node is quieter.
	Inconclusive
	// Fail: a target was missed on a machine that was not busy, or missed
	// in a way contention does not explain (a wrong answer, a SERVFAIL, a
	// figure never seen).
	Fail
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "PASS"
	case Inconclusive:
		return "INCONCLUSIVE"
	}
	return "FAIL"
}

// baselineSlack bounds how much slower than the baseline towerd's median
// may be for a p99 missed on a busy machine to be the machine's: measured
// side by side on a hog-loaded machine the two track each other, a cache
// hit being less work than the baseline's answer (docs/operating.md has the
// figures), so a towerd far behind is slow itself. Medians, not the p99s:
// a tail is a few preemptions, which one path may catch and the other not.
const baselineSlack = 4

// target is one line of the verdict: what is measured, its figure, the
// goal it is held to, its verdict, and for a missed one why.
type target struct {
	what, figure, goal string
	verdict            Verdict
	why                string
}

// warmResult is the warm-up's outcome: names answered of all, and how long
// it took.
type warmResult struct {
	answered, names int
	took            time.Duration
}

// met sets t's verdict for a target that was met or, on a miss, for one
// contention cannot explain.
func (t *target) met(ok bool) {
	t.verdict = Pass
	if !ok {
		t.verdict = Fail
	}
}

// missedWhileBusy judges a missed target that contention can explain:
// INCONCLUSIVE when the CPU was busy during w (or evidence, the baseline
// in the same seconds, says the machine was slow), FAIL otherwise; why
// names the figures either way, so a FAIL also says the machine was quiet.
func (t *target) missedWhileBusy(w cpuWindow, evidence string) {
	t.verdict = Fail
	switch {
	case w.ownDoing():
		t.why = fmt.Sprintf("the drill itself kept the CPUs busy in phase %s (%v): lower -clients or -rate, or towerd burns CPU", w.phase, w)
	case w.busy() || evidence != "":
		t.verdict = Inconclusive
		t.why = fmt.Sprintf("the machine was busy in phase %s: %v", w.phase, w)
		if evidence != "" {
			t.why += "; " + evidence
		}
	default:
		t.why = fmt.Sprintf("the machine was not busy in phase %s: %v", w.phase, w)
	}
}

// missedBecause is missedWhileBusy for a miss whose cause, named first in
// the reason, contention explains.
func (t *target) missedBecause(cause string, w cpuWindow) {
	t.missedWhileBusy(w, "")
	if t.verdict == Inconclusive {
		t.why = cause + ", and " + t.why
	}
}

// timing is a target whose figure is a time held under within: unseen
// (FAIL) when the time was never seen, missedWhileBusy when it is late.
func timing(what, unseen string, took time.Duration, seen bool, within time.Duration, why string, w cpuWindow) target {
	t := target{what: what, figure: unseen, goal: fmt.Sprintf("under %v%s", within, why), verdict: Fail}
	if seen {
		t.figure = formatLatency(took)
		t.met(true)
		if took >= within {
			t.missedWhileBusy(w, "")
		}
	}
	return t
}

// targets holds the drill's figures to their targets, in the order printed.
// Missed outcomes (a name never answered, a SERVFAIL, a wrong answer, a
// stale answer or a recovery never seen) FAIL; missed timings (a latency,
// a time, a client timeout) are judged against the phase's CPU figures.
func (r phases) targets(o Options, p plan, w warmResult) []target {
	warm := target{
		what:   "names answered in the warm-up",
		figure: fmt.Sprintf("%d/%d", w.answered, w.names),
		goal:   fmt.Sprintf("all, asked for at most %v (took %s)", p.warmup, formatLatency(w.took)),
	}
	warm.met(w.answered == w.names)
	targets := []target{warm}
	for i, row := range []pathSummary{r.faultsThrough, r.blackhole, r.back} {
		t := target{
			what:   "success through towerd, " + row.phase,
			figure: fmt.Sprintf("%.3f%%", row.successPercent),
			goal:   fmt.Sprintf("at least %.3f%% (-threshold)", o.Threshold),
		}
		ok := row.queries > 0 && row.successPercent >= o.Threshold
		onlyTimeouts := row.queries > 0 && row.servfail == 0 && row.other == 0
		switch {
		case ok || !onlyTimeouts:
			t.met(ok)
		case i == 0 && r.baseline.timeouts > 0:
			t.missedWhileBusy(r.cpu[i], fmt.Sprintf("every miss a client timeout, and the baseline timed out %d times in the same seconds", r.baseline.timeouts))
		default:
			t.missedBecause("every miss a client timeout", r.cpu[i])
		}
		targets = append(targets, t)
	}
	targets = append(targets, r.p99Target(o))
	after, seen := r.stale.after()
	stale := timing("first stale answer after the black-hole", "none", after, seen, p.staleWithin, p.staleWhy, r.cpu[1])
	took, recovered := r.recovered.recovery()
	recovery := timing("recovery after the upstream returns", "not seen", took, recovered, p.recoverWithin, p.recoverWhy, r.cpu[2])
	switch {
	case recovered:
	case r.recovered.lastBadTimedOut:
		// Not recovered because answers kept coming too late, not stale.
		recovery.missedBecause("the last answer that was not fresh was a client timeout", r.cpu[2])
	case r.recovered.freshSeen > 0:
		// Fresh answers came, stale ones still among them when the phase
		// ended: recovering, but slower than the phase (-recovery). On a
		// CPU taken by other work the node learns of the upstream's return
		// late (its probes' replies read past their timeout), so this is a
		// timing (issue 33: TestDrillUnderCPUHog's false "not seen"); a
		// phase without one fresh answer stays a FAIL.
		recovery.missedBecause(fmt.Sprintf("still recovering when the phase ended (%d fresh answers, %d of %d names fresh since the last stale one)",
			r.recovered.freshSeen, r.recovered.count, r.recovered.names), r.cpu[2])
	}
	return append(targets, stale, recovery)
}

// p99Target holds phase 1's p99 through towerd to -p99. On a miss, the
// baseline (the same clients asking the stand-ins' servers, which answer
// from memory, in the same seconds) tells the machine's share from
// towerd's: a baseline that missed the target too is evidence the machine
// was slow, and a towerd whose median is more than baselineSlack × the
// baseline's (plus the target) is slow itself, busy machine or not.
func (r phases) p99Target(o Options) target {
	through, base := r.faultsThrough, r.baseline
	t := target{
		what:   "cached p99 through towerd, " + phaseFaults,
		figure: formatLatency(through.p99),
		goal:   fmt.Sprintf("under %v (-p99; baseline %s, direct %s)", o.P99, formatLatency(base.p99), formatLatency(r.faultsDirect.p99)),
	}
	ok := through.queries > 0 && through.p99 < o.P99
	t.met(ok)
	if ok || through.queries == 0 {
		return t
	}
	if limit := baselineSlack*base.p50 + o.P99; base.queries > 0 && through.p50 > limit {
		t.why = fmt.Sprintf("towerd's median %s is over %d × the baseline's %s + %v in the same seconds: towerd is slow, not the machine (phase %s: %v)",
			formatLatency(through.p50), baselineSlack, formatLatency(base.p50), o.P99, r.cpu[0].phase, r.cpu[0])
		return t
	}
	evidence := fmt.Sprintf("the baseline's p99 %s", formatLatency(base.p99))
	if base.p99 < o.P99 {
		evidence = "" // the baseline met the target: only the CPU figures can excuse the miss
	}
	t.missedWhileBusy(r.cpu[0], evidence)
	if t.verdict == Inconclusive && evidence == "" {
		t.why += fmt.Sprintf("; the baseline's p99 %s", formatLatency(base.p99))
	}
	return t
}

// verdictWidth fits INCONCLUSIVE.
const verdictWidth = len("INCONCLUSIVE")

// printTargets prints every target beside its figure with its verdict, a
// missed one's reason under it, and a last line with the drill's verdict,
// which it returns: FAIL when a target failed, else INCONCLUSIVE when one
// could not be judged, else PASS.
func printTargets(w io.Writer, targets []target) Verdict {
	fmt.Fprintf(w, "%-46s %-10s %-*s %s\n", "target", "figure", verdictWidth, "verdict", "goal")
	var failed, unjudged []string
	for _, t := range targets {
		fmt.Fprintf(w, "%-46s %-10s %-*s %s\n", t.what, t.figure, verdictWidth, t.verdict, t.goal)
		if t.why != "" {
			fmt.Fprintf(w, "%-46s %s\n", "", t.why)
		}
		switch t.verdict {
		case Fail:
			failed = append(failed, t.what)
		case Inconclusive:
			unjudged = append(unjudged, t.what)
		}
	}
	fmt.Fprintln(w)
	switch {
	case len(failed) > 0:
		fmt.Fprintf(w, "FAIL: %d of %d targets missed: %s", len(failed), len(targets), strings.Join(failed, "; "))
		if len(unjudged) > 0 {
			fmt.Fprintf(w, " (and %d inconclusive: %s)", len(unjudged), strings.Join(unjudged, "; "))
		}
		fmt.Fprintln(w)
		return Fail
	case len(unjudged) > 0:
		fmt.Fprintf(w, "INCONCLUSIVE: the machine was busy: %d of %d targets missed while other work held the CPU: %s; the others met; rerun when the node is quieter\n",
			len(unjudged), len(targets), strings.Join(unjudged, "; "))
		return Inconclusive
	}
	fmt.Fprintf(w, "PASS: every target met (%d)\n", len(targets))
	return Pass
}
