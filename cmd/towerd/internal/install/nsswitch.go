package install

import (
	"bytes"
	"fmt"
	"strings"
)

// NsswitchPath is glibc's name-service switch file, as the target system
// sees it.
const NsswitchPath = "/etc/nsswitch.conf"

// NsswitchEdit is what install does to nsswitch.conf's hosts: line.
type NsswitchEdit struct {
	// Changed is false when no hosts: line names the resolve module:
	// nothing to write, and Data is the input unchanged.
	Changed bool
	// Data is the whole file after the edit.
	Data []byte
	// Removed is each "resolve" entry taken out with the action items that
	// followed it, as the file spelt them, e.g. "resolve [!UNAVAIL=return]".
	Removed []string
	// Reason is the report line.
	Reason string
}

// nsswitchMarker is the comment install puts above a hosts: line it
// rewrote, so a reader of the file knows why resolve is gone and how to get
// it back.
const nsswitchMarker = "# towerd install removed"

// RewriteNsswitch takes the nss-resolve module out of every hosts: line of
// data, so glibc goes "files ... dns" and its dns step asks the nameserver
// in /etc/resolv.conf: towerd. Everything else in the file stays byte for
// byte as it was: comments, other databases, and the other hosts: sources
// (files, myhostname, mymachines, mdns4_minimal and their action items).
//
// Why remove resolve instead of pointing systemd-resolved at towerd: with
// resolve in the hosts: line, getaddrinfo talks to resolved over varlink,
// not DNS, so resolv.conf is never read; resolved keeps its own cache (it
// stores NXDOMAIN, which towerd never does, so a name that appears would
// stay hidden behind it), and it forwards to the servers DHCP gave each
// link. Making resolved forward everything to towerd (DNS=127.0.0.1,
// Domains=~.) would put towerd into /run/systemd/resolve/resolv.conf, the
// file towerd itself follows for its upstreams, and leave two caches in
// series. With resolve gone, resolved still runs and still learns DHCP
// servers for towerd to follow; only glibc stops asking it.
//
// "[!UNAVAIL=return]" after resolve exists so that dns is used only when
// resolved is not running; it belongs to resolve and goes with it. When a
// hosts: line named resolve but not dns, dns is put where resolve stood:
// without it glibc would ask no DNS server at all.
func RewriteNsswitch(data []byte) NsswitchEdit {
	lines := bytes.SplitAfter(data, []byte("\n"))
	var out bytes.Buffer
	edit := NsswitchEdit{}
	for _, line := range lines {
		rewritten, removed, ok := rewriteHostsLine(string(line))
		if !ok {
			out.Write(line)
			continue
		}
		edit.Changed = true
		edit.Removed = append(edit.Removed, removed...)
		fmt.Fprintf(&out, "%s %s (see `towerd uninstall`).\n", nsswitchMarker, quoteEach(removed))
		out.WriteString(rewritten)
	}
	if !edit.Changed {
		edit.Data = data
		edit.Reason = NsswitchPath + ": hosts: does not use nss-resolve; glibc already asks resolv.conf"
		return edit
	}
	edit.Data = out.Bytes()
	edit.Reason = NsswitchPath + ": removed " + quoteEach(edit.Removed) + " from hosts:, so glibc lookups go to towerd through resolv.conf instead of around it to systemd-resolved"
	return edit
}

func quoteEach(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "\"" + s + "\""
	}
	return strings.Join(q, ", ")
}

// rewriteHostsLine edits one line. ok is false when the line is not a
// hosts: line or does not name resolve.
func rewriteHostsLine(line string) (rewritten string, removed []string, ok bool) {
	body, eol := line, ""
	if strings.HasSuffix(body, "\n") {
		body, eol = body[:len(body)-1], "\n"
	}
	comment := ""
	if i := strings.IndexByte(body, '#'); i >= 0 {
		body, comment = body[:i], body[i:]
	}
	trimmed := strings.TrimLeft(body, " \t")
	indent := body[:len(body)-len(trimmed)]
	db, rest, found := strings.Cut(trimmed, ":")
	if !found || strings.TrimSpace(db) != "hosts" || strings.ContainsAny(strings.TrimSpace(db), " \t") {
		return "", nil, false
	}
	items := nssItems(rest)
	hasDNS := false
	for _, it := range items {
		if it.text == "dns" {
			hasDNS = true
		}
	}
	var kept []nssItem
	for i := 0; i < len(items); i++ {
		it := items[i]
		if it.text != "resolve" {
			kept = append(kept, it)
			continue
		}
		r := it.text
		for i+1 < len(items) && items[i+1].action {
			i++
			r += " " + items[i].text
		}
		removed = append(removed, r)
		if !hasDNS {
			kept = append(kept, nssItem{text: "dns", lead: it.lead})
			hasDNS = true
		}
	}
	if removed == nil {
		return "", nil, false
	}
	var b strings.Builder
	b.WriteString(indent)
	b.WriteString(db)
	b.WriteString(":")
	for i, it := range kept {
		lead := it.lead
		if i == 0 && lead == "" {
			lead = " "
		}
		if i > 0 && lead == "" {
			lead = " "
		}
		b.WriteString(lead)
		b.WriteString(it.text)
	}
	// Trailing blanks before a comment stay where they were.
	b.WriteString(trailingBlank(rest))
	b.WriteString(comment)
	b.WriteString(eol)
	return b.String(), removed, true
}

// nssItem is one source or one [action] group, with the blanks before it.
type nssItem struct {
	lead, text string
	action     bool
}

// nssItems splits the sources of a line the way glibc's parser does: words
// separated by blanks, and [ ... ] groups that may contain blanks.
func nssItems(s string) []nssItem {
	var items []nssItem
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j == len(s) {
			break
		}
		k := j
		action := s[j] == '['
		if action {
			for k < len(s) && s[k] != ']' {
				k++
			}
			if k < len(s) {
				k++
			}
		} else {
			for k < len(s) && s[k] != ' ' && s[k] != '\t' && s[k] != '[' {
				k++
			}
		}
		items = append(items, nssItem{lead: s[i:j], text: s[j:k], action: action})
		i = k
	}
	return items
}

func trailingBlank(s string) string {
	t := strings.TrimRight(s, " \t")
	return s[len(t):]
}

// NssSource is one source of a hosts: line ("files", "resolve") with the
// [action] items that follow it, as written ("[!UNAVAIL=return]").
type NssSource struct {
	Name    string
	Actions []string
}

// HostsSources returns the sources of nsswitch.conf's first hosts: line in
// order, parsed as RewriteNsswitch parses them, and whether there is such a
// line. towerd doctor reads the order from it: what glibc asks before dns,
// and whether dns is asked at all.
func HostsSources(data []byte) ([]NssSource, bool) {
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		db, rest, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found || strings.TrimSpace(db) != "hosts" {
			continue
		}
		var out []NssSource
		for _, it := range nssItems(rest) {
			switch {
			case !it.action:
				out = append(out, NssSource{Name: it.text})
			case len(out) > 0:
				out[len(out)-1].Actions = append(out[len(out)-1].Actions, it.text)
			}
		}
		return out, true
	}
	return nil, false
}
