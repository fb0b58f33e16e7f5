package doctor

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// checkManager: resolv.conf names towerd, but what maintains the file is
// not stopped from rewriting it (install's drop-in or hook is missing).
func checkManager(n *Node) []Finding {
	if n.Manager == nil || len(n.ManagerMissing) == 0 || !n.ResolvConf.ok() || !n.resolverPath().viaTowerd {
		return nil
	}
	f := newFinding("resolv-conf-manager-reclaims", Warning, "%s maintains resolv.conf (%s)", n.Manager.Manager, n.Manager.Reason)
	for _, p := range n.ManagerMissing {
		f = f.with(p, "missing")
	}
	for _, w := range n.Manager.Warnings {
		f = f.with("note", "%s", w)
	}
	return []Finding{f}
}

// checkDocker: containers on Docker's default bridge and towerd.
func checkDocker(n *Node) []Finding {
	d := n.Docker
	if d == nil || !d.Present || !n.Towerd.Installed {
		return nil
	}
	addr := d.Bridge.Addr().String()
	listen := n.Towerd.Config.Listen
	dns := "no \"dns\" key"
	if d.PreviousDNS != "" {
		dns = "\"dns\": " + d.PreviousDNS
	}
	if !d.DaemonJSONExisted {
		dns = "no " + install.DockerDaemonJSON
	}
	switch {
	case d.DaemonJSONChanged:
		return []Finding{newFinding("docker-bypasses-towerd", Warning,
			"Docker is installed with %s; docker0 is %s", dns, d.Bridge)}
	case !isTowerd(net.JoinHostPort(addr, "53"), listen):
		return []Finding{newFinding("docker-dns-unanswered", Problem,
			"%s gives containers %s, and towerd listens on %s only", install.DockerDaemonJSON, addr, strings.Join(listen, ", "))}
	}
	return nil
}

// checkResolved: systemd-resolved beside towerd.
func checkResolved(n *Node) []Finding {
	r := n.Resolved
	if !r.Running || !n.Towerd.Installed {
		return nil
	}
	var out []Finding
	switch strings.ToLower(r.StubListener) {
	case "no", "false", "0", "off":
	default:
		saw := "DNSStubListener is not set to no"
		if by := r.SetBy["DNSStubListener"]; by != "" {
			saw = fmt.Sprintf("DNSStubListener=%s (%s)", r.StubListener, by)
		}
		out = append(out, newFinding("resolved-stub-listening", Warning, "%s", saw))
	}
	rz := n.Towerd.RootZone
	if !rz.Configured && rz.File == install.ResolvedUpstreams {
		var own []string
		for _, s := range r.DNS {
			if server, ok := resolvedServer(s); ok && isTowerd(server, n.Towerd.Config.Listen) {
				own = append(own, s)
			}
		}
		if len(own) > 0 {
			out = append(out, newFinding("resolved-forwards-to-towerd", Problem,
				"DNS=%s (%s), and zone \".\" follows %s", strings.Join(own, " "), r.SetBy["DNS"], install.ResolvedUpstreams))
		}
	}
	return out
}

// resolvedServer reads a DNS= entry of resolved.conf(5): ADDR, ADDR:PORT,
// [ADDR]:PORT, each maybe with %IFACE and #NAME, as host:port.
func resolvedServer(s string) (string, bool) {
	s, _, _ = strings.Cut(s, "#")
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return net.JoinHostPort(ap.Addr().WithZone("").String(), strconv.Itoa(int(ap.Port()))), true
	}
	host, _, _ := strings.Cut(s, "%")
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.String(), "53"), true
	}
	return "", false
}

// checkDnsmasq: a dnsmasq that serves DNS and starts at boot, or runs.
func checkDnsmasq(n *Node) []Finding {
	d := n.Dnsmasq
	if !d.ServesDNS || !n.Towerd.Installed || !(d.Enabled || n.DnsmasqRunning) {
		return nil
	}
	state := "enabled at boot"
	if n.DnsmasqRunning {
		state = "running"
		if d.Enabled {
			state = "running and enabled at boot"
		}
	}
	f := newFinding("dnsmasq-serves-dns", Problem, "dnsmasq is %s, with its DNS side on", state)
	for _, e := range d.Evidence {
		f = f.with(e, "")
	}
	for _, c := range d.StopCommands {
		f = f.with("to stop it", "%s", c)
	}
	return []Finding{f}
}

// checkListeners: sockets on port 53 that are not towerd's.
func checkListeners(n *Node) []Finding {
	listen := n.Towerd.Config.Listen
	var conflict, other Finding
	for _, l := range n.Listeners {
		if ownedByTowerd(l) {
			continue
		}
		who := owners(l)
		subject := l.Proto + " " + l.Addr.String()
		if n.Towerd.Installed && overlapsListen(l.Addr, listen) {
			if conflict.ID == "" {
				conflict = newFinding("port53-conflict", Problem, "towerd listens on %s", strings.Join(listen, ", "))
			}
			conflict = conflict.with(subject, "%s", who)
			continue
		}
		if other.ID == "" {
			other = newFinding("port53-other-resolver", Warning, "sockets on port 53 that are not towerd's")
		}
		other = other.with(subject, "%s", who)
	}
	var out []Finding
	for _, f := range []Finding{conflict, other} {
		if f.ID != "" {
			out = append(out, f)
		}
	}
	return out
}

// ownedByTowerd: towerd holds the socket, or PID 1 does (towerd.socket
// binds it before towerd starts).
func ownedByTowerd(l listener) bool {
	for _, p := range l.Owners {
		if p.Comm == "towerd" || (p.PID == 1 && p.Comm == "systemd") {
			return true
		}
	}
	return false
}

func owners(l listener) string {
	if len(l.Owners) == 0 {
		return "held by a process doctor cannot see (run it as root)"
	}
	var names []string
	for _, p := range l.Owners {
		names = append(names, fmt.Sprintf("%s (pid %d)", p.Comm, p.PID))
	}
	return strings.Join(names, ", ")
}

// overlapsListen tells whether a socket bound to addr keeps towerd from
// binding one of its listen addresses: the same address, or a wildcard of
// the same family on either side.
func overlapsListen(addr netip.AddrPort, listen []string) bool {
	for _, l := range listen {
		ap, err := netip.ParseAddrPort(l)
		if err != nil || ap.Port() != addr.Port() {
			continue
		}
		a, b := ap.Addr().Unmap(), addr.Addr()
		if a == b || ((a.IsUnspecified() || b.IsUnspecified()) && a.Is4() == b.Is4()) {
			return true
		}
	}
	return false
}
