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
	if !n.Nsswitch.ok() {
		return nil
	}
	sources, ok := install.HostsSources(n.Nsswitch.Data)
	if !ok {
		return nil
	}
	line := hostsLine(sources)
	index := func(match func(string) bool) int {
		for i, s := range sources {
			if match(s.Name) {
				return i
			}
		}
		return -1
	}
	dns := index(func(s string) bool { return s == "dns" })
	files := index(func(s string) bool { return s == "files" })
	resolve := index(func(s string) bool { return s == "resolve" })
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
