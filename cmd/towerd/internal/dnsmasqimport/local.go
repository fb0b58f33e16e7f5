package dnsmasqimport

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// localImport is what the importer collects for towerd's [local] table:
// dnsmasq's hosts files, address=, local=, rev-server= without a server,
// the static records and the domain-needed and bogus-priv switches.
type localImport struct {
	noHosts      bool
	addnHosts    []string
	hostsFrom    []string
	domains      []string
	domainsFrom  []string
	records      []string
	recordsFrom  []string
	addresses    []*importedAddress
	domainNeeded bool
	bogusPriv    bool
}

type importedAddress struct {
	name  string
	addrs []string
	from  []string
}

// localDirective maps the directives of [local]; it reports false for the
// others.
func (im *importer) localDirective(d Directive) bool {
	l := &im.local
	switch d.Name {
	case "no-hosts":
		l.noHosts = true
		l.hostsFrom = append(l.hostsFrom, d.where()+" "+d.String())
	case "addn-hosts", "hostsdir": // a directory in hosts_files is re-read like dnsmasq's hostsdir
		l.addnHosts = append(l.addnHosts, d.Value)
		l.hostsFrom = append(l.hostsFrom, d.where()+" "+d.String())
	case "domain-needed":
		l.domainNeeded = true
		im.set(d, "local", "domain_needed", true)
	case "bogus-priv":
		l.bogusPriv = true
		im.set(d, "local", "bogus_priv", true)
	case "local-ttl":
		if n, ok := im.number(d); ok {
			im.set(d, "local", "ttl", time.Duration(n)*time.Second)
		}
	case "address":
		im.address(d)
	case "rev-server":
		im.revServer(d)
	case "host-record", "cname", "ptr-record", "txt-record", "mx-host", "srv-host":
		im.record(d)
	default:
		return false
	}
	return true
}

// localDomain makes dom (canonical) a local domain: local=/dom/,
// server=/dom/, address=/dom/.
func (im *importer) localDomain(d Directive, dom string) {
	l := &im.local
	for _, have := range l.domains {
		if have == dom {
			return
		}
	}
	l.domains = append(l.domains, dom)
	l.domainsFrom = append(l.domainsFrom, d.where())
}

// address maps address=/d1/d2/[IP|#]: an address domain per domain, a
// local domain without an IP, 0.0.0.0 and :: for "#".
func (im *importer) address(d Directive) {
	v := d.Value
	i := strings.LastIndex(v, "/")
	if !strings.HasPrefix(v, "/") || i == 0 {
		im.note(d, false, "not of the form /DOMAIN/[ADDRESS]")
		return
	}
	domains, ip := strings.Split(v[1:i], "/"), v[i+1:]
	var addrs []string
	switch ip {
	case "":
	case "#":
		addrs = []string{"0.0.0.0", "::"}
	default:
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			im.note(d, false, fmt.Sprintf("%q is not an IP address", ip))
			return
		}
		addrs = []string{a.Unmap().String()}
	}
	for _, dom := range domains {
		dom, ok := im.domain(d, dom)
		if !ok {
			continue
		}
		if len(addrs) == 0 {
			if dom == "." {
				im.note(d, false, "towerd cannot answer every name with NXDOMAIN")
				continue
			}
			im.localDomain(d, dom)
			continue
		}
		a := im.addressFor(dom)
		a.from = append(a.from, d.where())
		for _, ip := range addrs {
			if !contains(a.addrs, ip) {
				a.addrs = append(a.addrs, ip)
			}
		}
	}
}

func (im *importer) addressFor(dom string) *importedAddress {
	for _, a := range im.local.addresses {
		if a.name == dom {
			return a
		}
	}
	a := &importedAddress{name: dom}
	im.local.addresses = append(im.local.addresses, a)
	return a
}

// revServer maps rev-server=PREFIX[,SERVER] to server=/ZONE.../SERVER: the
// reverse zones that cover the prefix, one per value of a partial octet
// (nibble) as dnsmasq writes them.
func (im *importer) revServer(d Directive) {
	prefix, server, _ := strings.Cut(d.Value, ",")
	prefix = strings.TrimSpace(prefix)
	if !strings.Contains(prefix, "/") {
		if a, err := netip.ParseAddr(prefix); err == nil {
			prefix += "/" + strconv.Itoa(a.BitLen())
		}
	}
	p, err := netip.ParsePrefix(prefix)
	if err != nil || p.Bits() == 0 {
		im.note(d, false, fmt.Sprintf("%q is not an address prefix of 1 to 128 bits", prefix))
		return
	}
	zones := reverseZones(p.Masked())
	server = strings.TrimSpace(server)
	im.server(Directive{File: d.File, Line: d.Line, Name: d.Name, Value: "/" + strings.Join(zones, "/") + "/" + server, Has: true})
}

// reverseZones names the reverse zones that together hold p's addresses.
func reverseZones(p netip.Prefix) []string {
	var unit, base int // bits per label, label value count
	var digits []int   // the address as labels, most significant first
	var suffix string
	if p.Addr().Is4() {
		unit, base, suffix = 8, 256, "in-addr.arpa"
		for _, b := range p.Addr().As4() {
			digits = append(digits, int(b))
		}
	} else {
		unit, base, suffix = 4, 16, "ip6.arpa"
		for _, b := range p.Addr().As16() {
			digits = append(digits, int(b>>4), int(b&0xF))
		}
	}
	whole, rest := p.Bits()/unit, p.Bits()%unit
	label := func(v int) string {
		if unit == 8 {
			return strconv.Itoa(v)
		}
		return strconv.FormatInt(int64(v), 16)
	}
	name := func(labels []int) string {
		parts := make([]string, 0, len(labels)+1)
		for i := len(labels) - 1; i >= 0; i-- {
			parts = append(parts, label(labels[i]))
		}
		return strings.Join(append(parts, suffix), ".")
	}
	if rest == 0 {
		return []string{name(digits[:whole])}
	}
	var zones []string
	first := digits[whole]
	for v := first; v < first+(1<<(unit-rest)) && v < base; v++ {
		labels := append(append([]int(nil), digits[:whole]...), v)
		zones = append(zones, name(labels))
	}
	return zones
}

