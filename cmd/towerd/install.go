package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/towerd/towerd/systemd"
)

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
		fmt.Fprintln(stderr, "  name) into towerd's; directives not carried over are listed on stderr")
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
	dirs, err := readDnsmasq(path)
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %v\n", err)
		return exitFail
	}
	im := importDnsmasq(path, dirs)
	out := im.render()
	// The result must be a config towerd starts with; a failure here is a
	// value dnsmasq took that towerd does not, and it is named.
	var cfg = DefaultConfig()
	if err := decodeConfig(out, "(imported)", &cfg); err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprint(stdout, string(out))
		fmt.Fprintf(stderr, "towerd import-dnsmasq: the imported configuration is not valid: %v\n", err)
		return exitFail
	}
	fmt.Fprint(stdout, string(out))
	for _, n := range im.notes {
		fmt.Fprintln(stderr, n)
	}
	if len(im.notes) > 0 {
		fmt.Fprintf(stderr, "%d directive(s) not carried over, or only partly: see above\n", len(im.notes))
	}
	return exitOK
}
