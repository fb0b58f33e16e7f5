// Package dnsmasqimport turns a dnsmasq configuration into towerd's.
// ReadNode reads what dnsmasq reads on a node (Debian's defaults file
// turned into its command line, then its configuration file, in dnsmasq's
// order) and Read the files or directories named, both through a node's
// root (nodefs) and naming every file read; Import, which touches no file,
// maps the directives to towerd keys and zones, with a note for every
// directive not carried over, or only partly, naming its file and line.
// Run is `towerd import-dnsmasq`; install's --from-dnsmasq reads through
// the same functions (issues 16, 25).
package dnsmasqimport

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// importer is what `towerd import-dnsmasq` makes of a dnsmasq
// configuration: towerd keys with the lines they came from, zones, and notes
// on what could not be carried over.
type importer struct {
	source   string
	keys     []importedKey // in output order once sorted by table
	zones    []*importedZone
	comments []string // understood directives that need no key
	notes    []Note

	listen     []string // listen-address values
	listenAt   []string // where each was
	listenFrom []string // the lines listen is made of, for the comment
	port       string
	portAt     string
	noResolv   bool
	resolvSet  bool

	local localImport // local.go
}

// importedKey is one towerd key and the dnsmasq line it came from.
type importedKey struct {
	table, key string
	value      any // as config.Key.Value takes it
	from       string
}

type importedZone struct {
	name       string
	servers    []string
	from       []string
	useDefault bool // server=/domain/#: the servers of zone "."
}

// Note is a directive not carried over, or only partly.
type Note struct {
	where, directive, why string
	partly                bool
	changes               bool // towerd answers some question differently
}

// ChangesAnswers reports whether what was dropped makes towerd answer some
// question differently from dnsmasq (an rcode, a record, who gets an
// answer), as opposed to caching, logging or process settings.
// `towerd import-dnsmasq` exits 1 when any note does.
func (n Note) ChangesAnswers() bool { return n.changes }

// String is the note as printed: "file:line: directive: verdict: why".
func (n Note) String() string {
	verdict := "not carried over"
	if n.partly {
		verdict = "carried over partly"
	}
	return fmt.Sprintf("%s: %s: %s: %s", n.where, n.directive, verdict, n.why)
}

// unsupported explains the common directives towerd has no
// equivalent for; any other unknown directive is reported too, without why.
var unsupported = map[string]string{
	"interface":        "towerd listens on addresses (listen), not interfaces",
	"except-interface": "towerd listens on addresses (listen), not interfaces",
	"bind-interfaces":  "towerd binds exactly the listen addresses anyway",
	"bind-dynamic":     "towerd binds exactly the listen addresses anyway",
	"user":             "towerd.service runs towerd as its own unprivileged user",
	"group":            "towerd.service runs towerd as its own unprivileged user",
	"pid-file":         "systemd tracks towerd's process",
	"expand-hosts":     "towerd answers hosts files' names as written, without adding the domain",
	"domain":           "the domain of dnsmasq's DHCP clients, which towerd does not serve; with expand-hosts dnsmasq also adds it to hosts names, towerd does not",
	"dnssec":           "towerd does not validate DNSSEC (it passes the DO and CD bits on)",
	"clear-on-reload":  "towerd keeps its cache across reloads",
	"all-servers":      "towerd asks one server at a time, the next after a timeout taken from the round-trip time; it never races them",
}

// harmless are the directives whose loss changes no answer: where towerd
// listens and runs, what it logs, how it caches. Any other directive not
// carried over changes answers, unknown ones included.
var harmless = map[string]bool{
	"interface": true, "except-interface": true, "bind-interfaces": true, "bind-dynamic": true,
	"log-queries": true, "log-facility": true, "log-async": true, "log-dhcp": true, "log-debug": true,
	"user": true, "group": true, "pid-file": true, "keep-in-foreground": true, "no-daemon": true,
	"clear-on-reload": true, "all-servers": true, "neg-ttl": true, "no-negcache": true,
	"cache-size": true, "min-cache-ttl": true, "max-cache-ttl": true, "use-stale-cache": true,
	"dns-forward-max": true, "local-service": true, "edns-packet-max": true, "query-port": true,
	"min-port": true, "max-port": true, "no-round-robin": true, "fast-dns-retry": true,
	"dns-loop-detect": true, "ipset": true, "nftset": true, "conntrack": true, "enable-ra": true,
	"no-ping": true, "enable-tftp": true,
	// domain= names the DHCP domain; it changes DNS answers only with
	// expand-hosts, which is noted on its own.
	"domain": true,
}

