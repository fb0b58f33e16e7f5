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
	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/consul"
	"github.com/towerd/towerd/resolver/local"
)

// `towerd lookup`: how this node answers a question, and why.

// CmdLookup is `towerd lookup`.
var CmdLookup = &base.Command{Name: "lookup", Synopsis: "NAME [TYPE] [-json]", Summary: "ask towerd and explain the answer: zone, servers, cache, what answered",
	Run: lookupCommand}

// Exit codes of `towerd lookup` beyond base's: what the lookup found, for
// scripts (`towerd lookup db.service.consul || page`). A NODATA answer
// (NOERROR, no records of the type) exits 0: the name exists. Both are
// unique among towerd's exit codes (3 is the drill's INCONCLUSIVE, 4
// ExitDenied), so a wrapper can tell any of them apart.
const (
	// ExitNXDOMAIN: the answer is NXDOMAIN, the name does not exist.
	ExitNXDOMAIN = 5
	// ExitLookupFailed: the lookup failed: SERVFAIL (no server answered
	// in time, or one failed it), REFUSED, or another error rcode.
	ExitLookupFailed = 6
)

// lookupCommand is `towerd lookup NAME [TYPE]`: towerd asks itself, as a
// loopback client, and explains the path of the answer.
func lookupCommand(args []string, stdout, stderr io.Writer) int {
	c := newCtl("lookup", "NAME [TYPE] [-json] [-control PATH]", stderr)
	asJSON := c.fs.Bool("json", false, "print the control socket's JSON as it is")
	pos, code, ok := c.parseArgs(args, 1, 2, "name a NAME and at most one TYPE")
	if !ok {
		return code
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
	} else {
		renderLookup(stdout, rep)
	}
	return lookupExit(rep.Rcode)
}

// lookupExit is the exit status for an answer's rcode ("" when towerd
// wrote none).
func lookupExit(rcode string) int {
	switch rcode {
	case "NOERROR":
		return base.ExitOK
	case "NXDOMAIN":
		return ExitNXDOMAIN
	}
	return ExitLookupFailed
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
		if s.Transport != "" {
			health += ", " + s.Transport
		}
		if s.SRTTSeconds > 0 {
			health += ", srtt " + time.Duration(s.SRTTSeconds*float64(time.Second)).Round(10*time.Microsecond).String() +
				", tail " + time.Duration(s.TailSeconds*float64(time.Second)).Round(10*time.Microsecond).String()
		}
		servers = append(servers, fmt.Sprintf("%s (%s)", s.Address, health))
	}
	fmt.Fprintf(w, "  zone      %s -> %s\n", rep.Zone, strings.Join(servers, ", "))
	if len(rep.Cached) == 0 {
		fmt.Fprintln(w, "  cache     nothing cached for this type before this lookup")
	}
	for _, e := range rep.Cached {
		age := fmt.Sprintf("%s of %s left", secs(e.RemainingSeconds), secs(e.TTLSeconds))
		if e.State != "fresh" {
			age = fmt.Sprintf("expired %s ago (TTL %s)", secs(e.ExpiredSeconds), secs(e.TTLSeconds))
		}
		fmt.Fprintf(w, "  cache     %s, %s, %s, from %s\n", e.State, e.Kind, age, e.Source)
	}
	if rep.Passed != "" {
		fmt.Fprintf(w, "  watch     left it to the cache and Consul's DNS: %s\n", rep.Passed)
	}
	rcode := rep.Rcode
	if rcode == "" {
		rcode = "no answer"
	}
	fmt.Fprintf(w, "  answer    %s from %s in %s\n", rcode, answeredBy(rep),
		time.Duration(rep.DurationSeconds*float64(time.Second)).Round(time.Microsecond))
	for _, rr := range rep.Answer {
		fmt.Fprintf(w, "            %s\n", rr)
	}
	for _, rr := range rep.Authority {
		fmt.Fprintf(w, "  authority %s\n", rr)
	}
}

// answeredBy names what answered, from the resolver's observation of the
// query (LookupReport's Source, Rule, Passed, Upstream, Entry), never from
// what towerd might have done.
func answeredBy(rep admin.LookupReport) string {
	zone := "zone " + rep.Zone
	switch rep.Source {
	case resolver.SourceLocal:
		return localRule(rep.Rule)
	case resolver.SourceRecords:
		return "the Consul watch (pushed records)"
	case resolver.SourceCache:
		return "the cache (fresh), " + entryPhrase(rep)
	case resolver.SourceStale:
		if rep.Rule == consul.WhyWatch {
			return "the Consul watch's last known records (stale: the watch has lost the agent)"
		}
		return "a stale cache entry (the refresh failed or is not due), " + entryPhrase(rep)
	case resolver.SourceUpstream:
		via := "upstream"
		if rep.Passed != "" {
			via = "Consul's DNS" // the watch passed the name to its zone's servers
		}
		switch {
		case rep.Rcode == "SERVFAIL" && rep.Upstream != "":
			return fmt.Sprintf("towerd: %s %s (%s) failed it (SERVFAIL or REFUSED) and nothing stale was at hand", via, rep.Upstream, zone)
		case rep.Rcode == "SERVFAIL":
			return fmt.Sprintf("towerd: no server of %s answered in time (query_timeout), or the in-flight cap "+
				"(upstream.max_inflight) was full, and nothing stale was at hand", zone)
		case rep.Upstream == "":
			return fmt.Sprintf("%s (%s)", via, zone)
		}
		return fmt.Sprintf("%s %s (%s)", via, rep.Upstream, zone)
	case resolver.SourceSearch:
		from := ""
		if rep.Upstream != "" {
			from = " from " + rep.Upstream
		}
		return fmt.Sprintf("a search-list try's NXDOMAIN held by towerd (search.hold), last said%s (%s)", from, zone)
	}
	return rep.Source
}

// entryPhrase says where the cache entry that answered came from; a file
// is never passed off as an upstream (issue 21).
func entryPhrase(rep admin.LookupReport) string {
	switch rep.Origin {
	case "upstream":
		return "an entry stored from " + rep.Entry
	case "state file":
		return "an entry from the " + rep.Entry
	}
	return "an entry put there by " + rep.Entry
}

// localRule says which rule of local data (resolver/local's Rule*) or of
// the request checks gave the answer.
func localRule(rule string) string {
	kind, arg, _ := strings.Cut(rule, " ")
	switch kind {
	case resolver.RuleRequest:
		return "towerd itself: the request checks (a zone transfer, a class other than IN, a malformed query, a client outside allow)"
	case local.RuleHosts:
		return "local data: the hosts file " + arg
	case local.RuleRecord:
		return "local data: a static record ([local] records)"
	case local.RuleAddress:
		return "local data: the address domain " + arg + " ([[local.address]])"
	case local.RuleLocal:
		return "local data: the local domain " + arg + " ([local] domains, answered from local data only)"
	case local.RuleDomainNeeded:
		return "local data: domain_needed (a name without a dot is never sent upstream)"
	case local.RuleBogusPriv:
		return "local data: bogus_priv (the reverse name of a private address is never sent upstream)"
	}
	return "local data (" + rule + ")"
}
