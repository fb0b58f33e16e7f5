package local

import (
	"bytes"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// table is one immutable generation of local data: Source swaps in a new
// one when a file changes, and readers never lock.
type table struct {
	// names holds every name with records: static ones, hosts files' names
	// and the PTR names synthesized from their addresses. Owners are
	// canonical; answers carry the name as the client asked it.
	names map[string][]datum
	// from names where each datum came from, by datum.from: "record" (the
	// static records) first, then "hosts FILE" for each hosts file read.
	// An answer names its first record's (`towerd lookup`, issue 25).
	from []string
	// ents are the ancestors of names (empty non-terminals): inside a local
	// domain they exist, so they get NODATA, not NXDOMAIN.
	ents map[string]bool
	// rules are the address and local domains by canonical name; "." is
	// address=/#/.
	rules map[string]*rule
	// forwarded are the zones with servers of their own (zone "." aside):
	// a longer one wins over a rule, and bogus_priv and domain_needed leave
	// their names alone (dnsmasq's rev-server= exception).
	forwarded map[string]bool

	domainNeeded, bogusPriv bool
	ttl                     uint32
}

// The rules Source.Answer names, the first word of its why (issue 25:
// `towerd lookup` shows which one answered).
const (
	RuleHosts        = "hosts"   // "hosts FILE": a name of that hosts file
	RuleRecord       = "record"  // a static record (Options.Records)
	RuleAddress      = "address" // "address DOMAIN": an address domain
	RuleLocal        = "local"   // "local DOMAIN": a local domain
	RuleDomainNeeded = "domain_needed"
	RuleBogusPriv    = "bogus_priv"
)

// datum is one record of local data and where it came from, an index
// into table.from.
type datum struct {
	dns.RR
	from uint32
}

// fromRecords is table.from's index of the static records.
const fromRecords = 0

// rule is one domain's address= and local= settings.
type rule struct {
	v4, v6 []netip.Addr // A and AAAA answers for the domain and every name below it
	local  bool         // answered only from local data: NXDOMAIN for unknown names
	// address and domain name the rule in answers: "address example.test."
	// and "local example.test." (domain canonical, "." for address=/#/).
	address, domain string
}

func newTable(o *Options) *table {
	t := &table{
		names:        map[string][]datum{},
		from:         []string{RuleRecord},
		ents:         map[string]bool{},
		rules:        map[string]*rule{},
		forwarded:    map[string]bool{},
		domainNeeded: o.DomainNeeded,
		bogusPriv:    o.BogusPriv,
		ttl:          uint32(o.TTL.Seconds()),
	}
	for _, z := range o.Forwarded {
		if z = canonical(z); z != "." {
			t.forwarded[z] = true
		}
	}
	for _, d := range o.Domains {
		t.ruleFor(d).local = true
	}
	for _, a := range o.Addresses {
		r := t.ruleFor(a.Domain)
		for _, ip := range a.Addrs {
			if ip.Is4() {
				r.v4 = append(r.v4, ip)
			} else {
				r.v6 = append(r.v6, ip)
			}
		}
	}
	return t
}

func (t *table) ruleFor(domain string) *rule {
	d := canonical(domain)
	r := t.rules[d]
	if r == nil {
		r = &rule{address: RuleAddress + " " + d, domain: RuleLocal + " " + d}
		t.rules[d] = r
	}
	return r
}

// hostsFile adds path to t.from and returns its index, for addHost.
func (t *table) hostsFile(path string) uint32 {
	t.from = append(t.from, RuleHosts+" "+path)
	return uint32(len(t.from) - 1)
}

// add stores rr, which came from t.from[from], under its canonical owner,
// once: a hosts file naming the same address twice for a name gives one
// record (the first place that gave it is the one named).
func (t *table) add(rr dns.RR, from uint32) {
	h := rr.Header()
	h.Name = canonical(h.Name)
	for _, have := range t.names[h.Name] {
		if dns.IsDuplicate(have.RR, rr) {
			return
		}
	}
	t.names[h.Name] = append(t.names[h.Name], datum{RR: rr, from: from})
	for i := strings.IndexByte(h.Name, '.') + 1; i < len(h.Name); i = i + strings.IndexByte(h.Name[i:], '.') + 1 {
		t.ents[h.Name[i:]] = true
	}
}

// addHost adds a hosts entry's address records and, for its first name, the
// PTR record of its address unless one exists: dnsmasq answers a reverse
// lookup with the first name of the first line that has the address. from
// is the file's index (hostsFile).
func (t *table) addHost(e hostsEntry, from uint32) {
	for _, name := range e.names {
		t.add(addressRR(name, e.addr, 0), from)
	}
	t.addPTR(e.addr, e.names[0], from)
}

func (t *table) addPTR(addr netip.Addr, target string, from uint32) {
	owner := reverseName(addr)
	for _, d := range t.names[owner] {
		if d.Header().Rrtype == dns.TypePTR {
			return
		}
	}
	t.add(&dns.PTR{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypePTR, Class: dns.ClassINET}, Ptr: target}, from)
}

func addressRR(owner string, a netip.Addr, ttl uint32) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}

