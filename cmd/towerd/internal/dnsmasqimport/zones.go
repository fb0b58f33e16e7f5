package dnsmasqimport

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

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
		im.note(d, false, "answering a domain only locally (from hosts files or DHCP) is not supported")
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
			im.note(d, true, "the source address or interface @"+source+" is dropped: towerd lets the kernel choose")
		}
	}
	for _, dom := range domains {
		switch {
		case dom == "#":
			dom = "."
		case dom == "" || strings.Contains(dom, "*"):
			im.note(d, false, "unqualified-name and wildcard domains have no towerd equivalent")
			continue
		default:
			dom = strings.ToLower(strings.TrimSuffix(dom, ".")) + "."
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

// finish settles what depends on the whole file: listen addresses with the
// port, zones that follow ".", and how resolv.conf combines with server=.
func (im *importer) finish(dirs []Directive) {
	port := im.port
	if port == "" {
		port = "53"
	}
	if len(im.listen) == 0 && im.port != "" {
		// dnsmasq without listen-address serves every interface; towerd
		// stays on loopback, the only place its default allow-list answers.
		im.listen, im.listenAt = []string{"127.0.0.1"}, []string{im.portAt}
	}
	var listen []string
	for _, a := range im.listen {
		listen = append(listen, net.JoinHostPort(a, port))
		if ip, err := netip.ParseAddr(a); err == nil && !ip.IsLoopback() {
			im.notes = append(im.notes, Note{where: im.listenAt[0], directive: "listen-address=" + a, partly: true,
				why: "towerd answers only clients in allow (loopback by default): add their networks there"})
		}
	}
	if len(listen) > 0 {
		im.keys = append(im.keys, importedKey{key: "listen", value: listen,
			from: strings.Join(im.listenFrom, ", ")})
	}

	var root *importedZone
	for _, z := range im.zones {
		if z.name == "." {
			root = z
		}
	}
	for _, z := range im.zones {
		if !z.useDefault || z.name == "." {
			continue
		}
		if root != nil && len(root.servers) > 0 {
			z.servers = append(z.servers, root.servers...)
		} else {
			im.notes = append(im.notes, Note{where: z.from[0], directive: "server=/" + strings.TrimSuffix(z.name, ".") + "/#",
				why: "the usual servers come from resolv.conf here; the domain follows zone \".\" without a zone of its own"})
		}
	}
	first := func(name string) Directive {
		for _, d := range dirs {
			if d.Name == name {
				return d
			}
		}
		return Directive{}
	}
	switch {
	case root != nil && len(root.servers) > 0 && !im.noResolv:
		im.note(first("server"), true, "without no-resolv dnsmasq also asked resolv.conf's servers; towerd asks only those listed with server=")
	case (root == nil || len(root.servers) == 0) && im.noResolv:
		im.note(first("no-resolv"), true, "no server= for every name: dnsmasq had no upstream for them; towerd will ask resolv.conf's servers")
	}
}

func dedupe(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
