package dnsmasqimport

import (
	"errors"
	"strings"
	"testing"
)

// debianNode is stock Debian 12 with dnsmasq and a Consul node's file in
// /etc/dnsmasq.d, which only /etc/default/dnsmasq's CONFIG_DIR names
// (issue 25 item 2): the dnsmasq.conf the package ships sets nothing.
var debianNode = map[string]string{
	"etc/dnsmasq.conf": "# Configuration file for dnsmasq.\n#conf-dir=/etc/dnsmasq.d/,*.conf\n#port=5353\n",
	"etc/default/dnsmasq": "# This file has five functions:\n#DNSMASQ_OPTS=\"--conf-file=/etc/dnsmasq.alt\"\n" +
		"ENABLED=1\nCONFIG_DIR=/etc/dnsmasq.d,.dpkg-dist,.dpkg-old,.dpkg-new\n",
	"etc/dnsmasq.d/10-consul":            "server=/consul/127.0.0.1#8600\n",
	"etc/dnsmasq.d/20-lab":               "server=/lab.example/192.0.2.53\n",
	"etc/dnsmasq.d/20-lab.dpkg-old":      "server=/old.example/192.0.2.54\n",
	"etc/dnsmasq.d/README":               "# All files in this directory will be read by dnsmasq as\n",
	"etc/dnsmasq.d/.hidden":              "server=/hidden.example/192.0.2.55\n",
	"usr/sbin/dnsmasq":                   "",
	"lib/systemd/system/dnsmasq.service": "[Unit]\n",
}

func TestReadNodeReadsDebiansConfigDirFirst(t *testing.T) {
	read, err := ReadNode(rootOf(t, debianNode))
	if err != nil {
		t.Fatal(err)
	}
	want := "/etc/default/dnsmasq /etc/dnsmasq.d/10-consul /etc/dnsmasq.d/20-lab /etc/dnsmasq.d/README /etc/dnsmasq.conf"
	if got := strings.Join(read.Paths(), " "); got != want {
		t.Errorf("files read:\n %s\nwant, in dnsmasq's order:\n %s", got, want)
	}
	if read.Debian["ENABLED"] != "1" || read.Debian["CONFIG_DIR"] == "" {
		t.Errorf("Debian's variables: %v", read.Debian)
	}
	// The conf-dir comes from the defaults file, at its line.
	if d := read.Directives[0]; d.Name != "conf-dir" || d.where() != "/etc/default/dnsmasq:4" {
		t.Errorf("first directive %+v at %s, want conf-dir at /etc/default/dnsmasq:4", d, d.where())
	}
	if why := read.Files[1].Why; !strings.Contains(why, "conf-dir=/etc/dnsmasq.d") || !strings.Contains(why, "/etc/default/dnsmasq:4") {
		t.Errorf("10-consul read because %q", why)
	}
	res := Import("node", read.Directives)
	zones := map[string]bool{}
	for _, z := range res.File.Zones {
		zones[z.Name] = true
	}
	if !zones["consul."] || !zones["lab.example."] || zones["old.example."] || zones["hidden.example."] {
		t.Errorf("zones %v, want consul. and lab.example. only", zones)
	}
}

func TestReadNodeFollowsDebiansCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaults string
		extra    map[string]string
		files    string // the files read after /etc/default/dnsmasq
		names    string // the directives' names
	}{
		{"no CONFIG_DIR: no conf-dir", "ENABLED=1\n", nil, "/etc/dnsmasq.conf", "server"},
		{"CONFIG_DIR emptied", "CONFIG_DIR=\n", nil, "/etc/dnsmasq.conf", "server"},
		{"DNSMASQ_OPTS names another file", `DNSMASQ_OPTS="--conf-file=/etc/dnsmasq.alt --log-queries -7 /etc/alt.d"` + "\n",
			map[string]string{"etc/dnsmasq.alt": "cache-size=500\n", "etc/alt.d/a": "no-resolv\n"},
			"/etc/alt.d/a /etc/dnsmasq.alt", "log-queries conf-dir no-resolv cache-size"},
		{"DNSMASQ_OPTS without a file", "DNSMASQ_OPTS='--conf-file'\n", nil, "", ""},
		{"RESOLV_CONF, CACHESIZE, DOMAIN_SUFFIX", "RESOLV_CONF=/etc/resolv.dnsmasq\nCACHESIZE=300\nDOMAIN_SUFFIX=lan\n", nil,
			"/etc/dnsmasq.conf", "domain resolv-file cache-size server"},
		{"an option spelt short", "DNSMASQ_OPTS=\"-Z -S /corp.example/192.0.2.1 --server /x.example/192.0.2.2\"\n", nil,
			"/etc/dnsmasq.conf", "-Z server server server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := map[string]string{"etc/default/dnsmasq": tc.defaults, "etc/dnsmasq.conf": "server=/consul/127.0.0.1#8600\n"}
			for k, v := range tc.extra {
				tree[k] = v
			}
			read, err := ReadNode(rootOf(t, tree))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(read.Paths()[1:], " "); got != tc.files {
				t.Errorf("files %q, want %q", got, tc.files)
			}
			var names []string
			for _, d := range read.Directives {
				names = append(names, d.Name)
			}
			if got := strings.Join(names, " "); got != tc.names {
				t.Errorf("directives %q, want %q", got, tc.names)
			}
		})
	}
}

func TestReadNodeWithoutDnsmasq(t *testing.T) {
	if _, err := ReadNode(rootOf(t, map[string]string{"etc/hosts": "127.0.0.1 localhost\n"})); !errors.Is(err, ErrNoConfig) {
		t.Errorf("ReadNode = %v, want ErrNoConfig", err)
	}
	// A --conf-file named on the command line must be there.
	_, err := ReadNode(rootOf(t, map[string]string{"etc/default/dnsmasq": "DNSMASQ_OPTS=--conf-file=/etc/gone.conf\n"}))
	if err == nil || errors.Is(err, ErrNoConfig) {
		t.Errorf("ReadNode with a missing --conf-file = %v, want the missing file", err)
	}
}

// An unknown short option is kept, named, so the import reports it
// instead of losing it silently.
func TestUnknownShortOptionIsReported(t *testing.T) {
	res := Import("f", []Directive{{File: "f", Line: 1, Name: "-Z"}})
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0].String(), "--name=value") {
		t.Errorf("notes %v", res.Notes)
	}
}
