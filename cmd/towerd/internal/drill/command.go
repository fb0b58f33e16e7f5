package drill

// The subcommand `towerd drill`: its flags fill Options.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// exitInconclusive: no target failed, but one was missed while the
// machine was too busy to judge it (issue 25); the drill's own, beside
// base's codes.
const exitInconclusive = 3

// Run is `towerd drill`. Exit status: 0 when every target is met, 1 when
// one is missed or the drill could not run, 2 for bad flags or an unusable
// config file, 3 when no target failed but a timing target was missed
// while the machine was busy (inconclusive).
func Run(args []string, stdout, stderr io.Writer) int {
	var o Options
	var verbose bool
	fs := flag.NewFlagSet("towerd drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", config.DefaultPath, "the node's config file to rehearse; a missing default file means the built-in defaults")
	fs.DurationVar(&o.Faults.Delay, "delay", 100*time.Millisecond, "upstream delay the fault proxies add to every query")
	fs.DurationVar(&o.Faults.Jitter, "jitter", 50*time.Millisecond, "the delay varies uniformly by ± this much")
	fs.Float64Var(&o.Faults.Loss, "loss", 0.005, "probability a packet is lost, each way (0.005 = 0.5 %)")
	fs.Float64Var(&o.Faults.ServFail, "servfail", 0, "probability the upstream answers SERVFAIL")
	fs.DurationVar(&o.Warmup, "warmup", 10*time.Second, "longest the warm-up asks (each name at most 5 times)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "phase 1: how long the clients ask with jitter and loss: directly, through towerd, and the baseline (the stand-ins without faults)")
	fs.DurationVar(&o.Blackhole, "blackhole", 0, "phase 2: how long the upstream is black-holed (0 = -stale-within + 1s)")
	fs.DurationVar(&o.Recovery, "recovery", 0, "phase 3: longest the clients ask once the upstream is back; it ends once the node has recovered (0 = -recover-within + 5s)")
	fs.IntVar(&o.Clients, "clients", 8, "simulated clients")
	fs.IntVar(&o.Rate, "rate", 20, "queries per second of each client")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "a client's wait for one reply (Go's resolver: 2s; glibc: 5s); clients never retry")
	fs.IntVar(&o.Names, "names", 24, "names generated, shared out over the node's zones (at least one each) and asked round-robin")
	fs.DurationVar(&o.TTL, "ttl", 5*time.Second, "TTL of the generated records (short, so towerd refreshes, and serves stale in phase 2)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the fault proxies' random choices; 0 = from the clock (printed, to replay a run)")
	fs.Float64Var(&o.Threshold, "threshold", 99.9, "target: minimum success rate through towerd in each phase, in percent")
	fs.DurationVar(&o.P99, "p99", 5*time.Millisecond, "target: p99 through towerd of the cached names in phase 1 stays under this")
	fs.DurationVar(&o.StaleWithin, "stale-within", 0, "target: the first stale answer comes this soon after the black-hole begins (0 = TTL + serve_stale.client_timeout + 2s)")
	fs.DurationVar(&o.RecoverWithin, "recover-within", 0, "target: every answer is fresh again this soon after the upstream returns (0 = serve_stale.failure_recheck + 5s)")
	fs.BoolVar(&verbose, "v", false, "log the in-process towerd's debug lines to stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: towerd drill [-config FILE] [flags]
  rehearses this node's config in-process on loopback (never its port 53, admin
  port, saved cache or Consul agent): a warm-up, then 1 jitter and loss, 2 the
  upstream black-holed, 3 the upstream back; each target is printed beside its
  figure with PASS, FAIL or INCONCLUSIVE (a timing target missed while other
  work held the CPU; the figures are printed). Exit 0: every target met; 1: a
  target missed or the drill could not run; 2: bad flags or config; 3:
  inconclusive, no target failed but the machine was too busy to judge one.
`)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return base.ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return base.ExitConfig
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "towerd drill: unexpected argument %q\n", fs.Arg(0))
		return base.ExitConfig
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Node, err = LoadNode(*configPath, !set["config"]); err != nil {
		fmt.Fprintf(stderr, "towerd drill: config: %v\n", err)
		return base.ExitConfig
	}
	if err := o.Check(); err != nil {
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return base.ExitConfig
	}
	logOut := io.Discard
	if verbose {
		logOut = stderr
	}
	o.Log = slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	verdict, err := Rehearse(o, stdout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return base.ExitFail
	case verdict == Fail:
		return base.ExitFail
	case verdict == Inconclusive:
		return exitInconclusive
	}
	return base.ExitOK
}
