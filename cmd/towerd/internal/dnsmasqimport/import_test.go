package dnsmasqimport

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/test/dnstest"
)

func TestParseDnsmasqLine(t *testing.T) {
	tests := []struct {
		line, name, value string
		ok, has           bool
	}{
		{"server=/consul/127.0.0.1#8600", "server", "/consul/127.0.0.1#8600", true, true},
		{"server=192.0.2.1#5353 # the lab resolver", "server", "192.0.2.1#5353", true, true},
		{"# cache-size=10", "", "", false, false},
		{"   ", "", "", false, false},
		{"no-resolv", "no-resolv", "", true, false},
		{"use-stale-cache=0", "use-stale-cache", "0", true, true},
		{" port = 5353 ", "port", "5353", true, true},
		{`resolv-file="/etc/resolv.dnsmasq"`, "resolv-file", "/etc/resolv.dnsmasq", true, true},
	}
	for _, tt := range tests {
		d, ok := parseLine(tt.line)
		if ok != tt.ok || d.Name != tt.name || d.Value != tt.value || d.Has != tt.has {
			t.Errorf("parseLine(%q) = %+v, %v; want %q=%q has=%v, %v", tt.line, d, ok, tt.name, tt.value, tt.has, tt.ok)
		}
	}
}

// rootOf opens a node root for one test, its files written first.
func rootOf(t *testing.T, files map[string]string) *nodefs.Root {
	t.Helper()
	root := t.TempDir()
	dnstest.WriteTree(t, root, files)
	n, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestDnsmasqConfDirRules(t *testing.T) {
	const dir = "/etc/dnsmasq.d"
	tree := map[string]string{"etc/dnsmasq.d/sub.conf/": ""}
	for _, name := range []string{"10-consul.conf", "20-lab.conf", "README", "old.conf~", ".hidden.conf", "#auto#", "x.conf.dpkg-dist"} {
		tree["etc/dnsmasq.d/"+name] = "# " + name + "\n"
	}
	n := rootOf(t, tree)
	tests := map[string][]string{
		dir:                        {"10-consul.conf", "20-lab.conf", "README", "x.conf.dpkg-dist"},
		dir + ",*.conf":            {"10-consul.conf", "20-lab.conf"},
		dir + ",.dpkg-dist,README": {"10-consul.conf", "20-lab.conf"},
	}
	for value, want := range tests {
		files, err := (&reader{files: n}).confDir(value)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			got = append(got, filepath.Base(f))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("conf-dir=%s reads %q, want %q", value, got, want)
		}
	}
}

