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
	"github.com/towerd/towerd/systemd"
)

// The subcommands besides serve and check: each parses its flags and calls
// the package that does the work.

// statsCommand is `towerd stats`: it reads a running towerd's /stats and
// prints a compact view for humans, or the JSON for scripts.
func statsCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("towerd stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	adminAddr := fs.String("admin", "", "ip:port of towerd's admin server (default: [admin] listen of the config file, else "+config.DefaultAdminListen+")")
	configPath := fs.String("config", config.DefaultPath, "config file to read [admin] listen from")
	asJSON := fs.Bool("json", false, "print the /stats JSON as it is, for scripts")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "towerd stats: unexpected argument %q\n", fs.Arg(0))
		return exitConfig
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	addr, note := *adminAddr, ""
	if !set["admin"] {
		cfg, err := config.Load(*configPath, !set["config"])
		switch {
		case err != nil && set["config"]:
			fmt.Fprintf(stderr, "towerd stats: config: %v\n", err)
			return exitConfig
		case err != nil:
			// The default file may be unreadable to this user (it can hold
			// an ACL token) or broken while towerd runs on the old one:
			// try the default address, and say why if nobody is there.
			addr, note = config.DefaultAdminListen, fmt.Sprintf(" (%s unusable for [admin] listen: %s)", *configPath, admin.OneLine(err.Error()))
		case cfg.Admin.Listen == "":
			fmt.Fprintf(stderr, "towerd stats: the admin server is off in %s ([admin] listen = \"\"); name one with -admin\n", *configPath)
			return exitFail
		default:
			addr = cfg.Admin.Listen
		}
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
// leave starting and stopping to systemctl, whose commands they print.
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
	if !undo {
		upstreams = fs.String("upstream", "", "comma-separated servers for zone \".\" instead of those found in resolv.conf")
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: towerd %s [--root DIR] [--dry-run]", name)
		if !undo {
			fmt.Fprint(stderr, " [--upstream ADDRS]")
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
	header := "towerd " + name
	if *root != "/" {
		header += " under " + *root
	}
	if *dryRun {
		header += " (dry run: nothing is changed)"
	}
	fmt.Fprintln(stdout, header)

	var report *systemd.Report
	var err error
	if undo {
		report, err = systemd.Uninstall(systemd.UninstallOptions{Root: *root, DryRun: *dryRun})
	} else {
		var exe string
		if exe, err = os.Executable(); err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			fmt.Fprintf(stderr, "towerd install: finding this program's binary: %v\n", err)
			return exitFail
		}
		report, err = systemd.Install(systemd.InstallOptions{
			Root: *root, Binary: exe, Upstreams: splitList(*upstreams), DryRun: *dryRun,
			RenderConfig: func(c systemd.InstallConfig) []byte {
				return config.InstallFile(c.Listen, c.Servers, c.Source).Render()
			},
		})
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
// towerd's success rate reaches the threshold, 1 below it or when the drill
// could not run, 2 for bad flags.
func drillCommand(args []string, stdout, stderr io.Writer) int {
	var o drill.Options
	var verbose bool
	fs := flag.NewFlagSet("towerd drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.Faults.Delay, "delay", 100*time.Millisecond, "upstream delay the fault proxy adds to every query")
	fs.DurationVar(&o.Faults.Jitter, "jitter", 50*time.Millisecond, "the delay varies uniformly by ± this much")
	fs.Float64Var(&o.Faults.Loss, "loss", 0.005, "probability a packet is lost, each way (0.005 = 0.5 %)")
	fs.Float64Var(&o.Faults.ServFail, "servfail", 0, "probability the upstream answers SERVFAIL")
	fs.DurationVar(&o.Duration, "duration", 20*time.Second, "how long the clients ask, on each path (direct, then through towerd)")
	fs.IntVar(&o.Clients, "clients", 8, "simulated clients")
	fs.IntVar(&o.Rate, "rate", 20, "queries per second of each client")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "a client's wait for one reply (Go's resolver: 2s; glibc: 5s); clients never retry")
	fs.IntVar(&o.Names, "names", 50, "names in the generated zone, asked round-robin")
	fs.DurationVar(&o.TTL, "ttl", 10*time.Second, "TTL of the zone's records (short, so towerd refreshes during the run)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the fault proxy's random choices; 0 = from the clock (printed, to replay a run)")
	fs.Float64Var(&o.Threshold, "threshold", 99.9, "minimum success rate through towerd, in percent; below it towerd drill exits 1")
	fs.BoolVar(&verbose, "v", false, "log the in-process towerd's debug lines to stderr")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "towerd drill: %v\n", err)
		return exitConfig
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	default:
		err = o.Check()
	}
	if err != nil {
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
