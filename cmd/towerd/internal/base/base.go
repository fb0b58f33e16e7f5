// Package base is what towerd's subcommands share, after the Go toolchain's
// cmd/go/internal/base: the Command type that the table in package main
// lists (one value per subcommand, each defined in the package that does its
// work), and the exit codes every subcommand uses.
package base

import "io"

// Command is one subcommand: how it is called and what it does. Package
// main's table of Commands is the one list of subcommands: dispatch,
// `towerd help`, `towerd help -json` (from which the man page is written)
// and the completion scripts all read it.
type Command struct {
	// Name is "stats", or two words for a group: "cache list".
	Name string
	// Synopsis is what follows the name on the usage line: arguments and
	// flags.
	Synopsis string
	// Summary is one line, lower case, without a final period.
	Summary string
	// Run runs the subcommand with the arguments after its name and
	// returns the exit status. "-h" prints the usage and the flags
	// (flag.PrintDefaults) to stdout or stderr and returns ExitOK: the
	// completion scripts and the man page read the flags from it.
	Run func(args []string, stdout, stderr io.Writer) int
}

// Exit codes, the same for every subcommand (README, "Exit codes").
const (
	ExitOK = 0
	// ExitFail is a runtime failure: a port that cannot be bound, a daemon
	// that cannot be reached or answered an error, a target missed.
	ExitFail = 1
	// ExitConfig is bad flags, arguments or configuration.
	ExitConfig = 2
	// ExitDenied is a control subcommand run by someone who may not use
	// towerd's control socket: only root, towerd's user and the members of
	// the operators' group (towerd) may. 4 is LSB's "user had
	// insufficient privilege".
	ExitDenied = 4
)
