package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// The subcommands that talk to a running towerd over its admin server, in
// the habits of resolvectl and unbound-control (issue 15): flush, reload,
// cache list/dump/load, lookup, log-queries.

// controlTimeout bounds one control request; lookup may wait for an
// upstream (query_timeout), dump and load move the whole cache.
const controlTimeout = 2 * time.Minute

// ctl is a control subcommand's flags: -admin and -config name the admin
// server, as for `towerd stats`, and each adds its own.
type ctl struct {
	name     string
	fs       *flag.FlagSet
	admin    *string
	config   *string
	stderr   io.Writer
	synopsis string
}

func newCtl(name, synopsis string, stderr io.Writer) *ctl {
	c := &ctl{name: name, fs: flag.NewFlagSet("towerd "+name, flag.ContinueOnError), stderr: stderr, synopsis: synopsis}
	c.fs.SetOutput(stderr)
	c.admin = c.fs.String("admin", "", "ip:port of towerd's admin server (default: [admin] listen of the config file, else "+config.DefaultAdminListen+")")
	c.config = c.fs.String("config", config.DefaultPath, "config file to read [admin] listen from")
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: towerd %s %s\n", name, synopsis)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args, flags anywhere among the arguments ("flush NAME
// -admin X" as well as "flush -admin X NAME"), and returns the arguments.
// done is true when the caller should return code at once (-h, a bad flag).
func (c *ctl) parse(args []string) (positional []string, code int, done bool) {
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, true
			}
			return nil, exitConfig, true // the flag package named the flag and printed the usage
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			return positional, 0, false
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// usageError names what is wrong, prints the usage and returns exit 2.
func (c *ctl) usageError(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "towerd %s: %s\n", c.name, fmt.Sprintf(format, args...))
	c.fs.Usage()
	return exitConfig
}

// addr finds the admin server: -admin, else the config file's [admin]
// listen, else the default address (with a note on why, for the error).
func (c *ctl) addr() (addr, note string, code int, ok bool) {
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["admin"] {
		return *c.admin, "", 0, true
	}
	cfg, err := config.Load(*c.config, !set["config"])
	switch {
	case err != nil && set["config"]:
		fmt.Fprintf(c.stderr, "towerd %s: config: %v\n", c.name, err)
		return "", "", exitConfig, false
	case err != nil:
		return config.DefaultAdminListen, fmt.Sprintf(" (%s unusable for [admin] listen: %s)", *c.config, admin.OneLine(err.Error())), 0, true
	case cfg.Admin.Listen == "":
		fmt.Fprintf(c.stderr, "towerd %s: the admin server is off in %s ([admin] listen = \"\"); name one with -admin\n", c.name, *c.config)
		return "", "", exitFail, false
	}
	return cfg.Admin.Listen, "", 0, true
}

// call sends one request to the admin server and decodes a JSON answer
// into out (when out is not nil). On failure it prints why and returns the
// exit status: 2 for a bad file named with -config, else 1; 0 on success.
func (c *ctl) call(method, path string, form url.Values, body io.Reader, out any) ([]byte, int) {
	addr, note, code, ok := c.addr()
	if !ok {
		return nil, code
	}
	data, err := admin.Call(addr, method, path, form, body, controlTimeout)
	if err != nil {
		fmt.Fprintf(c.stderr, "towerd %s: %v%s\n", c.name, err, note)
		return nil, exitFail
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			fmt.Fprintf(c.stderr, "towerd %s: %s%s did not answer towerd's JSON: %v\n", c.name, addr, path, err)
			return nil, exitFail
		}
	}
	return data, exitOK
}

// reloadCommand is `towerd reload`: SIGHUP over the admin server, with
// what changed and what waits for a restart.
func reloadCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("reload", "[-admin ADDR] [-config FILE]", stderr)
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return c.usageError("unexpected argument %q", pos[0])
	}
	var res admin.ReloadResult
	if _, code := c.call(http.MethodPost, "/reload", url.Values{}, nil, &res); code != exitOK {
		return code
	}
	if len(res.Applied) == 0 && len(res.RestartNeeded) == 0 {
		fmt.Fprintln(stdout, "reloaded: nothing changed")
		return exitOK
	}
	fmt.Fprintln(stdout, "reloaded")
	if len(res.Applied) > 0 {
		fmt.Fprintf(stdout, "  applied:         %s\n", strings.Join(res.Applied, ", "))
	}
	if len(res.RestartNeeded) > 0 {
		fmt.Fprintf(stdout, "  needs a restart: %s (the running values stay until then)\n", strings.Join(res.RestartNeeded, ", "))
	}
	return exitOK
}

