package dnsmasqimport

// The subcommand `towerd import-dnsmasq`.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// Exit codes, as every towerd subcommand's (cmd/towerd).
const (
	exitOK     = 0
	exitFail   = 1 // unreadable, not valid as towerd's, or a directive dropped that changes answers
	exitConfig = 2 // bad flags or arguments
)

// Run is `towerd import-dnsmasq FILE`: the TOML goes to stdout, so it can
// be redirected into /etc/towerd/towerd.toml, and every directive not
// carried over goes to stderr with its file and line.
func Run(args []string, stdout, stderr io.Writer) int {
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
	dirs, err := Read(path)
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %v\n", err)
		return exitFail
	}
	im := Import(path, dirs)
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
