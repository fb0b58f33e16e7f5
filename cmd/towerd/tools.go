package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/drill"
	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// The subcommands besides serve and check: each parses its flags and calls
// the package that does the work.

// statsCommand is `towerd stats`: it reads a running towerd's /stats and
// prints a compact view for humans, or the JSON for scripts.
func statsCommand(args []string, stdout, stderr io.Writer) int {
	// The admin server is found as for every control subcommand (ctl.go).
	c := newCtl("stats", "[-admin ADDR] [-json]", stderr)
	asJSON := c.fs.Bool("json", false, "print the /stats JSON as it is, for scripts")
	rest, code, done := c.parse(args)
	if done {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "towerd stats: unexpected argument %q\n", rest[0])
		return exitConfig
	}
	addr, note, code, ok := c.addr()
	if !ok {
		return code
	}

	body, err := admin.Fetch(addr)
	if err != nil {
		fmt.Fprintf(stderr, "towerd stats: %v%s\n", err, note)
		return exitFail
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return exitOK
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		fmt.Fprintf(stderr, "towerd stats: %s/stats is not towerd's stats JSON: %v\n", addr, err)
		return exitFail
	}
	admin.Render(stdout, r, time.Now())
	return exitOK
}

// installCommand is `towerd install` and, with undo, `towerd uninstall`.
// Both only edit files (under --root), print one line per decision and
// leave starting and stopping to systemctl, whose commands they print;
// install --activate runs them itself and rolls back when towerd does not
// answer.
func installCommand(args []string, stdout, stderr io.Writer, undo bool) int {
	name := "install"
	if undo {
		name = "uninstall"
	}
	fs := flag.NewFlagSet("towerd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "directory that stands for /; for tests and images")
	dryRun := fs.Bool("dry-run", false, "print what would change and change nothing")
	var upstreams *string
	var docker, activate *bool
	var activateTimeout *time.Duration
	var fromDnsmasq optionalPath
	if !undo {
		upstreams = fs.String("upstream", "", "comma-separated servers for zone \".\" (pinned) instead of following the node's DHCP-maintained resolv.conf")
		docker = fs.Bool("docker", false, "also send Docker's containers to towerd: \"dns\" in /etc/docker/daemon.json, towerd.socket on docker0's address, the bridge in allow")
		fs.Var(&fromDnsmasq, "from-dnsmasq", "import dnsmasq's configuration as towerd.toml: `[FILE|DIR]` as the node sees it (default: the files dnsmasq reads)")
		activate = fs.Bool("activate", false, "run systemctl daemon-reload and enable --now towerd.socket, wait for towerd to answer on 127.0.0.1:53, roll everything back if it does not (only with --root /)")
		activateTimeout = fs.Duration("activate-timeout", install.DefaultActivateTimeout, "how long --activate waits for towerd's first answer")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: towerd %s [--root DIR] [--dry-run]", name)
		if !undo {
			fmt.Fprint(stderr, " [--upstream ADDRS] [--docker] [--from-dnsmasq [FILE|DIR]] [--activate [--activate-timeout D]]")
		}
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	// --from-dnsmasq takes an optional FILE: "--from-dnsmasq FILE" leaves
	// FILE as the first argument, and the flags after it still count.
	if fromDnsmasq.set && fromDnsmasq.path == "" && fs.NArg() > 0 && !strings.HasPrefix(fs.Arg(0), "-") {
		fromDnsmasq.path = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return exitConfig
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "towerd %s: unexpected argument %q\n", name, fs.Arg(0))
		return exitConfig
	}
	if !filepath.IsAbs(*root) {
		abs, err := filepath.Abs(*root)
		if err != nil {
			fmt.Fprintf(stderr, "towerd %s: --root: %v\n", name, err)
			return exitConfig
		}
		*root = abs
	}
	if !undo {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		switch {
		case *activate && filepath.Clean(*root) != "/":
			fmt.Fprintf(stderr, "towerd install: --activate runs this machine's systemctl and cannot start the units of --root %s: install there without it\n", *root)
			return exitConfig
		case set["activate-timeout"] && !*activate:
			fmt.Fprintln(stderr, "towerd install: --activate-timeout without --activate has no effect")
			return exitConfig
		}
	}
	header := "towerd " + name
	if *root != "/" {
		header += " under " + *root
	}
	if *dryRun {
		header += " (dry run: nothing is changed)"
	}
	fmt.Fprintln(stdout, header)

	var report *install.Report
	var err error
	if undo {
		report, err = install.Uninstall(install.UninstallOptions{Root: *root, DryRun: *dryRun})
	} else {
		var exe string
		if exe, err = os.Executable(); err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			fmt.Fprintf(stderr, "towerd install: finding this program's binary: %v\n", err)
			return exitFail
		}
		opts := install.InstallOptions{
			Root: *root, Binary: exe, Upstreams: splitList(*upstreams), DryRun: *dryRun, Docker: *docker,
		}
		var imported *config.File
		if fromDnsmasq.set {
			f, info, code := importForInstall(*root, fromDnsmasq.path, stderr)
			if code != exitOK {
				return code
			}
			imported, opts.Imported = &f, info
		}
		if *activate {
			opts.Activate = &install.Activation{Timeout: *activateTimeout}
		}
		opts.RenderConfig = func(c install.InstallConfig) []byte {
			s := config.InstallSettings{
				Listen: append([]string{c.Listen}, c.ExtraListen...), Allow: c.Allow,
				ResolvConf: c.ResolvConf, Servers: c.Servers, Source: c.Source, DropIn: c.DropIn,
			}
			if imported != nil {
				return s.Complete(*imported).Render()
			}
			return s.File().Render()
		}
		report, err = install.Install(opts)
	}
	if report != nil {
		report.Print(stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd %s: %v\n", name, err)
		if errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(stderr, "towerd %s edits system files: run it as root (sudo towerd %s)\n", name, name)
		}
		return exitFail
	}
	return exitOK
}