// record maps dnsmasq's static record directives to local.records lines.
func (im *importer) record(d Directive) {
	fields := strings.Split(d.Value, ",")
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	fqdn := func(s string) string { return strings.TrimSuffix(s, ".") + "." }
	var lines []string
	ttlDropped := false
	switch d.Name {
	case "host-record": // name[,name...],[IPv4][,IPv6][,TTL]
		var names, addrs []string
		for i, f := range fields {
			if a, err := netip.ParseAddr(f); err == nil {
				addrs = append(addrs, a.String())
			} else if _, err := strconv.Atoi(f); err == nil && i == len(fields)-1 && i > 0 {
				ttlDropped = true
			} else if f != "" {
				names = append(names, f)
			}
		}
		for _, n := range names {
			for _, a := range addrs {
				typ := "A"
				if strings.Contains(a, ":") {
					typ = "AAAA"
				}
				lines = append(lines, fqdn(n)+" "+typ+" "+a)
			}
		}
	case "cname": // cname,[cname,...]target[,TTL]
		if _, err := strconv.Atoi(fields[len(fields)-1]); err == nil && len(fields) > 2 {
			fields, ttlDropped = fields[:len(fields)-1], true
		}
		if len(fields) >= 2 {
			target := fields[len(fields)-1]
			for _, alias := range fields[:len(fields)-1] {
				lines = append(lines, fqdn(alias)+" CNAME "+fqdn(target))
			}
		}
	case "ptr-record": // name[,target]
		if len(fields) == 2 {
			lines = append(lines, fqdn(fields[0])+" PTR "+fqdn(fields[1]))
		}
	case "txt-record": // name[,"text"...]
		var texts []string
		for _, f := range fields[1:] {
			texts = append(texts, strconv.Quote(strings.Trim(f, `"`)))
		}
		if len(texts) > 0 {
			lines = append(lines, fqdn(fields[0])+" TXT "+strings.Join(texts, " "))
		}
	case "mx-host": // name[,target[,preference]]
		if len(fields) >= 2 {
			pref := "1"
			if len(fields) == 3 {
				pref = fields[2]
			}
			lines = append(lines, fqdn(fields[0])+" MX "+pref+" "+fqdn(fields[1]))
		}
	case "srv-host": // _service._prot.domain,target,port[,priority[,weight]]
		if len(fields) >= 3 {
			prio, weight := "0", "0"
			if len(fields) >= 4 {
				prio = fields[3]
			}
			if len(fields) >= 5 {
				weight = fields[4]
			}
			lines = append(lines, fqdn(fields[0])+" SRV "+prio+" "+weight+" "+fields[2]+" "+fqdn(fields[1]))
		}
	}
	if len(lines) == 0 {
		im.note(d, false, "this form (defaults taken from the machine, or a missing target) has no towerd equivalent")
		return
	}
	for _, line := range lines {
		if _, err := dns.NewRR(line); err != nil {
			im.note(d, false, fmt.Sprintf("%q is not a record towerd reads: %v", line, err))
			return
		}
	}
	im.local.records = append(im.local.records, lines...)
	for range lines {
		im.local.recordsFrom = append(im.local.recordsFrom, d.where())
	}
	if ttlDropped {
		im.noteAs(d, true, false, "the TTL is dropped: local answers carry local.ttl")
	}
}

// finishLocal writes the [local] keys that depend on the whole file. The
// switches are written even when dnsmasq lacks them: towerd's defaults
// are on, dnsmasq's off.
func (im *importer) finishLocal() {
	l := &im.local
	if l.noHosts || len(l.addnHosts) > 0 {
		files := []string{}
		if !l.noHosts {
			files = append(files, config.DefaultHostsFile)
		}
		files = append(files, l.addnHosts...)
		im.keys = append(im.keys, importedKey{table: "local", key: "hosts_files", value: files, from: strings.Join(l.hostsFrom, ", ")})
	}
	if !l.domainNeeded {
		im.keys = append(im.keys, importedKey{table: "local", key: "domain_needed", value: false,
			from: "no domain-needed: dnsmasq forwards names without a dot"})
	}
	if !l.bogusPriv {
		im.keys = append(im.keys, importedKey{table: "local", key: "bogus_priv", value: false,
			from: "no bogus-priv: dnsmasq forwards private reverse lookups"})
	}
	if len(l.domains) > 0 {
		im.keys = append(im.keys, importedKey{table: "local", key: "domains", value: l.domains, from: strings.Join(dedupe(l.domainsFrom), " ")})
	}
	if len(l.records) > 0 {
		im.keys = append(im.keys, importedKey{table: "local", key: "records", value: l.records, from: strings.Join(dedupe(l.recordsFrom), " ")})
	}
}

func (im *importer) localAddresses() []config.Address {
	var out []config.Address
	for _, a := range im.local.addresses {
		out = append(out, config.Address{Name: a.name, Addresses: a.addrs, Comment: strings.Join(dedupe(a.from), " ")})
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
