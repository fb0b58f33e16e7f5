package ctl

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
	"github.com/towerd/towerd/cmd/towerd/internal/base"
)

// `towerd lookup`: how this node answers a question, and why.

// CmdLookup is `towerd lookup`.
var CmdLookup = &base.Command{Name: "lookup", Synopsis: "NAME [TYPE] [-json]", Summary: "ask towerd and explain the answer: zone, servers, cache, source",
	Run: lookupCommand}

// lookupCommand is `towerd lookup NAME [TYPE]`: towerd asks itself, as a
// loopback client, and explains the path of the answer.
func lookupCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("lookup", "NAME [TYPE] [-json] [-control PATH]", stderr)
	asJSON := c.fs.Bool("json", false, "print the control socket's JSON as it is")
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
	if code != base.ExitOK {
		return code
	}
	if *asJSON {
		_, _ = stdout.Write(data)
		return base.ExitOK
	}
	renderLookup(stdout, rep)
	return base.ExitOK
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
	loaded := ""
	for _, e := range rep.Cached {
		age := fmt.Sprintf("%s of %s left", secs(e.RemainingSeconds), secs(e.TTLSeconds))
		if e.State != "fresh" {
			age = fmt.Sprintf("expired %s ago (TTL %s)", secs(e.ExpiredSeconds), secs(e.TTLSeconds))
		}
		fmt.Fprintf(w, "  cache     %s, %s, %s, from %s\n", e.State, e.Kind, age, e.Source)
		if e.Origin != "upstream" {
			loaded = e.Source
		}
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
	switch {
	case rep.Upstream != "":
		from += " " + rep.Upstream
	case rep.Source == "upstream":
		from += " (no server answered)"
	case (rep.Source == "cache" || rep.Source == "stale") && loaded != "":
		// Never "upstream" for what a file put in the cache (issue 21).
		from += ", an entry put there by " + loaded
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