// isHarmless is harmless with the families of DHCP, TFTP and quiet-*
// options; dhcp-range and dhcp-host are not: dnsmasq answers its DHCP
// clients' names, and towerd does not.
func isHarmless(name string) bool {
	switch {
	case name == "dhcp-range" || name == "dhcp-host":
		return false
	case strings.HasPrefix(name, "dhcp") || strings.HasPrefix(name, "tftp") || strings.HasPrefix(name, "quiet-"):
		return true
	}
	return harmless[name]
}

// Result is an imported configuration: the towerd.toml to write and what
// was not carried over.
type Result struct {
	// File renders as the towerd.toml, each key commented with the dnsmasq
	// line it came from, and the notes repeated in its header.
	File config.File
	// Notes are the directives not carried over, or only partly, in the
	// order they were found.
	Notes []Note
}

// Import maps directives, as Read returns them from source, to towerd's
// configuration. It reads no file, so every mapping is testable from a
// table of directives.
func Import(source string, dirs []Directive) Result {
	im := &importer{source: source}
	for _, d := range dirs {
		im.apply(d)
	}
	im.finish(dirs)
	return Result{File: im.file(), Notes: im.notes}
}

// file is the import as a towerd.toml, each key with the dnsmasq line it
// came from.
func (im *importer) file() config.File {
	f := config.File{Header: []string{
		"towerd configuration imported from " + im.source + " by `towerd import-dnsmasq`.",
		"Keys not set here keep towerd's defaults (towerd.toml(5), docs/configuration.md).",
		"Check it with: towerd check -config FILE",
	}}
	if len(im.comments) > 0 {
		f.Header = append(f.Header, "", "Understood, nothing to set:")
		for _, c := range im.comments {
			f.Header = append(f.Header, "  "+c)
		}
	}
	if len(im.notes) > 0 {
		f.Header = append(f.Header, "", "Not carried over, or only partly (also printed on stderr):")
		for _, n := range im.notes {
			f.Header = append(f.Header, "  "+n.String())
		}
	}
	for _, k := range im.keys {
		f.Keys = append(f.Keys, config.Key{Table: k.table, Name: k.key, Value: k.value, Comment: k.from})
	}
	for _, z := range im.zones {
		if len(z.servers) == 0 {
			continue
		}
		f.Zones = append(f.Zones, config.Zone{Name: z.name, Servers: dedupe(z.servers), Comment: strings.Join(z.from, " ")})
	}
	f.Addresses = im.localAddresses()
	return f
}

func (im *importer) set(d Directive, table, key string, value any) {
	for i, k := range im.keys {
		if k.table == table && k.key == key {
			im.keys[i].value, im.keys[i].from = value, d.where()+" "+d.String() // the last one wins, as in dnsmasq
			return
		}
	}
	im.keys = append(im.keys, importedKey{table: table, key: key, value: value, from: d.where() + " " + d.String()})
}

func (im *importer) note(d Directive, partly bool, why string) {
	im.noteAs(d, partly, !isHarmless(d.Name), why)
}

func (im *importer) noteAs(d Directive, partly, changes bool, why string) {
	im.notes = append(im.notes, Note{where: d.where(), directive: d.String(), why: why, partly: partly, changes: changes})
}

func (im *importer) comment(d Directive, what string) {
	im.comments = append(im.comments, fmt.Sprintf("%s (%s): %s", d.String(), d.where(), what))
}

// number parses a non-negative integer value or notes why not.
func (im *importer) number(d Directive) (int, bool) {
	n, err := strconv.Atoi(d.Value)
	if err != nil || n < 0 {
		im.note(d, false, fmt.Sprintf("%q is not a number", d.Value))
		return 0, false
	}
	return n, true
}