// flushCommand is `towerd flush NAME | -zone ZONE | -all`.
func flushCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("flush", "NAME | -zone ZONE | -all  [-admin ADDR]", stderr)
	zone := c.fs.String("zone", "", "forget every name at or below ZONE")
	all := c.fs.Bool("all", false, "forget everything cached")
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	form := url.Values{}
	what := ""
	switch {
	case len(pos) > 1:
		return c.usageError("unexpected argument %q", pos[1])
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
	if _, code := c.call(http.MethodPost, "/cache/flush", form, nil, &res); code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "flushed %d %s %s\n", res.Removed, plural(res.Removed, "entry", "entries"), what)
	return exitOK
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

// cacheEntry is the part of /cache/list's entries the table shows.
type cacheEntry struct {
	Name             string   `json:"name"`
	Key              string   `json:"key"`
	Type             string   `json:"type"`
	Kind             string   `json:"kind"`
	State            string   `json:"state"`
	TTLSeconds       float64  `json:"ttl_seconds"`
	RemainingSeconds float64  `json:"remaining_seconds"`
	ExpiredSeconds   float64  `json:"expired_seconds"`
	Answer           []string `json:"answer"`
}

// cacheListCommand is `towerd cache list`.
func cacheListCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache list", "[-zone ZONE] [-stale] [-json] [-admin ADDR]", stderr)
	zone := c.fs.String("zone", "", "only names at or below ZONE")
	stale := c.fs.Bool("stale", false, "only entries past their TTL (served stale, or expired)")
	asJSON := c.fs.Bool("json", false, "print the admin server's JSON as it is")
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return c.usageError("unexpected argument %q", pos[0])
	}
	form := url.Values{}
	if *zone != "" {
		form.Set("zone", *zone)
	}
	if *stale {
		form.Set("stale", "1")
	}
	var res struct{ Entries []cacheEntry }
	data, code := c.call(http.MethodGet, "/cache/list", form, nil, &res)
	if code != exitOK {
		return code
	}
	if *asJSON {
		_, _ = stdout.Write(data)
		return exitOK
	}
	fmt.Fprintf(stdout, "%-40s %-6s %-7s %-8s %-10s %s\n", "NAME", "TYPE", "STATE", "TTL", "AGE", "ANSWER")
	for _, e := range res.Entries {
		age := "in " + secs(e.RemainingSeconds) // fresh: time left
		if e.State != "fresh" {
			age = secs(e.ExpiredSeconds) + " ago"
		}
		answer := strings.Join(rdata(e.Answer), " ")
		if e.Kind == "nodata" {
			answer = "(NODATA)"
		}
		name := e.Name
		for _, f := range strings.Fields(e.Key) {
			if strings.HasPrefix(f, "+") {
				name += " " + f // "+do", "+cd": answers kept apart for DNSSEC-aware clients
			}
		}
		fmt.Fprintf(stdout, "%-40s %-6s %-7s %-8s %-10s %s\n", name, e.Type, e.State, secs(e.TTLSeconds), age, answer)
	}
	fmt.Fprintf(stdout, "%d %s\n", len(res.Entries), plural(len(res.Entries), "entry", "entries"))
	return exitOK
}

// secs renders seconds as a rounded duration ("30s", "4m10s").
func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// rdata keeps the data of presentation-format records ("a. 30 IN A
// 192.0.2.1" → "192.0.2.1").
func rdata(rrs []string) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		f := strings.Fields(rr)
		if len(f) > 4 {
			out = append(out, strings.Join(f[4:], " "))
		}
	}
	return out
}

// cacheDumpCommand is `towerd cache dump FILE`: the running cache in the
// state directory's format (cache.Dump), written 0600 like the state file
// ("-" is standard output).
func cacheDumpCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache dump", "FILE [-admin ADDR]", stderr)
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("name one FILE (\"-\" for standard output)")
	}
	data, code := c.call(http.MethodGet, "/cache/dump", nil, nil, nil)
	if code != exitOK {
		return code
	}
	if pos[0] == "-" {
		_, _ = stdout.Write(data)
		return exitOK
	}
	// O_EXCL: never follow a link planted at FILE or overwrite a file.
	f, err := os.OpenFile(pos[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd cache dump: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "wrote %s (%d bytes)\n", pos[0], len(data))
	return exitOK
}

// cacheLoadCommand is `towerd cache load FILE`. The file gets the checks
// of the state file on start: here the file itself (cache.OpenSnapshot: a
// regular file of this user or root, writable by nobody else; one that
// fails is set aside as FILE.rejected), in towerd every entry (cache.Load).
func cacheLoadCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("cache load", "FILE [-admin ADDR]", stderr)
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("name one FILE written by towerd cache dump or found in the state directory")
	}
	f, err := cache.OpenSnapshot(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "towerd cache load: %v\n", err)
		return exitFail
	}
	defer f.Close()
	var res struct {
		Loaded, Skipped, Rejected, Clamped int
		Rejections                         map[string]int
	}
	if _, code := c.call(http.MethodPost, "/cache/load", nil, f, &res); code != exitOK {
		return code
	}
	fmt.Fprintf(stdout, "loaded %d %s from %s (%d skipped: expired past the stale age, cached already or beyond cache.size; %d rejected; %d TTLs cut to max_ttl)\n",
		res.Loaded, plural(res.Loaded, "entry", "entries"), pos[0], res.Skipped, res.Rejected, res.Clamped)
	for why, n := range res.Rejections {
		fmt.Fprintf(stdout, "  rejected %d: %s\n", n, why)
	}
	return exitOK
}