// optionalPath is a flag that may stand alone (--from-dnsmasq) or take a
// value (--from-dnsmasq=FILE, or FILE as the next argument).
type optionalPath struct {
	set  bool
	path string
}

func (o *optionalPath) String() string {
	if o == nil {
		return ""
	}
	return o.path
}

func (o *optionalPath) Set(v string) error {
	o.set = true
	if v != "true" {
		o.path = v
	}
	return nil
}

// IsBoolFlag lets "--from-dnsmasq" stand alone.
func (o *optionalPath) IsBoolFlag() bool { return true }

// importForInstall reads the node's dnsmasq configuration for install
// --from-dnsmasq: path (a file or a conf-dir, as the node sees it), else
// the files dnsmasq reads there (DetectDnsmasq). The import must make a
// valid towerd.toml before install changes anything; what it does not
// carry over is listed on stderr, as import-dnsmasq does.
func importForInstall(root, path string, stderr io.Writer) (config.File, *install.ImportedConfig, int) {
	paths := []string{path}
	if path == "" {
		n, err := install.OpenNodeRoot(root)
		if err != nil {
			fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
			return config.File{}, nil, exitFail
		}
		paths = install.DetectDnsmasq(n).ConfigFiles
		n.Close()
		if len(paths) == 0 {
			fmt.Fprintln(stderr, "towerd install: --from-dnsmasq: no dnsmasq configuration found (/etc/dnsmasq.conf, /etc/dnsmasq.d); name it: --from-dnsmasq FILE")
			return config.File{}, nil, exitConfig
		}
	}
	dirs, err := dnsmasqimport.ReadUnder(root, paths)
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: %v\n", err)
		return config.File{}, nil, exitFail
	}
	source := "dnsmasq's " + strings.Join(paths, ", ")
	im := dnsmasqimport.Import(strings.Join(paths, ", "), dirs)
	im.File.Header[0] = "towerd configuration imported from " + strings.Join(paths, ", ") + " by `towerd install --from-dnsmasq`."
	info := &install.ImportedConfig{Source: source}
	for _, z := range im.File.Zones {
		if z.Name == "." && len(z.Servers) > 0 {
			info.RootServers = true
		}
	}
	// The import, completed the way install will, must be a config towerd
	// starts with.
	check := config.InstallSettings{Listen: []string{"127.0.0.1:53"}, ResolvConf: "/dev/null"}.Complete(im.File).Render()
	cfg := config.DefaultConfig()
	if err := config.Decode(check, "(imported)", &cfg); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd install: --from-dnsmasq: the imported configuration is not valid: %v\n", err)
		return config.File{}, nil, exitFail
	}
	for _, n := range im.Notes {
		fmt.Fprintln(stderr, n)
	}
	return im.File, info, exitOK
}

