package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// How towerd's subcommand table lists doctor.
const (
	Name     = "doctor"
	Synopsis = "[--root DIR] [-json] [-consul ADDR] [-rules FILE|DIR|URL] [flags]"
	Summary  = "audit this node for the settings that fail services together when the shared resolver is slow"
)

// Exit statuses: the highest severity found (0 clean or only notes, 1
// warnings, 2 problems), so that a deploy can be gated on it; 2 also when
// doctor could not run at all (bad flags, a root that cannot be opened).
const (
	exitClean    = 0
	exitProblems = 2
)

// Run is `towerd doctor`.
func Run(args []string, stdout, stderr io.Writer) int {
	var o Options
	fs := flag.NewFlagSet("towerd doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Root, "root", "/", "directory that stands for the node's /: a node image; its running towerd, Consul agent and /proc are then not asked unless -admin or -consul names them")
	fs.StringVar(&o.ConfigPath, "config", config.DefaultPath, "towerd's config file, as the node sees it (read under --root)")
	fs.StringVar(&o.AdminAddr, "admin", "", "ip:port of the running towerd's admin server (default: the config's admin.listen)")
	fs.StringVar(&o.ConsulAddr, "consul", "", "the local Consul agent's HTTP API, host:port, http(s)://host:port or unix:///path (default: the config's consul.address, else CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	fs.StringVar(&o.Rules, "rules", "", "Prometheus alert rules to check for the golden signals: a `FILE|DIR|URL` (a rules file or directory on this machine, or a running Prometheus)")
	fs.DurationVar(&o.Timeout, "timeout", 3*time.Second, "bound on each HTTP exchange (towerd's /stats, each Consul request, Prometheus)")
	asJSON := fs.Bool("json", false, "print the report as JSON (schema "+Schema+", documented in docs/doctor.md)")
	list := fs.Bool("list", false, "print every finding doctor can report, and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: towerd doctor %s\n", Synopsis)
		fmt.Fprint(stderr, `  prints each finding with its severity, what doctor saw, why it matters on a
  bad day and the fix; docs/doctor.md explains every one. Exit status: 0 clean
  (notes only), 1 warnings, 2 problems (or doctor could not run).
`)
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitClean
	case err != nil:
		return exitProblems
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "towerd doctor: unexpected argument %q\n", fs.Arg(0))
		return exitProblems
	case o.Timeout <= 0:
		fmt.Fprintln(stderr, "towerd doctor: -timeout must be positive")
		return exitProblems
	}
	if *list {
		if err := writeCatalog(stdout, *asJSON); err != nil {
			fmt.Fprintln(stderr, "towerd doctor:", err)
			return exitProblems
		}
		return exitClean
	}
	fs.Visit(func(f *flag.Flag) { o.ConfigMustExist = o.ConfigMustExist || f.Name == "config" })
	if abs, err := filepath.Abs(o.Root); err == nil {
		o.Root = abs
	}
	n, err := Read(context.Background(), o)
	if err != nil {
		fmt.Fprintf(stderr, "towerd doctor: %v\n", err)
		return exitProblems
	}
	r := Diagnose(n)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := r.writeJSON(enc); err != nil {
			fmt.Fprintln(stderr, "towerd doctor:", err)
			return exitProblems
		}
	} else {
		r.writeText(stdout)
	}
	return r.Summary.Exit
}