func TestImportDnsmasqMapping(t *testing.T) {
	const main = "/etc/dnsmasq.conf"
	n := rootOf(t, map[string]string{
		"etc/extra.conf": "server=/corp.example/192.0.2.53\nserver=/corp.example/192.0.2.54#5353\n",
		"etc/dnsmasq.conf": `# a node's dnsmasq
listen-address=127.0.0.1,::1
port=5353
no-resolv
strict-order
server=192.0.2.1
server=2001:db8::1#53
server=/consul/127.0.0.1#8600
server=/public.corp.example/#
server=/10.in-addr.arpa/192.0.2.53@eth0
server=/local.lan/
cache-size=2000
min-cache-ttl=30
max-cache-ttl=3600
neg-ttl=60
no-negcache
use-stale-cache=86400
dns-forward-max=300
all-servers
domain-needed
dhcp-range=192.0.2.100,192.0.2.200
conf-file=/etc/extra.conf
`})
	read, err := Read(n, []string{main})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(read.Paths(), " "); got != "/etc/dnsmasq.conf /etc/extra.conf" {
		t.Errorf("files read: %s", got)
	}
	res := Import(main, read.Directives)
	out := res.File.Render()
	cfg := config.DefaultConfig()
	if err := config.Decode(out, "imported", &cfg); err != nil {
		t.Fatalf("the import does not decode: %v\n%s", err, out)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the import is not valid: %v\n%s", err, out)
	}
	zones, _, err := cfg.ForwardZones(t.TempDir()) // an empty root: no resolv.conf may be needed
	if err != nil {
		t.Fatalf("zones: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, z := range zones {
		got[z.Name] = strings.Join(z.Servers, " ")
	}
	want := map[string]string{
		".":                    "192.0.2.1:53 [2001:db8::1]:53",
		"consul.":              "127.0.0.1:8600",
		"public.corp.example.": "192.0.2.1:53 [2001:db8::1]:53",
		"10.in-addr.arpa.":     "192.0.2.53:53",
		"corp.example.":        "192.0.2.53:53 192.0.2.54:5353",
	}
	for name, servers := range want {
		if got[name] != servers {
			t.Errorf("zone %s -> %q, want %q\n%s", name, got[name], servers, out)
		}
	}
	if _, ok := got["local.lan."]; ok {
		t.Errorf("a local-only domain became a zone")
	}
	if l := cfg.Local; strings.Join(l.Domains, " ") != "local.lan." || !l.DomainNeeded || l.BogusPriv {
		t.Errorf("local = %+v; want local.lan. local, domain_needed on, bogus_priv off (dnsmasq's default)", l)
	}
	if strings.Join(cfg.Listen, " ") != "127.0.0.1:5353 [::1]:5353" {
		t.Errorf("listen = %q", cfg.Listen)
	}
	if cfg.Cache.Size != 2000 || cfg.Cache.MinTTL.Seconds() != 30 || cfg.Cache.MaxTTL.Seconds() != 3600 {
		t.Errorf("cache = %+v", cfg.Cache)
	}
	if !cfg.ServeStale.Enabled || cfg.ServeStale.ClientTimeout.Duration != 0 || cfg.ServeStale.MaxAge.Hours() != 24 {
		t.Errorf("serve_stale = %+v; dnsmasq answers stale at once", cfg.ServeStale)
	}
	if cfg.Upstream.MaxInflight != 300 {
		t.Errorf("max_inflight = %d", cfg.Upstream.MaxInflight)
	}

	// Every directive not carried over is named with its line.
	var notes bytes.Buffer
	for _, n := range res.Notes {
		notes.WriteString(n.String() + "\n")
	}
	for _, want := range []string{
		main + ":10: server=/10.in-addr.arpa/192.0.2.53@eth0: carried over partly",
		main + ":16: no-negcache: carried over partly",
		main + ":19: all-servers: not carried over",
		main + ":21: dhcp-range=192.0.2.100,192.0.2.200: not carried over: towerd does not serve DHCP",
	} {
		if !strings.Contains(notes.String(), want) {
			t.Errorf("notes lack %q:\n%s", want, notes.String())
		}
	}
	for _, quiet := range []string{"strict-order", "no-resolv", "cache-size", "conf-file", "listen-address", "port="} {
		if strings.Contains(notes.String(), quiet) {
			t.Errorf("%s is carried over and must not be listed:\n%s", quiet, notes.String())
		}
	}
}

func TestImportDnsmasqNotesWhatTowerdDoesDifferently(t *testing.T) {
	dirs := []Directive{
		{File: "f", Line: 1, Name: "server", Value: "192.0.2.1", Has: true},
		{File: "f", Line: 2, Name: "server", Value: "/x.example/#", Has: true},
		{File: "f", Line: 3, Name: "cache-size", Value: "lots", Has: true},
		{File: "f", Line: 4, Name: "port", Value: "0", Has: true},
	}
	res := Import("f", dirs)
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{
		"f:1: server=192.0.2.1: carried over partly: without no-resolv", // dnsmasq also asked resolv.conf's servers
		"f:3: cache-size=lots: not carried over",
		"f:4: port=0: not carried over",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
}

func TestImportDnsmasqIncludeLoop(t *testing.T) {
	n := rootOf(t, map[string]string{"etc/a.conf": "conf-file=/etc/b.conf\n", "etc/b.conf": "conf-file=/etc/a.conf\n"})
	if _, err := Read(n, []string{"/etc/a.conf"}); err == nil || !strings.Contains(err.Error(), "includes itself") {
		t.Fatalf("readDnsmasq = %v, want an include loop error", err)
	}
}

// Several lines for one domain, in every form dnsmasq accepts, add servers
// to one zone: none is lost in the merge.
func TestImportDnsmasqKeepsEveryServerOfAZone(t *testing.T) {
	for _, tt := range []struct {
		lines []string
		zone  string
		want  string
	}{
		{[]string{"server=/corp.example/192.0.2.1", "server=/corp.example/192.0.2.2"}, "corp.example.", "192.0.2.1:53 192.0.2.2:53"},
		{[]string{"server=/a.example/corp.example/192.0.2.1", "server=/Corp.Example./192.0.2.2#5353"}, "corp.example.", "192.0.2.1:53 192.0.2.2:5353"},
		{[]string{"server=/consul/127.0.0.1#8600", "server=/consul/127.0.0.2#8600"}, "consul.", "127.0.0.1:8600 127.0.0.2:8600"},
		{[]string{"server=192.0.2.1", "server=192.0.2.2", "no-resolv"}, ".", "192.0.2.1:53 192.0.2.2:53"},
		{[]string{"server=/10.in-addr.arpa/192.0.2.1", "rev-server=10.0.0.0/8,192.0.2.2"}, "10.in-addr.arpa.", "192.0.2.1:53 192.0.2.2:53"},
		{[]string{"server=/x.example/192.0.2.3", "server=/x.example/#", "server=192.0.2.1", "no-resolv"}, "x.example.", "192.0.2.3:53 192.0.2.1:53"},
	} {
		var dirs []Directive
		for i, line := range tt.lines {
			d, _ := parseLine(line)
			d.File, d.Line = "f", i+1
			dirs = append(dirs, d)
		}
		res := Import("f", dirs)
		cfg := config.DefaultConfig()
		if err := config.Decode(res.File.Render(), "imported", &cfg); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir() // resolv.conf for zone "." when no line names its servers
		dnstest.WriteFile(t, filepath.Join(root, "etc", "resolv.conf"), "nameserver 192.0.2.99\n")
		zones, _, err := cfg.ForwardZones(root)
		if err != nil {
			t.Fatalf("%q: %v", tt.lines, err)
		}
		got := ""
		for _, z := range zones {
			if z.Name == tt.zone {
				got = strings.Join(z.Servers, " ")
			}
		}
		if got != tt.want {
			t.Errorf("%q: zone %s has %q, want %q\n%s", tt.lines, tt.zone, got, tt.want, res.File.Render())
		}
	}
	// server=/d/# beside server=/d/ADDR without servers for every name:
	// the resolv.conf part cannot be written, and that is said.
	res := Import("f", []Directive{
		{File: "f", Line: 1, Name: "server", Value: "/x.example/192.0.2.3", Has: true},
		{File: "f", Line: 2, Name: "server", Value: "/x.example/#", Has: true},
	})
	if len(res.Notes) != 1 || !res.Notes[0].ChangesAnswers() || !strings.Contains(res.Notes[0].String(), "keeps only its own servers") {
		t.Errorf("notes %v", res.Notes)
	}
}
