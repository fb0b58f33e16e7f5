package install

// The subcommands `towerd install` and `towerd uninstall`: their flags,
// and the report printed for people.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
)

// Run is `towerd install`; RunUninstall is `towerd uninstall`. Both only
// edit files (under --root), print one line per decision and leave
// starting and stopping to systemctl, whose commands they print; install
// --activate runs them itself and rolls back when towerd does not answer.
func Run(args []string, stdout, stderr io.Writer) int { return command(args, stdout, stderr, false) }

// RunUninstall is `towerd uninstall` (Run).
func RunUninstall(args []string, stdout, stderr io.Writer) int {
	return command(args, stdout, stderr, true)
}

func command(args []string, stdout, stderr io.Writer, undo bool) int {
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
		activateTimeout = fs.Duration("activate-timeout", DefaultActivateTimeout, "how long --activate waits for towerd's first answer")
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
			return base.ExitOK
		}
		return base.ExitConfig
	}
	// --from-dnsmasq takes an optional FILE: "--from-dnsmasq FILE" leaves
	// FILE as the first argument, and the flags after it still count.
	if fromDnsmasq.set && fromDnsmasq.path == "" && fs.NArg() > 0 && !strings.HasPrefix(fs.Arg(0), "-") {
		fromDnsmasq.path = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return base.ExitConfig
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "towerd %s: unexpected argument %q\n", name, fs.Arg(0))
		return base.ExitConfig
	}
	if !filepath.IsAbs(*root) {
		abs, err := filepath.Abs(*root)
		if err != nil {
			fmt.Fprintf(stderr, "towerd %s: --root: %v\n", name, err)
			return base.ExitConfig
		}
		*root = abs
	}
	if !undo {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		switch {
		case *activate && filepath.Clean(*root) != "/":
			fmt.Fprintf(stderr, "towerd install: --activate runs this machine's systemctl and cannot start the units of --root %s: install there without it\n", *root)
			return base.ExitConfig
		case set["activate-timeout"] && !*activate:
			fmt.Fprintln(stderr, "towerd install: --activate-timeout without --activate has no effect")
			return base.ExitConfig
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

	var report *Report
	var err error
	if undo {
		report, err = Uninstall(UninstallOptions{Root: *root, DryRun: *dryRun})
	} else {
		var exe string
		if exe, err = os.Executable(); err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			fmt.Fprintf(stderr, "towerd install: finding this program's binary: %v\n", err)
			return base.ExitFail
		}
		opts := InstallOptions{
			Root: *root, Binary: exe, Upstreams: splitServers(*upstreams), DryRun: *dryRun, Docker: *docker,
		}
		if fromDnsmasq.set {
			var code int
			if opts.Import, code = importForInstall(*root, fromDnsmasq.path, stderr); code != base.ExitOK {
				return code
			}
		}
		if *activate {
			opts.Activate = &Activation{Timeout: *activateTimeout}
		} else if *root == "/" && !*dryRun && systemdRunning() {
			// resolv.conf is about to name 127.0.0.1: on a node whose systemd
			// runs, leaving towerd to the next: lines would leave the node
			// without DNS until they ran, and for good if towerd then failed
			// to start (issue 32). So install starts it, and puts everything
			// back when it does not answer, as --activate does.
			fmt.Fprintln(stdout, "systemd runs this node: install starts towerd and puts the node back if it does not answer (as --activate)")
			opts.Activate = &Activation{Timeout: *activateTimeout, Implied: true}
		}
		report, err = Install(opts)
	}
	if report != nil {
		report.Print(stdout, stderr, err != nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd %s: %v\n", name, err)
		if errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(stderr, "towerd %s edits system files: run it as root (sudo towerd %s)\n", name, name)
		}
		return base.ExitFail
	}
	return base.ExitOK
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

// splitServers splits --upstream's comma-separated value, dropping blank
// items; Install normalizes each (upstream.NormalizeAddress trims it).
func splitServers(s string) []string {
	return slices.DeleteFunc(strings.Split(s, ","), func(item string) bool { return strings.TrimSpace(item) == "" })
}

// systemdRunning reports whether systemd is this machine's init, as
// sd_booted(3) tells it.
func systemdRunning() bool {
	info, err := os.Stat("/run/systemd/system")
	return err == nil && info.IsDir()
}
