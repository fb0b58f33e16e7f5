package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// command is one subcommand of towerd as its own help describes it: the
// man page and both shell completions are written from these, so a
// subcommand that `towerd help` lists is documented and completed without
// another list to keep in step.
type command struct {
	Name     string
	Usage    string   // the synopsis line(s) of `towerd help`, without "usage:"
	Summary  string   // the text beside or under the synopsis
	Words    []string // fixed words it takes first: "cache list|dump|load", "log-queries on|off"
	Args     []string // placeholders it takes: FILE, NAME, TYPE
	Flags    []flagHelp
	FlagHelp string // its `-h` output, verbatim
}

// flagHelp is one flag as Go's flag.PrintDefaults prints it.
type flagHelp struct {
	Name  string
	Value string // "string", "duration", ... ; "" for a boolean
	Usage string
}

var (
	// "usage: towerd [serve] [flags]   run ...", "       towerd stats [-admin ADDR]".
	synopsisLine = regexp.MustCompile(`^\s*(?:usage:\s+)?towerd\s+(\S+)(.*)$`)
	commandName  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	fixedWords   = regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$`)
	placeholder  = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	// Go's flag.PrintDefaults: "  -name type" then "    \tusage", or
	// "  -x\tusage" for a one-letter boolean.
	flagLine      = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: (\S+))?$`)
	shortFlagLine = regexp.MustCompile(`^  -([A-Za-z0-9])\t(.*)$`)
	twoSpaces     = regexp.MustCompile(`\s{2,}`)
)

// parseCommands reads the command list out of `towerd help`. A line
// "towerd NAME ..." starts a command (a bracketed first word, as in
// "towerd [serve]", is the default command); text after two or more spaces,
// or on the indented lines below, is its summary. The same command on
// several lines ("cache list", "cache dump") is merged.
func parseCommands(help string) []*command {
	var cmds []*command
	byName := map[string]*command{}
	var last *command
	for _, line := range strings.Split(help, "\n") {
		m := synopsisLine.FindStringSubmatch(line)
		if m == nil {
			trimmed := strings.TrimSpace(line)
			if last != nil && trimmed != "" && strings.HasPrefix(line, " ") {
				last.Summary = strings.TrimSpace(last.Summary + " " + trimmed)
				continue
			}
			last = nil
			continue
		}
		name := strings.Trim(m[1], "[]")
		if !commandName.MatchString(name) {
			last = nil
			continue
		}
		// The first run of two or more spaces ends the synopsis; right
		// after the name it means a command without arguments.
		rest, summary := m[2], ""
		if loc := twoSpaces.FindStringIndex(rest); loc != nil {
			rest, summary = rest[:loc[0]], strings.TrimSpace(rest[loc[1]:])
		}
		c := byName[name]
		if c == nil {
			c = &command{Name: name}
			byName[name] = c
			cmds = append(cmds, c)
		}
		usage := strings.TrimSpace("towerd " + m[1] + " " + strings.TrimSpace(rest))
		if c.Usage == "" {
			c.Usage = usage
		} else {
			c.Usage += "\n" + usage
		}
		if summary != "" {
			c.Summary = strings.TrimSpace(c.Summary + " " + summary)
		}
		fields := strings.Fields(rest)
		if len(fields) > 0 && fixedWords.MatchString(fields[0]) {
			for _, w := range strings.Split(fields[0], "|") {
				c.Words = appendNew(c.Words, w)
			}
		}
		for _, f := range fields {
			if placeholder.MatchString(f) {
				c.Args = appendNew(c.Args, f)
			}
		}
		last = c
	}
	return cmds
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// parseFlags reads the flags out of a command's -h output.
func parseFlags(help string) []flagHelp {
	var flags []flagHelp
	lines := strings.Split(help, "\n")
	for i := 0; i < len(lines); i++ {
		if m := shortFlagLine.FindStringSubmatch(lines[i]); m != nil {
			flags = append(flags, flagHelp{Name: m[1], Usage: strings.TrimSpace(m[2])})
			continue
		}
		m := flagLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		f := flagHelp{Name: m[1], Value: m[2]}
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    ") {
			i++
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(lines[i]))
		}
		flags = append(flags, f)
	}
	return flags
}

// helpOf runs the towerd binary with args and returns what it printed on
// stdout and stderr (help goes to either, and some commands exit 2 after
// it, as flag.ContinueOnError lets them). A help request must not take
// long: a command that ran instead of printing its help is cut off.
func helpOf(binary string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s %s: still running after 10s", binary, strings.Join(args, " "))
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", fmt.Errorf("%s %s: %w", binary, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// readCLI asks the binary for its command list (`towerd help`) and each
// command's flags (`towerd NAME -h`; the daemon's are `towerd serve -h`).
func readCLI(binary string) (overview string, cmds []*command, err error) {
	overview, err = helpOf(binary, "help")
	if err != nil {
		return "", nil, err
	}
	cmds = parseCommands(overview)
	if len(cmds) == 0 {
		return "", nil, fmt.Errorf("%s help lists no \"towerd NAME\" lines:\n%s", binary, overview)
	}
	for _, c := range cmds {
		if c.Name == "version" || c.Name == "help" {
			continue // `towerd version -h` prints the version; neither has flags
		}
		if c.FlagHelp, err = helpOf(binary, c.Name, "-h"); err != nil {
			return "", nil, err
		}
		c.Flags = parseFlags(c.FlagHelp)
	}
	return overview, cmds, nil
}
