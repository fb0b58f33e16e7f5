// Package ctl holds the subcommands that talk to a running towerd, in the
// habits of resolvectl and unbound-control (issue 15): stats, reload,
// flush, cache list/dump/load, lookup and log-queries. Each is one
// base.Command value (CmdStats, CmdReload, ...) with its flags, its client
// call and its rendering; package main's table lists them (issue 26, after
// cmd/go/internal/...).
package ctl

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// controlTimeout bounds one control request; lookup may wait for an
// upstream (query_timeout), dump and load move the whole cache.
const controlTimeout = 2 * time.Minute

// ctl is a control subcommand's flags: -control and -config find the
// control socket, and each subcommand adds its own.
type ctl struct {
	name     string
	fs       *flag.FlagSet
	control  *string
	config   *string
	stderr   io.Writer
	synopsis string
	timeout  time.Duration // of one request
}

func newCtl(name, synopsis string, stderr io.Writer) *ctl {
	c := &ctl{name: name, fs: flag.NewFlagSet("towerd "+name, flag.ContinueOnError), stderr: stderr, synopsis: synopsis,
		timeout: controlTimeout}
	c.fs.SetOutput(stderr)
	c.control = c.fs.String("control", "", "towerd's control socket (default: [control] socket of the config file, else "+config.DefaultControlSocket+")")
	c.config = c.fs.String("config", config.DefaultPath, "config file to read [control] socket and [admin] listen from; it need not be valid")
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: towerd %s %s\n", name, synopsis)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args, flags anywhere among the arguments ("flush NAME
// -control X" as well as "flush -control X NAME"), and returns the
// arguments. done is true when the caller should return code at once (-h,
// a bad flag).
func (c *ctl) parse(args []string) (positional []string, code int, done bool) {
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, base.ExitOK, true
			}
			return nil, base.ExitConfig, true // the flag package named the flag and printed the usage
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			return positional, 0, false
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseArgs is parse that also checks the number of arguments: between
// least and most, else it prints wrongCount and the usage. Without a
// wrongCount (for least 0) it names the first argument too many.
// ok is false when the caller should return code at once.
func (c *ctl) parseArgs(args []string, least, most int, wrongCount string) (positional []string, code int, ok bool) {
	positional, code, done := c.parse(args)
	switch {
	case done:
		return nil, code, false
	case len(positional) > most && wrongCount == "":
		return nil, c.usageError("unexpected argument %q", positional[most]), false
	case len(positional) < least || len(positional) > most:
		return nil, c.usageError("%s", wrongCount), false
	}
	return positional, 0, true
}

// fail prints "towerd NAME: " and the message to stderr, and returns code.
func (c *ctl) fail(code int, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "towerd %s: %s\n", c.name, fmt.Sprintf(format, args...))
	return code
}

// usageError names what is wrong, prints the usage and returns exit 2.
func (c *ctl) usageError(format string, args ...any) int {
	c.fail(base.ExitConfig, format, args...)
	c.fs.Usage()
	return base.ExitConfig
}

// set reports whether the flag name was given.
func (c *ctl) set(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// locate reads the config file leniently (config.Locate: a broken edit
// must not keep the control commands from the daemon, issue 25) and
// returns what it found with a note on the files it could not use, for the
// error message.
func (c *ctl) locate() (config.Located, string) {
	loc := config.Locate(*c.config, !c.set("config"))
	note := ""
	if len(loc.Notes) > 0 {
		note = " (from the config: " + strings.Join(loc.Notes, "; ") + ")"
	}
	return loc, note
}

// target finds the control socket: -control, else the config file's
// [control] socket, else the default path.
func (c *ctl) target() (t admin.Target, note string, code int, ok bool) {
	if c.set("control") {
		return admin.Target{Socket: *c.control}, "", 0, true
	}
	loc, note := c.locate()
	if loc.ControlSocket == "" {
		return admin.Target{}, "", c.fail(base.ExitFail, "the control socket is off in %s ([control] socket = \"\"); name one with -control", *c.config), false
	}
	return admin.Target{Socket: loc.ControlSocket}, note, 0, true
}

// call sends one request over the control socket and decodes a JSON answer
// into out (when out is not nil). On failure it prints why and returns the
// exit status: ExitDenied when the caller may not use the socket, else
// ExitFail; ExitOK on success.
func (c *ctl) call(method, path string, form url.Values, body io.Reader, out any) ([]byte, int) {
	t, note, code, ok := c.target()
	if !ok {
		return nil, code
	}
	return c.send(t, note, method, path, form, body, out)
}

// send is call to a known target.
func (c *ctl) send(t admin.Target, note, method, path string, form url.Values, body io.Reader, out any) ([]byte, int) {
	data, err := admin.Call(t, method, path, form, body, c.timeout)
	if errors.Is(err, admin.ErrDenied) {
		return nil, c.fail(base.ExitDenied, "%v", err)
	}
	if err != nil {
		return nil, c.fail(base.ExitFail, "%v%s", err, note)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, c.fail(base.ExitFail, "%s%s did not answer towerd's JSON: %v", t, path, err)
		}
	}
	return data, base.ExitOK
}

