// Package drill is `towerd drill`: it answers "will my node survive a bad
// upstream day" by rehearsing one in this process, against the node's own
// configuration. Each of the node's zones gets a loopback copy (a server of
// generated names behind the fault proxy, one proxy per server the node
// forwards to), a towerd is started through daemon.New (the same wiring as
// `towerd serve`) with the node's settings on loopback, and simulated
// clients ask it through three phases: jitter and loss, the upstream
// black-holed once the cache is warm, and the upstream back. Every target
// is printed beside its figure with PASS or FAIL, or INCONCLUSIVE when a
// timing target was missed while the CPU was busy with other work
// (machine.go, verdict.go).
package drill

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/towerd/towerd/test/faultproxy"
)

// Bounds on a drill, so a typo cannot turn it into a flood or a day-long run.
const (
	maxDuration = 10 * time.Minute // per phase
	maxQueries  = 1_000_000        // per phase and path
	maxNames    = 100_000          // over every zone
)

// Options say how hard a drill pushes and what it holds the node to;
// `towerd drill`'s flags fill them. A zero duration or target marked
// "0 = derived" is computed from the node's configuration (plan).
type Options struct {
	// Node is the configuration rehearsed (LoadNode).
	Node Node
	// Faults are what the fault proxies do to the upstreams' traffic in
	// phases 1 and 3; phase 2 drops everything.
	Faults faultproxy.Faults
	// Clients simulated, each asking Rate queries per second and waiting at
	// most Timeout for a reply (no retries).
	Clients int
	Rate    int
	Timeout time.Duration
	// Names generated, shared out over the zones and asked round-robin;
	// TTL of their records.
	Names int
	TTL   time.Duration
	// Seed of the fault proxies' random choices; 0 = from the clock.
	Seed uint64

	// Warmup is the longest the warm-up asks; Duration is phase 1's
	// length; Blackhole phase 2's (0 = derived); Recovery the longest
	// phase 3 runs (0 = derived): it ends once the node has recovered.
	Warmup, Duration, Blackhole, Recovery time.Duration

	// Threshold is the minimum success rate through towerd in each phase,
	// in percent; P99 the bound on the cached names' p99 through towerd in
	// phase 1; StaleWithin the bound on the time from the black-hole to
	// the first stale answer (0 = derived); RecoverWithin the bound on the
	// time from the upstream's return to the last answer that is not fresh
	// (0 = derived).
	Threshold                       float64
	P99, StaleWithin, RecoverWithin time.Duration

	// Log receives the in-process towerd's lines.
	Log *slog.Logger
}

// plan is a drill's phases and targets with the derived values filled in,
// and how each derived one was reached.
type plan struct {
	warmup, faults, blackhole, recoveryMax time.Duration
	staleWithin, recoverWithin             time.Duration
	staleWhy, recoverWhy                   string
	ttl                                    time.Duration // the records' TTL once the node's cache clamps it
}

// plan derives what o leaves at zero from the node's configuration. The
// first stale answer is due once a name's entry has expired (its TTL as
// the node's cache clamps it) and a client has waited out
// serve_stale.client_timeout; the last stale answer once
// serve_stale.failure_recheck has passed after the last failed refresh
// (RFC 8767: no refresh is tried during it). The black-hole lasts long
// enough to judge the first, phase 3 long enough to judge the second.
func (o *Options) plan() plan {
	cfg := o.Node.Config
	p := plan{warmup: o.Warmup, faults: o.Duration, blackhole: o.Blackhole, recoveryMax: o.Recovery,
		staleWithin: o.StaleWithin, recoverWithin: o.RecoverWithin, ttl: o.TTL.Truncate(time.Second)}
	if floor := cfg.Cache.MinTTL.Duration; floor > 0 && p.ttl < floor {
		p.ttl = floor
	}
	if ceiling := cfg.Cache.MaxTTL.Duration; ceiling > 0 && p.ttl > ceiling {
		p.ttl = ceiling
	}
	stale := cfg.ServeStale
	if p.staleWithin == 0 && stale.Enabled {
		p.staleWithin = p.ttl + stale.ClientTimeout.Duration + 2*time.Second
		p.staleWhy = fmt.Sprintf(" (TTL %v + client_timeout %v + 2s)", p.ttl, stale.ClientTimeout)
	}
	if p.staleWithin == 0 {
		p.staleWithin = p.ttl + 2*time.Second
		p.staleWhy = fmt.Sprintf(" (TTL %v + 2s; serve_stale is off in this config)", p.ttl)
	}
	if p.recoverWithin == 0 && stale.Enabled {
		p.recoverWithin = stale.FailureRecheck.Duration + 5*time.Second
		p.recoverWhy = fmt.Sprintf(" (failure_recheck %v + 5s)", stale.FailureRecheck)
	}
	if p.recoverWithin == 0 {
		p.recoverWithin = 5 * time.Second
		p.recoverWhy = " (5s; serve_stale is off in this config)"
	}
	if p.blackhole == 0 {
		p.blackhole = p.staleWithin + time.Second
	}
	if p.recoveryMax == 0 {
		p.recoveryMax = p.recoverWithin + 5*time.Second
	}
	return p
}

