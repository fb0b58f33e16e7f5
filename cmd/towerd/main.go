// Command towerd is a per-node DNS caching resolver: split forwarding (consul.
// to the local agent, everything else to the site's resolvers), an LRU cache
// that serves stale answers when the upstream fails, and never caches NXDOMAIN.
//
// This package only dispatches subcommands and parses their flags; the work
// is in internal/config, daemon, admin, drill and dnsmasqimport, after the
// Go toolchain's cmd/go/internal layout (issue 16).
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK     = 0
	exitFail   = 1 // a runtime failure: a port that cannot be bound, an upstream that cannot be set up
	exitConfig = 2 // bad flags or configuration
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Fprintln(stdout, "towerd", version)
			return exitOK
		case "check":
			return serveCommand(args[1:], stdout, stderr, true) // serve.go
		case "stats":
			return statsCommand(args[1:], stdout, stderr) // tools.go
		case "install", "uninstall":
			return installCommand(args[1:], stdout, stderr, args[0] == "uninstall") // tools.go
		case "import-dnsmasq":
			return importDnsmasqCommand(args[1:], stdout, stderr) // tools.go
		case "drill":
			return drillCommand(args[1:], stdout, stderr) // tools.go
		case "serve":
			args = args[1:]
		case "help":
			usage(stderr)
			return exitOK
		}
	}
	return serveCommand(args, stdout, stderr, false)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: towerd [serve] [flags]   run the resolver (the default)
       towerd check [flags]     validate the configuration and exit
       towerd stats [-admin ADDR] [--json]
                                show a running towerd's figures
       towerd install [--root DIR] [--dry-run] [--upstream ADDRS]
                                make towerd the node's resolver (files only)
       towerd uninstall [--root DIR] [--dry-run]
                                undo what install did
       towerd import-dnsmasq FILE
                                turn a dnsmasq configuration into towerd's
       towerd drill [flags]     rehearse a bad upstream day in-process (towerd drill -h)
       towerd version           print the version

Run "towerd -h" for the flags.
`)
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated already
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// defaultGCPercent is towerd's garbage collector target unless GOGC is set.
// Go's default (100) lets the heap grow to twice what is live before a
// collection; towerd's live heap is mostly its cache, so that doubled the
// memory each cached entry costs a node. At 50 an entry costs 600 bytes of
// RSS instead of 770 (100,000 names, make bench's memory scenario, where
// unbound needs 676), for about 3 % of miss throughput; cache hits allocate
// nothing, so they never trigger a collection.
const defaultGCPercent = 50

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
