package doctor

import (
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// checkNsswitch reads glibc's hosts: order: what it asks before dns, and
// whether it asks dns (and so resolv.conf, and so towerd) at all. Without
// nsswitch.conf, or without a hosts: line, glibc's built-in order asks
// dns and files; there is nothing to say.
func checkNsswitch(n *Node) []Finding {
	h, ok := n.hostsOrder()
	if !ok {
		return nil
	}
	sources, line, dns, files, resolve := h.sources, h.line, h.dns, h.files, h.resolve
	var out []Finding
	switch {
	case !n.Towerd.Installed:
		// Without towerd, resolved or no DNS at all may be the design.
	case dns < 0 && resolve >= 0:
		out = append(out, newFinding("nsswitch-bypasses-towerd", Problem, "hosts: %s: no dns, so resolv.conf is never read; lookups go to systemd-resolved", line))
	case dns < 0:
		out = append(out, newFinding("nsswitch-bypasses-towerd", Problem, "hosts: %s: no dns, so glibc asks no DNS server", line))
	case resolve >= 0 && resolve < dns && n.Resolved.Running:
		// Without resolved, nss-resolve answers UNAVAIL and glibc goes
		// on to dns: nothing is bypassed.
		out = append(out, newFinding("nsswitch-bypasses-towerd", Problem, "hosts: %s: resolve comes before dns, and systemd-resolved is on this node", line))
	}
	if dns >= 0 && (files < 0 || files > dns) {
		saw := "hosts: %s: files comes after dns"
		if files < 0 {
			saw = "hosts: %s: no files"
		}
		out = append(out, newFinding("nsswitch-files-after-dns", Warning, saw, line))
	}
	for i, s := range sources {
		if dns < 0 || i > dns || !strings.HasPrefix(s.Name, "mdns") || !strings.HasSuffix(s.Name, "_minimal") {
			continue
		}
		if !returnsOnNotFound(s.Actions) {
			out = append(out, newFinding("nsswitch-mdns-falls-through", Warning, "hosts: %s: %s has no [NOTFOUND=return] before dns", line, s.Name))
		}
	}
	return out
}

// hostsOrder is nsswitch.conf's hosts: line: its sources in order, and
// where dns, files and resolve stand (-1: absent).
type hostsOrder struct {
	sources             []install.NssSource
	line                string
	dns, files, resolve int
}

// hostsOrder reads the hosts: line; ok is false without nsswitch.conf or
// without the line (glibc's built-in order then asks dns and files).
func (n *Node) hostsOrder() (hostsOrder, bool) {
	if !n.Nsswitch.ok() {
		return hostsOrder{}, false
	}
	sources, ok := install.HostsSources(n.Nsswitch.Data)
	if !ok {
		return hostsOrder{}, false
	}
	h := hostsOrder{sources: sources, line: hostsLine(sources), dns: -1, files: -1, resolve: -1}
	for i := len(sources) - 1; i >= 0; i-- {
		switch sources[i].Name {
		case "dns":
			h.dns = i
		case "files":
			h.files = i
		case "resolve":
			h.resolve = i
		}
	}
	return h, true
}

// filesBeforeDNS: glibc (and Go) read /etc/hosts before asking DNS.
func (n *Node) filesBeforeDNS() bool {
	h, ok := n.hostsOrder()
	return !ok || (h.files >= 0 && (h.dns < 0 || h.files < h.dns))
}

// returnsOnNotFound tells whether the action items end the lookup when
// the source did not find the name.
func returnsOnNotFound(actions []string) bool {
	for _, a := range actions {
		for _, item := range strings.Fields(strings.Trim(a, "[]")) {
			status, action, _ := strings.Cut(item, "=")
			if strings.EqualFold(status, "NOTFOUND") && strings.EqualFold(action, "return") {
				return true
			}
		}
	}
	return false
}

func hostsLine(sources []install.NssSource) string {
	var b strings.Builder
	for i, s := range sources {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.Name)
		for _, a := range s.Actions {
			b.WriteString(" " + a)
		}
	}
	return b.String()
}