// CmdReload is `towerd reload`.
var CmdReload = &base.Command{Name: "reload", Synopsis: "[-control PATH]", Summary: "re-read the configuration (as SIGHUP) and say what changed",
	Run: reloadCommand}

// reloadCommand is `towerd reload`: SIGHUP over the control socket, with
// what changed and what waits for a restart, or why the file was rejected
// (exit 1; the running configuration stays).
func reloadCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("reload", "[-control PATH] [-config FILE]", stderr)
	if _, code, ok := c.parseArgs(args, 0, 0, ""); !ok {
		return code
	}
	var res admin.ReloadResult
	if _, code := c.call(http.MethodPost, "/reload", url.Values{}, nil, &res); code != base.ExitOK {
		return code
	}
	if len(res.Applied) == 0 && len(res.RestartNeeded) == 0 {
		fmt.Fprintln(stdout, "reloaded: nothing changed")
		return base.ExitOK
	}
	fmt.Fprintln(stdout, "reloaded")
	if len(res.Applied) > 0 {
		fmt.Fprintf(stdout, "  applied:         %s\n", strings.Join(res.Applied, ", "))
	}
	if len(res.RestartNeeded) > 0 {
		fmt.Fprintf(stdout, "  needs a restart: %s (the running values stay until then)\n", strings.Join(res.RestartNeeded, ", "))
	}
	return base.ExitOK
}

// CmdFlush is `towerd flush`.
var CmdFlush = &base.Command{Name: "flush", Synopsis: "NAME | -zone ZONE | -all", Summary: "forget cached answers: one name, a zone, or everything",
	Run: flushCommand}

// flushCommand is `towerd flush NAME | -zone ZONE | -all`.
func flushCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("flush", "NAME | -zone ZONE | -all  [-control PATH]", stderr)
	zone := c.fs.String("zone", "", "forget every name at or below ZONE")
	all := c.fs.Bool("all", false, "forget everything cached")
	pos, code, ok := c.parseArgs(args, 0, 1, "")
	if !ok {
		return code
	}
	form := url.Values{}
	what := ""
	switch {
	case btoi(len(pos) == 1)+btoi(*zone != "")+btoi(*all) != 1:
		return c.usageError("name exactly one of NAME, -zone ZONE or -all")
	case len(pos) == 1:
		form.Set("name", pos[0])
		what = "for " + pos[0]
	case *zone != "":
		form.Set("zone", *zone)
		what = "at or below " + *zone
	default:
		what = "(the whole cache)"
	}
	var res struct{ Removed int }
	if _, code := c.call(http.MethodPost, "/cache/flush", form, nil, &res); code != base.ExitOK {
		return code
	}
	fmt.Fprintf(stdout, "flushed %d %s %s\n", res.Removed, plural(res.Removed, "entry", "entries"), what)
	return base.ExitOK
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// CmdLogQueries is `towerd log-queries`.
var CmdLogQueries = &base.Command{Name: "log-queries", Synopsis: "[on|off]", Summary: "switch the query log of a running towerd, or show its state",
	Run: logQueriesCommand}

// logQueriesCommand is `towerd log-queries [on|off]`.
func logQueriesCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("log-queries", "[on|off] [-control PATH]", stderr)
	pos, code, ok := c.parseArgs(args, 0, 1, "")
	if !ok {
		return code
	}
	method, form := http.MethodGet, url.Values(nil)
	switch {
	case len(pos) == 1 && pos[0] != "on" && pos[0] != "off":
		return c.usageError("%q is neither on nor off", pos[0])
	case len(pos) == 1:
		method, form = http.MethodPost, url.Values{"state": {pos[0]}}
	}
	var res struct {
		LogQueries bool `json:"log_queries"`
		Was        bool `json:"was"`
	}
	if _, code := c.call(method, "/log-queries", form, nil, &res); code != base.ExitOK {
		return code
	}
	state := map[bool]string{true: "on", false: "off"}
	switch {
	case method == http.MethodGet:
		fmt.Fprintf(stdout, "query log %s\n", state[res.LogQueries])
	case res.Was == res.LogQueries:
		fmt.Fprintf(stdout, "query log %s (it already was)\n", state[res.LogQueries])
	default:
		fmt.Fprintf(stdout, "query log %s (was %s)\n", state[res.LogQueries], state[res.Was])
	}
	return base.ExitOK
}
