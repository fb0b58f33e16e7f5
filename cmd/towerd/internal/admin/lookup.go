package admin

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/dnswire"
)

// `towerd lookup`'s endpoint: how this towerd answers a question, and why.

// LookupReport is POST /lookup's answer: how this towerd answers a
// question and why, for `towerd lookup`. What decided comes from the
// resolver's observation of the query itself (resolver.Query), never from a
// guess made beside it (issue 25).
type LookupReport struct {
	Name    string         `json:"name"`
	Type    string         `json:"type"`
	Zone    string         `json:"zone"`
	Servers []LookupServer `json:"servers"`
	// Cached are the name's cache entries of this type before the query.
	Cached []cacheEntry `json:"cached"`
	// The query's outcome: where the answer came from (resolver.Source*),
	// the upstream server that replied, the rcode ("" when towerd wrote no
	// answer) and the time taken.
	Source          string  `json:"source"`
	Upstream        string  `json:"upstream,omitempty"`
	Rcode           string  `json:"rcode"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Rule is what decided an answer of local data or the Consul watch
	// (resolver.Query.Rule: "hosts FILE", "record", "address DOMAIN",
	// "local DOMAIN", "domain_needed", "bogus_priv", "watch", or "request"
	// for towerd's own REFUSED or FORMERR). Passed is why the Consul watch
	// left a name of its domain to Consul's DNS.
	Rule   string `json:"rule,omitempty"`
	Passed string `json:"passed,omitempty"`
	// Origin and Entry, for an answer from a cache entry (source cache, or
	// stale without a rule): how the entry came in ("upstream", "state
	// file", "cache load") and where from, as /cache says it.
	Origin    string   `json:"origin,omitempty"`
	Entry     string   `json:"entry,omitempty"`
	Answer    []string `json:"answer"`
	Authority []string `json:"authority"`
}

// LookupServer is one server of the zone with its health.
type LookupServer struct {
	Address     string  `json:"address"`
	Up          bool    `json:"up"`
	SRTTSeconds float64 `json:"srtt_seconds"`
	TailSeconds float64 `json:"rtt_tail_seconds"`
	// Transport is how the server is asked: "udp" (TCP when a reply is
	// truncated) or "tls" (DNS over TLS, issue 37).
	Transport string `json:"transport"`
}

// serveLookup asks towerd name= type= (default A) as a loopback client
// would, and says what it knew before and where the answer came from. The
// query is real (counted, cached, logged), hence POST.
func (a *Server) serveLookup(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	name := r.Form.Get("name")
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		http.Error(w, "name= must be a domain name", http.StatusBadRequest)
		return
	}
	name = dns.Fqdn(name)
	qtype := dns.TypeA
	if t := r.Form.Get("type"); t != "" {
		var ok bool
		if qtype, ok = dns.StringToType[strings.ToUpper(t)]; !ok {
			http.Error(w, fmt.Sprintf("type=%s is not a DNS type", t), http.StatusBadRequest)
			return
		}
	}
	rep := LookupReport{Name: name, Type: dns.Type(qtype).String(), Zone: a.handler.ZoneOf(name),
		Servers: []LookupServer{}, Cached: []cacheEntry{}, Answer: []string{}, Authority: []string{}}
	for _, g := range a.view.Load().Groups {
		if g.Address() != rep.Zone {
			continue
		}
		for _, s := range g.Servers() {
			transport := "udp"
			if s.TLS != nil {
				transport = "tls"
			}
			rep.Servers = append(rep.Servers, LookupServer{Address: s.Address, Up: s.Up, SRTTSeconds: s.SRTT.Seconds(), TailSeconds: s.Tail.Seconds(), Transport: transport})
		}
	}
	for _, info := range a.cache.Inspect(name) {
		if info.Key.Type == qtype && !info.Key.DO && !info.Key.CD {
			rep.Cached = append(rep.Cached, a.describe(info))
		}
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	reply, q := a.handler.Trace(m, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	rep.Source, rep.Upstream, rep.DurationSeconds = q.Source, q.Server, q.Duration.Seconds()
	rep.Rule, rep.Passed = q.Rule, q.Passed
	if (q.Source == resolver.SourceCache || q.Source == resolver.SourceStale) && q.Rule == "" {
		rep.Origin, rep.Entry = originLabels[q.Entry], entrySource(q.Entry, rep.Zone)
	}
	if reply != nil {
		rep.Rcode = dnswire.RcodeName(q.Rcode)
		for _, rr := range reply.Answer {
			rep.Answer = append(rep.Answer, rr.String())
		}
		for _, rr := range reply.Ns {
			rep.Authority = append(rep.Authority, rr.String())
		}
	}
	writeJSON(w, rep)
}