// importDnsmasqCommand is `towerd import-dnsmasq FILE`: the TOML goes to
// stdout, so it can be redirected into /etc/towerd/towerd.toml, and every
// directive not carried over goes to stderr with its file and line.
func importDnsmasqCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("towerd import-dnsmasq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: towerd import-dnsmasq FILE > towerd.toml")
		fmt.Fprintln(stderr, "  turns a dnsmasq configuration (and the files its conf-file= and conf-dir=")
		fmt.Fprintln(stderr, "  name) into towerd's; directives not carried over are listed on stderr, and")
		fmt.Fprintln(stderr, "  the exit status is 1 when one of them changes answers")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitConfig
	}
	path := fs.Arg(0)
	dirs, err := dnsmasqimport.Read(path)
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %v\n", err)
		return exitFail
	}
	im := dnsmasqimport.Import(path, dirs)
	out := im.File.Render()
	// The result must be a config towerd starts with; a failure here is a
	// value dnsmasq took that towerd does not, and it is named.
	var cfg = config.DefaultConfig()
	if err := config.Decode(out, "(imported)", &cfg); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprint(stdout, string(out))
		fmt.Fprintf(stderr, "towerd import-dnsmasq: the imported configuration is not valid: %v\n", err)
		return exitFail
	}
	fmt.Fprint(stdout, string(out))
	for _, n := range im.Notes {
		fmt.Fprintln(stderr, n)
	}
	if len(im.Notes) > 0 {
		fmt.Fprintf(stderr, "%d directive(s) not carried over, or only partly: see above\n", len(im.Notes))
	}
	// Dropping what only changes caching, logging or where towerd runs is
	// fine; dropping what changes an answer is not, and a script that
	// imports and installs must stop (issue 15).
	var changes []string
	for _, n := range im.Notes {
		if n.ChangesAnswers() {
			changes = append(changes, "  "+n.String())
		}
	}
	if len(changes) > 0 {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %d directive(s) dropped that change answers; towerd would answer differently from dnsmasq:\n%s\n",
			len(changes), strings.Join(changes, "\n"))
		return exitFail
	}
	return exitOK
}

// drillCommand is `towerd drill` (internal/drill). Exit status: 0 when
// every target is met, 1 when one is missed or the drill could not run, 2
// for bad flags or an unusable config file.
func drillCommand(args []string, stdout, stderr io.Writer) int {
	var o drill.Options
	var verbose bool
	fs := flag.NewFlagSet("towerd drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", config.DefaultPath, "the node's config file to rehearse; a missing default file means the built-in defaults")
	fs.DurationVar(&o.Faults.Delay, "delay", 100*time.Millisecond, "upstream delay the fault proxies add to every query")
	fs.DurationVar(&o.Faults.Jitter, "jitter", 50*time.Millisecond, "the delay varies uniformly by ± this much")
	fs.Float64Var(&o.Faults.Loss, "loss", 0.005, "probability a packet is lost, each way (0.005 = 0.5 %)")
	fs.Float64Var(&o.Faults.ServFail, "servfail", 0, "probability the upstream answers SERVFAIL")
	fs.DurationVar(&o.Warmup, "warmup", 10*time.Second, "longest the warm-up asks (each name at most 5 times)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "phase 1: how long the clients ask with jitter and loss, directly and through towerd")
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
  figure with PASS or FAIL. Exit 0: every target met; 1: a target missed or the
  drill could not run; 2: bad flags or config.
`)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitConfig
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "towerd drill: unexpected argument %q\n", fs.Arg(0))
		return exitConfig
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.Node, err = drill.LoadNode(*configPath, !set["config"]); err != nil {
		fmt.Fprintf(stderr, "towerd drill: config: %v\n", err)
		return exitConfig
	}
	if err := o.Check(); err != nil {
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitConfig
	}
	logOut := io.Discard
	if verbose {
		logOut = stderr
	}
	o.Log = newLogger(logOut, "debug", "text")
	passed, err := drill.Run(o, stdout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitFail
	case !passed:
		return exitFail
	}
	return exitOK
}