// covers is Source.Covers on this generation.
func (t *table) covers(name []byte) bool {
	if _, ok := t.names[string(name)]; ok {
		return true
	}
	if len(t.rules) > 0 {
		for i := 0; i < len(name); {
			if _, ok := t.rules[string(name[i:])]; ok {
				return true
			}
			j := bytes.IndexByte(name[i:], '.')
			if j < 0 {
				break
			}
			i += j + 1
			if i == len(name) {
				if _, ok := t.rules["."]; ok { // address=/#/
					return true
				}
				break
			}
		}
	}
	if t.domainNeeded && singleLabel(name) {
		return true
	}
	if t.bogusPriv {
		if a, ok := reverseAddr(name); ok && isPrivate(a) {
			return true
		}
	}
	return false
}

// singleLabel reports whether name ("host.") has one label: what
// domain_needed keeps local. The root has none.
func singleLabel[T string | []byte](name T) bool {
	for i := 0; i < len(name)-1; i++ {
		if name[i] == '.' {
			return false
		}
	}
	return len(name) > 1 && name[len(name)-1] == '.'
}

// rule returns the rule of the longest domain that contains name, unless a
// forwarded zone is longer: dnsmasq's server= and address= match by longest
// domain alike. On equal length the local rule wins.
func (t *table) rule(name string) *rule {
	for i := 0; ; {
		if r := t.rules[name[i:]]; r != nil {
			return r
		}
		if t.forwarded[name[i:]] {
			return nil
		}
		j := strings.IndexByte(name[i:], '.')
		if j < 0 || i+j+1 >= len(name) {
			if name != "." {
				return t.rules["."]
			}
			return nil
		}
		i += j + 1
	}
}

// forwards reports whether a forwarded zone contains name.
func (t *table) forwards(name string) bool {
	for i := 0; i < len(name); {
		if t.forwarded[name[i:]] {
			return true
		}
		j := strings.IndexByte(name[i:], '.')
		if j < 0 {
			return false
		}
		i += j + 1
	}
	return false
}

// maxChase bounds a CNAME chain inside local data.
const maxChase = 8

// lookup answers qtype for name (canonical; qname is the name as asked, the
// owner of the answer) and names what decided: the first record's origin
// (t.from), the address or local domain, RuleDomainNeeded or RuleBogusPriv.
// ok=false: the question is not local and goes on to the next source, the
// cache and the upstream. The order is dnsmasq's: names with records (hosts
// files, static records) first, then the longest address/local domain, then
// domain_needed, then bogus_priv.
func (t *table) lookup(qname, name string, qtype uint16) (rcode int, answer []dns.RR, why string, ok bool) {
	data, known := t.names[name]
	if known {
		if answer, from := t.records(qname, data, qtype); len(answer) > 0 {
			return dns.RcodeSuccess, answer, t.from[from], true
		}
	}
	if r := t.rule(name); r != nil {
		var addrs []netip.Addr
		switch qtype {
		case dns.TypeA:
			addrs = r.v4
		case dns.TypeAAAA:
			addrs = r.v6
		}
		if len(addrs) > 0 {
			for _, a := range addrs {
				answer = append(answer, addressRR(qname, a, t.ttl))
			}
			return dns.RcodeSuccess, answer, r.address, true
		}
		// Since dnsmasq 2.86, address= answers only its own families and
		// forwards the rest, unless the domain is also local=.
		if r.local {
			if known || t.ents[name] || len(r.v4)+len(r.v6) > 0 {
				return dns.RcodeSuccess, nil, r.domain, true // NODATA: the name exists
			}
			return dns.RcodeNameError, nil, r.domain, true
		}
	}
	if t.domainNeeded && (qtype == dns.TypeA || qtype == dns.TypeAAAA) && singleLabel(name) && !t.forwarded[name] {
		// dnsmasq's domain-needed covers A and AAAA only: other types of
		// a dotless name still go upstream.
		return negative(known), nil, RuleDomainNeeded, true
	}
	if t.bogusPriv && qtype == dns.TypePTR && !t.forwards(name) {
		if a, isRev := reverseAddr([]byte(name)); isRev && isPrivate(a) {
			return negative(known), nil, RuleBogusPriv, true
		}
	}
	return 0, nil, "", false
}

// negative is the answer for a name known locally without records of the
// type asked (NODATA), or unknown (NXDOMAIN).
func negative(known bool) int {
	if known {
		return dns.RcodeSuccess
	}
	return dns.RcodeNameError
}

// records returns the records of qtype at a name, owned by qname, following
// a CNAME inside local data: a stub such as glibc's does not chase it
// itself. A target outside local data ends the answer with the CNAME. from
// is where the answer's first record came from.
func (t *table) records(qname string, data []datum, qtype uint16) (out []dns.RR, from uint32) {
	owner := qname
	for range maxChase {
		var cname *datum
		matched := false
		for i, d := range data {
			rt := d.Header().Rrtype
			switch {
			case rt == qtype || qtype == dns.TypeANY:
				if len(out) == 0 {
					from = d.from
				}
				out = append(out, t.withOwner(d.RR, owner))
				matched = true
			case rt == dns.TypeCNAME:
				cname = &data[i]
			}
		}
		if matched || cname == nil {
			return out, from
		}
		if len(out) == 0 {
			from = cname.from
		}
		out = append(out, t.withOwner(cname.RR, owner))
		owner = canonical(cname.RR.(*dns.CNAME).Target)
		if data = t.names[owner]; data == nil {
			return out, from
		}
	}
	return out, from
}

// withOwner copies rr with the answer's owner name and TTL.
func (t *table) withOwner(rr dns.RR, owner string) dns.RR {
	c := dns.Copy(rr)
	c.Header().Name = owner
	c.Header().Ttl = t.ttl
	return c
}