func (im *importer) apply(d Directive) {
	if im.localDirective(d) {
		return
	}
	switch d.Name {
	case "conf-file", "conf-dir", "servers-file":
		// Already read in place by Read.
	case "server", "local":
		im.server(d)
	case "listen-address":
		for _, a := range strings.Split(d.Value, ",") {
			if a = strings.TrimSpace(a); a != "" {
				im.listen = append(im.listen, a)
				im.listenAt = append(im.listenAt, d.where())
				im.listenFrom = append(im.listenFrom, d.where()+" listen-address="+a)
			}
		}
	case "port":
		if n, ok := im.number(d); ok {
			if n == 0 {
				im.note(d, false, "port=0 turns dnsmasq's DNS off; towerd always serves DNS")
				return
			}
			im.port, im.portAt = d.Value, d.where()
			im.listenFrom = append(im.listenFrom, d.where()+" "+d.String())
		}
	case "cache-size":
		if n, ok := im.number(d); ok {
			if n == 0 {
				im.note(d, false, "towerd always caches; cache.size keeps its default")
				return
			}
			im.set(d, "cache", "size", n)
		}
	case "min-cache-ttl", "max-cache-ttl":
		if n, ok := im.number(d); ok {
			im.set(d, "cache", strings.TrimSuffix(d.Name, "-cache-ttl")+"_ttl", time.Duration(n)*time.Second)
		}
	case "neg-ttl":
		// dnsmasq's TTL for a negative reply without an SOA; towerd's
		// applies to NODATA (NXDOMAIN is never cached), up to an hour.
		if n, ok := im.number(d); ok {
			if n > 3600 {
				im.note(d, true, "cache.nodata_without_soa_ttl is at most 1h")
				n = 3600
			}
			im.set(d, "cache", "nodata_without_soa_ttl", time.Duration(n)*time.Second)
		}
	case "no-negcache":
		im.note(d, true, "towerd never caches NXDOMAIN, as asked, but it does cache NODATA for its SOA's TTL; no key turns that off")
	case "use-stale-cache":
		im.set(d, "serve_stale", "enabled", true)
		// dnsmasq answers stale at once and refreshes in the background.
		im.set(d, "serve_stale", "client_timeout", time.Duration(0))
		// Without a value both stop at one day past expiry; 0 means no
		// limit in dnsmasq, which towerd does not offer.
		switch n, err := strconv.Atoi(d.Value); {
		case !d.Has:
		case err != nil || n < 0:
			im.note(d, true, fmt.Sprintf("%q is not a number of seconds; serve_stale.max_age keeps its default (24h)", d.Value))
		case n == 0:
			im.note(d, true, "dnsmasq serves stale answers of any age; towerd up to serve_stale.max_age (24h by default)")
		default:
			im.set(d, "serve_stale", "max_age", time.Duration(n)*time.Second)
		}
	case "dns-forward-max":
		if n, ok := im.number(d); ok && n > 0 {
			im.set(d, "upstream", "max_inflight", n)
			im.note(d, true, "dnsmasq's limit is per server group (per domain); towerd's counts every upstream resolution")
		}
	case "no-resolv":
		im.noResolv = true
		im.comment(d, "zone \".\" lists its servers, so resolv.conf is not read")
	case "resolv-file":
		if im.resolvSet {
			im.note(d, false, "towerd reads one resolv.conf; the first resolv-file is used")
			return
		}
		im.resolvSet = true
		im.set(d, "", "resolv_conf", d.Value)
	case "strict-order":
		im.comment(d, "towerd always tries servers in the order listed")
	case "no-poll":
		im.noteAs(d, true, false, "towerd follows the resolv.conf zone \".\" forwards to as it changes (inotify, and a poll every second); no key turns that off")
	case "log-queries":
		im.set(d, "", "log_queries", true)
		if d.Has {
			im.noteAs(d, true, false, "towerd's query log has one format (client, name, type, rcode, source, upstream, duration); "+d.Value+" adds nothing to it")
		}
	case "domain":
		im.dhcpDomain(d)
	default:
		why, ok := unsupported[d.Name]
		switch {
		case ok:
		case strings.HasPrefix(d.Name, "-"):
			why = "a one-letter option the import does not read: write it as --name=value"
		case strings.HasPrefix(d.Name, "dhcp"):
			why = "towerd does not serve DHCP"
		default:
			why = "no towerd equivalent"
		}
		im.note(d, false, why)
	}
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
			im.notes = append(im.notes, Note{where: im.listenAt[0], directive: "listen-address=" + a, partly: true, changes: true,
				why: "towerd answers only clients in allow (loopback by default): add their networks there"})
		}
	}
	if len(listen) > 0 {
		im.keys = append(im.keys, importedKey{key: "listen", value: listen,
			from: strings.Join(im.listenFrom, ", ")})
	}

	im.finishLocal() // local.go

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
		} else if len(z.servers) > 0 {
			// server=/d/# beside server=/d/ADDR: dnsmasq asks both, but
			// the usual servers come from resolv.conf, which a zone's
			// servers cannot name.
			im.notes = append(im.notes, Note{where: z.from[0], directive: "server=/" + strings.TrimSuffix(z.name, ".") + "/#",
				partly: true, changes: true,
				why: "the usual servers come from resolv.conf here; zone \"" + z.name + "\" keeps only its own servers"})
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
		im.noteAs(first("server"), true, false, "without no-resolv dnsmasq also asked resolv.conf's servers; towerd asks only those listed with server=")
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
