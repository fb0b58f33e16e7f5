package drill

import (
	"context"
	"sync"
	"time"
)

// Phase names, as the table and the targets print them.
const (
	phaseFaults    = "1 jitter and loss"
	phaseBlackhole = "2 upstream down"
	phaseBack      = "3 upstream back"
)

// warmupTries bounds the warm-up's attempts per name, and warmupParallel
// the names asked at once.
const (
	warmupTries    = 5
	warmupParallel = 64
)

// warm asks every name through towerd until it answers fresh, in rounds
// over the names still unanswered: at most warmupTries rounds, and no
// query starts after budget has passed, so a lossy or dead upstream makes
// a short, incomplete warm-up (reported as such) and never a stuck drill.
func (l load) warm(server string, budget time.Duration) warmResult {
	start := time.Now()
	deadline := start.Add(budget)
	pending := make([]int, len(l.names))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; round < warmupTries && len(pending) > 0 && time.Now().Before(deadline); round++ {
		var mu sync.Mutex
		var failed []int
		var wg sync.WaitGroup
		limit := make(chan struct{}, warmupParallel)
		for _, i := range pending {
			limit <- struct{}{}
			if !time.Now().Before(deadline) {
				<-limit
				mu.Lock()
				failed = append(failed, i)
				mu.Unlock()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-limit }()
				if !l.ask(server, i).fresh() {
					mu.Lock()
					failed = append(failed, i)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		pending = failed
	}
	return warmResult{answered: len(l.names) - len(pending), names: len(l.names), took: time.Since(start)}
}

// firstStale watches the black-hole phase for the first stale answer.
type firstStale struct {
	start time.Time
	at    time.Time // zero until a stale answer came
}

func (f *firstStale) see(o outcome) {
	if o.stale && (f.at.IsZero() || o.at.Before(f.at)) {
		f.at = o.at
	}
}

// after says how long after the black-hole began the first stale answer
// came, and whether one did.
func (f *firstStale) after() (time.Duration, bool) {
	if f.at.IsZero() {
		return 0, false
	}
	return f.at.Sub(f.start), true
}

// recoveryWatch follows the answers once the upstream is back. The node has
// recovered when every name has been answered fresh since the last answer
// that was not (stale, failed or timed out); the recovery time runs from
// the upstream's return to that last answer. The watch asks the clients to
// stop once the state has held for one client timeout, so a query still in
// flight when it was reached has come back and counted.
type recoveryWatch struct {
	back    time.Time
	names   int
	hold    time.Duration
	stop    func()
	epoch   int       // bumped at every answer that is not fresh
	lastBad time.Time // when it came
	// lastBadTimedOut says it was a client timeout, which a busy machine
	// explains, rather than a stale or failed answer, which it does not.
	lastBadTimedOut bool
	freshIn         []int     // epoch+1 of name i's last fresh answer; 0 = none
	count           int       // names answered fresh since the last bad answer
	heldAt          time.Time // when count reached names; zero while it has not
	// freshSeen counts the fresh answers of the phase: any says the node
	// was recovering, whether or not it got there (issue 33).
	freshSeen int
}

func newRecoveryWatch(back time.Time, names int, hold time.Duration, stop func()) *recoveryWatch {
	return &recoveryWatch{back: back, names: names, hold: hold, stop: stop, freshIn: make([]int, names)}
}

// see takes one outcome, in the order they come in (load.run serializes).
func (w *recoveryWatch) see(o outcome) {
	if !o.fresh() {
		w.epoch++
		w.lastBad, w.lastBadTimedOut, w.count, w.heldAt = o.at, o.timedOut, 0, time.Time{}
		return
	}
	w.freshSeen++
	if w.freshIn[o.name] != w.epoch+1 {
		w.freshIn[o.name] = w.epoch + 1
		w.count++
		if w.count == w.names {
			w.heldAt = o.at
		}
	}
	if !w.heldAt.IsZero() && o.at.Sub(w.heldAt) >= w.hold {
		w.stop()
	}
}

// recovery says how long after the upstream's return the last answer that
// was not fresh came (0 when there was none), and whether the node had
// recovered by the end of the phase.
func (w *recoveryWatch) recovery() (time.Duration, bool) {
	if w.count < w.names {
		return 0, false
	}
	if w.lastBad.IsZero() {
		return 0, true
	}
	return w.lastBad.Sub(w.back), true
}

// phases runs the three phases after the warm-up: the upstream with the
// drill's faults (clients asking the stand-ins directly, through towerd
// and, for the baseline, the stand-ins' servers without the proxies, all
// at the same time), black-holed, and back with the same faults. It keeps
// each phase's CPU figures.
type phases struct {
	baseline, faultsDirect, faultsThrough, blackhole, back pathSummary
	cpu                                                    [3]cpuWindow // phases 1, 2, 3
	stale                                                  firstStale
	recovered                                              *recoveryWatch
}

// paths are the addresses the clients ask, per name.
type paths struct {
	direct   []string // the name's zone's first fault proxy
	baseline []string // the zone's stand-in server, without a proxy
	through  string   // the towerd under test
}

func runPhases(l load, p plan, stands standIns, to paths, proc procFiles) phases {
	var r phases
	viaTowerd := func(int) string { return to.through }
	ctx := context.Background()

	began := proc.sample()
	var wg sync.WaitGroup
	var directOuts, baseOuts []outcome
	var directAsked, baseAsked time.Duration
	wg.Add(2)
	go func() {
		defer wg.Done()
		directOuts, directAsked = l.run(ctx, p.faults, func(i int) string { return to.direct[i] }, nil)
	}()
	go func() {
		defer wg.Done()
		baseOuts, baseAsked = l.run(ctx, p.faults, func(i int) string { return to.baseline[i] }, nil)
	}()
	throughOuts, asked := l.run(ctx, p.faults, viaTowerd, nil)
	wg.Wait()
	ended := proc.sample()
	r.cpu[0] = proc.window(phaseFaults, began, ended)
	r.baseline = summarizePath(phaseFaults, "baseline", baseAsked, baseOuts)
	r.faultsDirect = summarizePath(phaseFaults, "direct", directAsked, directOuts)
	r.faultsThrough = summarizePath(phaseFaults, "through towerd", asked, throughOuts)

	stands.setBlackhole(true)
	began = proc.sample()
	r.stale.start = began.at
	outs, asked := l.run(ctx, p.blackhole, viaTowerd, r.stale.see)
	ended = proc.sample()
	r.cpu[1] = proc.window(phaseBlackhole, began, ended)
	r.blackhole = summarizePath(phaseBlackhole, "through towerd", asked, outs)

	stands.setBlackhole(false)
	began = proc.sample()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.recovered = newRecoveryWatch(began.at, len(l.names), l.timeout, cancel)
	outs, asked = l.run(ctx, p.recoveryMax, viaTowerd, r.recovered.see)
	r.cpu[2] = proc.window(phaseBack, began, proc.sample())
	r.back = summarizePath(phaseBack, "through towerd", asked, outs)
	return r
}