// Check rejects options outside the drill's bounds, naming the flag; it
// needs o.Node, since the names and the derived phases depend on it.
func (o *Options) Check() error {
	switch {
	case o.Clients < 1 || o.Rate < 1 || o.Names < 1:
		return errors.New("-clients, -rate and -names must be at least 1")
	case o.Names > maxNames:
		return fmt.Errorf("-names %d: at most %d", o.Names, maxNames)
	case o.Timeout <= 0 || o.TTL < time.Second || o.TTL > 24*time.Hour:
		return errors.New("-timeout must be above 0 and -ttl between 1s and 24h")
	case o.Faults.Loss < 0 || o.Faults.Loss > 1 || o.Faults.ServFail < 0 || o.Faults.ServFail > 1:
		return errors.New("-loss and -servfail are probabilities between 0 and 1")
	case o.Faults.Delay < 0 || o.Faults.Jitter < 0:
		return errors.New("-delay and -jitter must not be negative")
	case o.Threshold < 0 || o.Threshold > 100:
		return errors.New("-threshold is a percentage")
	case o.P99 <= 0 || o.StaleWithin < 0 || o.RecoverWithin < 0:
		return errors.New("-p99 must be above 0, -stale-within and -recover-within not negative")
	case o.Warmup <= 0 || o.Warmup > maxDuration:
		return fmt.Errorf("-warmup %v: want above 0 and at most %v", o.Warmup, maxDuration)
	case o.Blackhole < 0 || o.Recovery < 0:
		return errors.New("-blackhole and -recovery must not be negative")
	}
	if int64(o.Names) > int64(o.Clients)*int64(o.Duration/(time.Second/time.Duration(o.Rate))) {
		// Phase 1's p99 is the cached names' figure and phase 3 waits for
		// a fresh answer to every name: each must be asked again and again.
		return fmt.Errorf("-names %d: the clients ask fewer queries than that in -duration %v; raise -clients or -rate, or lower -names", o.Names, o.Duration)
	}
	p := o.plan()
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"-duration", p.faults}, {"-blackhole", p.blackhole}, {"-recovery", p.recoveryMax}} {
		if d.v > maxDuration {
			return fmt.Errorf("%s %v: at most %v (set it, or the target it is derived from)", d.flag, d.v, maxDuration)
		}
		if d.v < time.Second/time.Duration(o.Rate) {
			return fmt.Errorf("%s %v is shorter than one query of each client at -rate %d", d.flag, d.v, o.Rate)
		}
		if int64(o.Clients)*int64(o.Rate)*int64(d.v/time.Second+1) > maxQueries {
			return fmt.Errorf("-clients × -rate × %s asks more than %d queries", d.flag, maxQueries)
		}
	}
	return nil
}

// Rehearse runs a checked drill, prints its report to stdout and returns
// its verdict; err says the drill could not run.
func Rehearse(o Options, stdout io.Writer) (Verdict, error) {
	began := time.Now()
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	p := o.plan()
	l := load{clients: o.Clients, rate: o.Rate, timeout: o.Timeout, want: map[string]string{}}
	stands, err := startStandIns(o.Node.Zones, o.Names, o.TTL, o.Faults, o.Seed, l.want)
	if err != nil {
		return Fail, err
	}
	defer stands.close()
	var to paths
	for _, s := range stands {
		for _, name := range s.names {
			l.names = append(l.names, name)
			to.direct = append(to.direct, s.proxies[0].Addr())
			to.baseline = append(to.baseline, s.upstream.addr)
		}
	}
	cfg, replaced := o.Node.loopbackCopy()
	tw, err := startTowerd(cfg, stands.forwardZones(), o.Log)
	if err != nil {
		return Fail, fmt.Errorf("towerd: %w", err)
	}
	defer tw.stop()
	replaced = append([]string{fmt.Sprintf("listen %s → %s", strings.Join(o.Node.Config.Listen, ", "), tw.addr)}, replaced...)
	printHeader(stdout, o, p, stands, replaced)

	warmed := l.warm(tw.addr, p.warmup)
	to.through = tw.addr
	r := runPhases(l, p, stands, to, liveProc)

	fmt.Fprintln(stdout)
	printTable(stdout, []pathSummary{r.baseline, r.faultsDirect, r.faultsThrough, r.blackhole, r.back})
	fmt.Fprintln(stdout)
	for i, w := range r.cpu {
		label := ""
		if i == 0 {
			label = "machine"
		}
		fmt.Fprintf(stdout, "%-9s %-18s %v\n", label, w.phase, w)
	}
	st := stands.stats()
	fmt.Fprintf(stdout, "\nfault proxies: %d queries, %d forwarded, %d lost queries, %d lost replies, %d SERVFAIL, %d black-holed\n\n",
		st.Queries, st.Forwarded, st.LostQueries, st.LostReplies, st.ServFails, st.Blackholed)

	v := printTargets(stdout, r.targets(o, p, warmed))
	fmt.Fprintf(stdout, "drill took %v\n", time.Since(began).Round(100*time.Millisecond))
	return v, nil
}
