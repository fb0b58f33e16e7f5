package dnsmasqimport

// Where names go: server=, local=, domain= as zones and local domains.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// dhcpDomain handles domain=DOMAIN[,RANGE[,local]]: the domain of the
// DHCP clients, which towerd does not serve; with ",local" it is also
// local=/DOMAIN/ and local= for RANGE's reverse zones (dnsmasq(8)).
func (im *importer) dhcpDomain(d Directive) {
	fields := strings.Split(d.Value, ",")
	if len(fields) != 3 || strings.TrimSpace(fields[2]) != "local" {
		im.note(d, false, unsupported["domain"])
		return
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(fields[1]))
	if err != nil {
		im.note(d, false, fmt.Sprintf("%q is not an address prefix", strings.TrimSpace(fields[1])))
		return
	}
	domains := append([]string{strings.TrimSpace(fields[0])}, reverseZones(p.Masked())...)
	im.server(Directive{File: d.File, Line: d.Line, Name: "local", Value: "/" + strings.Join(domains, "/") + "/", Has: true})
	im.noteAs(d, true, false, "carried over as local domains (the \",local\" part); "+unsupported["domain"])
}

// server handles server= and local=: "ADDR[#PORT][@SOURCE]" for every name,
// "/d1/d2/ADDR[#PORT]" for domains, "/d/#" for "the usual servers", and
// "/d/" for "local only", which towerd cannot do.
func (im *importer) server(d Directive) {
	domains := []string{"#"}
	addr := d.Value
	if strings.HasPrefix(addr, "/") {
		i := strings.LastIndex(addr, "/")
		domains, addr = strings.Split(addr[1:i], "/"), addr[i+1:]
	}
	if addr == "" {
		// local=/d/ and server=/d/: answered from local data only.
		for _, dom := range domains {
			if dom == "" || dom == "#" || strings.Contains(dom, "*") {
				im.note(d, false, "unqualified-name, catch-all and wildcard local domains have no towerd equivalent")
				continue
			}
			im.localDomain(d, strings.ToLower(strings.TrimSuffix(dom, "."))+".")
		}
		return
	}
	var hostport string
	if addr != "#" {
		host, source, hasSource := strings.Cut(addr, "@")
		ip, port, _ := strings.Cut(host, "#")
		if port == "" {
			port = "53"
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			im.note(d, false, fmt.Sprintf("%q is not an IP address", ip))
			return
		}
		hostport = net.JoinHostPort(ip, port)
		if hasSource {
			im.noteAs(d, true, false, "the source address or interface @"+source+" is dropped: towerd lets the kernel choose")
		}
	}
	for _, dom := range domains {
		dom, ok := im.domain(d, dom)
		if !ok {
			continue
		}
		z := im.zone(dom)
		z.from = append(z.from, d.where())
		if hostport == "" {
			z.useDefault = true
		} else {
			z.servers = append(z.servers, hostport)
		}
	}
}

// domain turns one /domain/ of a server= or address= line into a zone
// name: "#" is every name ("."), the rest is lower-cased and fully
// qualified. Unqualified-name ("//") and wildcard domains have no towerd
// equivalent: they are noted and ok is false.
func (im *importer) domain(d Directive, dom string) (name string, ok bool) {
	switch {
	case dom == "#":
		return ".", true
	case dom == "" || strings.Contains(dom, "*"):
		im.note(d, false, "unqualified-name and wildcard domains have no towerd equivalent")
		return "", false
	default:
		return strings.ToLower(strings.TrimSuffix(dom, ".")) + ".", true
	}
}

func (im *importer) zone(name string) *importedZone {
	for _, z := range im.zones {
		if z.name == name {
			return z
		}
	}
	z := &importedZone{name: name}
	im.zones = append(im.zones, z)
	return z
}
