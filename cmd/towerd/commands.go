package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/ctl"
	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/doctor"
	"github.com/towerd/towerd/cmd/towerd/internal/drill"
	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// commands is the one list of subcommands: dispatch, `towerd help`, the
// completion scripts and the package's man page (cmd/towerd/dist reads
// `towerd help -json`) all come from it. Each entry is a base.Command; the
// work is in the package named beside it. It is filled in init: some
// entries refer to the table itself.
var commands []*base.Command

func init() {
	commands = []*base.Command{
		{Name: "serve", Synopsis: "[flags]", Summary: "run the resolver (the default when no subcommand is given)",
			Run: func(a []string, o, e io.Writer) int { return serveCommand(a, o, e, false) }},
		{Name: "check", Synopsis: "[flags]", Summary: "validate the configuration and exit",
			Run: func(a []string, o, e io.Writer) int { return serveCommand(a, o, e, true) }},
		ctl.CmdStats,
		ctl.CmdReload,
		ctl.CmdFlush,
		ctl.CmdCacheList,
		ctl.CmdCacheDump,
		ctl.CmdCacheLoad,
		ctl.CmdLookup,
		ctl.CmdLogQueries,
		{Name: "install", Synopsis: "[--root DIR] [--dry-run] [flags]", Summary: "make towerd the node's resolver (files only, unless --activate)",
			Run: install.Run},
		{Name: "uninstall", Synopsis: "[--root DIR] [--dry-run]", Summary: "undo what install did",
			Run: install.RunUninstall},
		{Name: "import-dnsmasq", Synopsis: "[--root DIR] [FILE|DIR ...]", Summary: "turn the node's dnsmasq configuration into towerd's",
			Run: dnsmasqimport.Run},
		{Name: "drill", Synopsis: "[flags]", Summary: "rehearse this node's config through a bad upstream day, PASS/FAIL/INCONCLUSIVE per target",
			Run: drill.Run},
		{Name: doctor.Name, Synopsis: doctor.Synopsis, Summary: doctor.Summary, Run: doctor.Run},
		{Name: "completion", Synopsis: "bash|zsh", Summary: "print a shell completion script",
			Run: completionCommand},
		{Name: "version", Synopsis: "", Summary: "print the version",
			Run: versionCommand},
		{Name: "help", Synopsis: "[SUBCOMMAND]", Summary: "list the subcommands, or show one's usage and flags",
			Run: helpCommand},
	}
}

// findCommand finds the entry args start with (two words for a group)
// and the arguments left for it.
func findCommand(args []string) (*base.Command, []string) {
	if len(args) >= 2 {
		for _, c := range commands {
			if c.Name == args[0]+" "+args[1] {
				return c, args[2:]
			}
		}
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c, args[1:]
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
		if first, second, two := strings.Cut(c.Name, " "); two && first == group {
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
	return cmd.Run(rest, stdout, stderr)
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
		width = max(width, len(strings.TrimSpace(c.Name+" "+c.Synopsis)))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  towerd %-*s  %s\n", width, strings.TrimSpace(c.Name+" "+c.Synopsis), c.Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "towerd help SUBCOMMAND" or "towerd SUBCOMMAND -h" for its flags; "towerd serve -h" for the daemon's.`)
}

// suggestion is ` (did you mean "stats"?)` for a name close to one in the
// table, else "".
func suggestion(name string) string {
	best, bestDist := "", 3
	for _, c := range commands {
		if d := editDistance(name, c.Name); d < bestDist {
			best, bestDist = c.Name, d
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
	if cmd == nil || len(rest) > 0 || cmd.Name == "help" {
		fmt.Fprintf(stderr, "towerd help: unknown subcommand %q%s\n", strings.Join(args, " "), suggestion(strings.Join(args, " ")))
		return exitConfig
	}
	fmt.Fprintf(stdout, "towerd %s: %s\n", cmd.Name, cmd.Summary)
	return cmd.Run([]string{"-h"}, stdout, stdout)
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