// logQueriesCommand is `towerd log-queries [on|off]`.
func logQueriesCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("log-queries", "[on|off] [-admin ADDR]", stderr)
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	method, form := http.MethodGet, url.Values(nil)
	switch {
	case len(pos) > 1:
		return c.usageError("unexpected argument %q", pos[1])
	case len(pos) == 1 && pos[0] != "on" && pos[0] != "off":
		return c.usageError("%q is neither on nor off", pos[0])
	case len(pos) == 1:
		method, form = http.MethodPost, url.Values{"state": {pos[0]}}
	}
	var res struct {
		LogQueries bool `json:"log_queries"`
		Was        bool `json:"was"`
	}
	if _, code := c.call(method, "/log-queries", form, nil, &res); code != exitOK {
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
	return exitOK
}

// lookupCommand is `towerd lookup NAME [TYPE]`: towerd asks itself, as a
// loopback client, and explains the path of the answer.
func lookupCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("lookup", "NAME [TYPE] [-json] [-admin ADDR]", stderr)
	asJSON := c.fs.Bool("json", false, "print the admin server's JSON as it is")
	pos, code, done := c.parse(args)
	if done {
		return code
	}
	if len(pos) == 0 || len(pos) > 2 {
		return c.usageError("name a NAME and at most one TYPE")
	}
	form := url.Values{"name": {pos[0]}}
	if len(pos) == 2 {
		if _, ok := dns.StringToType[strings.ToUpper(pos[1])]; !ok {
			return c.usageError("%q is not a DNS type (A, AAAA, MX, SRV, TXT...)", pos[1])
		}
		form.Set("type", pos[1])
	}
	var rep admin.LookupReport
	data, code := c.call(http.MethodPost, "/lookup", form, nil, &rep)
	if code != exitOK {
		return code
	}
	if *asJSON {
		_, _ = stdout.Write(data)
		return exitOK
	}
	renderLookup(stdout, rep)
	return exitOK
}

// renderLookup prints a LookupReport for humans.
func renderLookup(w io.Writer, rep admin.LookupReport) {
	fmt.Fprintf(w, "%s %s\n", rep.Name, rep.Type)
	servers := make([]string, 0, len(rep.Servers))
	for _, s := range rep.Servers {
		health := "up"
		if !s.Up {
			health = "DOWN"
		}
		if s.SRTTSeconds > 0 {
			health += ", srtt " + time.Duration(s.SRTTSeconds*float64(time.Second)).Round(10*time.Microsecond).String()
		}
		servers = append(servers, fmt.Sprintf("%s (%s)", s.Address, health))
	}
	fmt.Fprintf(w, "  zone      %s -> %s\n", rep.Zone, strings.Join(servers, ", "))
	watch := map[string]string{"off": "off", "covered": "covers this name (pushed records answer first)", "not covered": "does not cover this name"}[rep.Watch]
	fmt.Fprintf(w, "  watch     %s\n", watch)
	if len(rep.Cached) == 0 {
		fmt.Fprintln(w, "  cache     nothing cached for this type before this lookup")
	}
	for _, e := range rep.Cached {
		age := fmt.Sprintf("%s of %s left", secs(e.RemainingSeconds), secs(e.TTLSeconds))
		if e.State != "fresh" {
			age = fmt.Sprintf("expired %s ago (TTL %s)", secs(e.ExpiredSeconds), secs(e.TTLSeconds))
		}
		fmt.Fprintf(w, "  cache     %s, %s, %s\n", e.State, e.Kind, age)
	}
	from := map[string]string{
		"cache":    "the cache (fresh)",
		"stale":    "a stale answer (refreshing failed or is not due)",
		"upstream": "upstream",
		"consul":   "the Consul watch's pushed records",
		"local":    "towerd itself (refused or malformed)",
	}[rep.Source]
	if from == "" {
		from = rep.Source
	}
	if rep.Upstream != "" {
		from += " " + rep.Upstream
	} else if rep.Source == "upstream" {
		from += " (no server answered)"
	}
	fmt.Fprintf(w, "  answer    %s from %s in %s\n", rep.Rcode, from,
		time.Duration(rep.DurationSeconds*float64(time.Second)).Round(time.Microsecond))
	for _, rr := range rep.Answer {
		fmt.Fprintf(w, "            %s\n", rr)
	}
	for _, rr := range rep.Authority {
		fmt.Fprintf(w, "  authority %s\n", rr)
	}
}
