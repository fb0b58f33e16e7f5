package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/doctor"
	"github.com/towerd/towerd/cmd/towerd/internal/drill"
	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// command is one subcommand: how it is called and what it does. The
// table below is the one list of subcommands: dispatch, `towerd help`,
// the completion scripts and the package's man page (cmd/towerd/dist
// reads `towerd help -json`) all come from it.
type command struct {
	name     string // "stats", or two words for a group: "cache list"
	synopsis string // arguments and flags after the name, for the usage line
	summary  string // one line, lower case, no final period
	run      func(args []string, stdout, stderr io.Writer) int
}

// commands is filled in init: some entries refer to the table itself.
var commands []command

func init() {
	commands = []command{
		{"serve", "[flags]", "run the resolver (the default when no subcommand is given)",
			func(a []string, o, e io.Writer) int { return serveCommand(a, o, e, false) }},
		{"check", "[flags]", "validate the configuration and exit",
			func(a []string, o, e io.Writer) int { return serveCommand(a, o, e, true) }},
		{"stats", "[-admin ADDR] [-json]", "show a running towerd's figures", statsCommand},
		{"reload", "[-admin ADDR]", "re-read the configuration (as SIGHUP) and say what changed", reloadCommand},
		{"flush", "NAME | -zone ZONE | -all", "forget cached answers: one name, a zone, or everything", flushCommand},
		{"cache list", "[-zone ZONE] [-stale] [-json]", "list cached answers with their state and age", cacheListCommand},
		{"cache dump", "FILE", "write the cache to FILE in the state directory's format", cacheDumpCommand},
		{"cache load", "FILE", "add the entries of a cache file to the running cache", cacheLoadCommand},
		{"lookup", "NAME [TYPE] [-json]", "ask towerd and explain the answer: zone, servers, cache, source", lookupCommand},
		{"log-queries", "[on|off]", "switch the query log of a running towerd, or show its state", logQueriesCommand},
		{"install", "[--root DIR] [--dry-run] [flags]", "make towerd the node's resolver (files only, unless --activate)", install.Run},
		{"uninstall", "[--root DIR] [--dry-run]", "undo what install did", install.RunUninstall},
		{"import-dnsmasq", "FILE", "turn a dnsmasq configuration into towerd's", dnsmasqimport.Run},
		{"drill", "[flags]", "rehearse this node's config through a bad upstream day, PASS/FAIL/INCONCLUSIVE per target", drill.Run},
		{doctor.Name, doctor.Synopsis, doctor.Summary, doctor.Run},
		{"completion", "bash|zsh", "print a shell completion script", completionCommand},
		{"version", "", "print the version", versionCommand},
		{"help", "[SUBCOMMAND]", "list the subcommands, or show one's usage and flags", helpCommand},
	}
}

// findCommand finds the entry args start with (two words for a group)
// and the arguments left for it.
func findCommand(args []string) (*command, []string) {
	if len(args) >= 2 {
		for i := range commands {
			if commands[i].name == args[0]+" "+args[1] {
				return &commands[i], args[2:]
			}
		}
	}
	for i := range commands {
		if commands[i].name == args[0] {
			return &commands[i], args[1:]
		}
	}
	return nil, nil
}

// isGroup reports whether word starts two-word subcommands ("cache").
func isGroup(word string) bool { return len(groupMembers(word)) > 0 }

// groupMembers are the second words of group's subcommands: "list dump load".
func groupMembers(group string) []string {
	var members []string
	for _, c := range commands {
		if first, second, two := strings.Cut(c.name, " "); two && first == group {
			members = append(members, second)
		}
	}
	return members
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelpFlag(args[0])) {
		return serveCommand(args, stdout, stderr, false) // `towerd -config x` is serve
	}
	if isHelpFlag(args[0]) {
		usage(stdout)
		return exitOK
	}
	cmd, rest := findCommand(args)
	if cmd == nil {
		name := args[0]
		switch {
		case isGroup(name) && len(args) == 1:
			fmt.Fprintf(stderr, "towerd %s: name a subcommand: %s\n\n", name, strings.Join(groupMembers(name), ", "))
			usage(stderr)
			return exitConfig
		case isGroup(name):
			name += " " + args[1]
		}
		fmt.Fprintf(stderr, "towerd: unknown subcommand %q%s\n\n", name, suggestion(name))
		usage(stderr)
		return exitConfig
	}
	return cmd.run(rest, stdout, stderr)
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// usage lists every subcommand, one per line: "  NAME SYNOPSIS" padded to
// a column, then the summary.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: towerd [SUBCOMMAND] [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "subcommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(strings.TrimSpace(c.name+" "+c.synopsis)))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  towerd %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "towerd help SUBCOMMAND" or "towerd SUBCOMMAND -h" for its flags; "towerd serve -h" for the daemon's.`)
}

// suggestion is ` (did you mean "stats"?)` for a name close to one in the
// table, else "".
func suggestion(name string) string {
	best, bestDist := "", 3
	for _, c := range commands {
		if d := editDistance(name, c.name); d < bestDist {
			best, bestDist = c.name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// helpCommand is `towerd help [SUBCOMMAND]`. `towerd help -json`, not
// listed, prints the table with each subcommand's flags for
// cmd/towerd/dist, which writes the man page from it.
func helpCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return exitOK
	}
	if len(args) == 1 && args[0] == "-json" {
		if err := helpDocs(stdout); err != nil {
			fmt.Fprintln(stderr, "towerd help:", err)
			return exitFail
		}
		return exitOK
	}
	if len(args) == 1 && isGroup(args[0]) {
		for _, member := range groupMembers(args[0]) {
			if code := helpCommand([]string{args[0], member}, stdout, stderr); code != exitOK {
				return code
			}
			fmt.Fprintln(stdout)
		}
		return exitOK
	}
	cmd, rest := findCommand(args)
	if cmd == nil || len(rest) > 0 || cmd.name == "help" {
		fmt.Fprintf(stderr, "towerd help: unknown subcommand %q%s\n", strings.Join(args, " "), suggestion(strings.Join(args, " ")))
		return exitConfig
	}
	fmt.Fprintf(stdout, "towerd %s: %s\n", cmd.name, cmd.summary)
	return cmd.run([]string{"-h"}, stdout, stdout)
}

// versionCommand is `towerd version`: the version the build set with
// -ldflags "-X main.version=...", "dev" otherwise.
func versionCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "towerd version: unexpected argument %q\nusage: towerd version\n", args[0])
		return exitConfig
	}
	fmt.Fprintln(stdout, "towerd", version)
	return exitOK
}
