package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The [local] table: defaults, a full table read back through Render, and
// errors that name the key and its line.
func TestLocalConfig(t *testing.T) {
	d := DefaultConfig().Local
	if len(d.HostsFiles) != 1 || d.HostsFiles[0] != "/etc/hosts" || !d.DomainNeeded || !d.BogusPriv || d.TTL.Duration != 0 {
		t.Errorf("defaults: %+v", d)
	}
	f := File{
		Keys: []Key{
			{Table: "local", Name: "hosts_files", Value: []string{"/etc/hosts", "/etc/hosts.d"}},
			{Table: "local", Name: "domain_needed", Value: false},
			{Table: "local", Name: "ttl", Value: time.Minute},
			{Table: "local", Name: "domains", Value: []string{"lan."}},
			{Table: "local", Name: "records", Value: []string{"mail.lan. MX 10 nas.lan."}},
		},
		Zones:     []Zone{{Name: ".", Servers: []string{"192.0.2.53:53"}}},
		Addresses: []Address{{Name: "ads.test.", Addresses: []string{"0.0.0.0", "::"}, Comment: "f:1 address=/ads.test/#"}},
	}
	path := filepath.Join(t.TempDir(), "towerd.toml")
	if err := os.WriteFile(path, f.Render(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, f.Render())
	}
	l := cfg.Local
	if len(l.HostsFiles) != 2 || l.DomainNeeded || !l.BogusPriv || l.TTL.Duration != time.Minute ||
		len(l.Domains) != 1 || len(l.Records) != 1 || len(l.Address) != 1 || len(l.Address[0].Addresses) != 2 {
		t.Errorf("read back: %+v\n%s", l, f.Render())
	}

	for _, tt := range []struct{ body, want string }{
		{"[local]\nttl = \"-1s\"\n", `:2: key "local.ttl"`},
		{"[local]\nttl = \"1.5s\"\n", `:2: key "local.ttl"`},
		{"[local]\n\ndomains = [\"lan\", \"..\"]\n", `:3: key "local.domains[1]"`},
		{"[local]\nrecords = [\"x.lan. A 300.1.1.1\"]\n", `:2: key "local.records[0]"`},
		{"[local]\nrecords = [\"x.lan. CNAME y.lan.\", \"x.lan. A 192.0.2.1\"]\n", `key "local.records[1]": "x.lan. A 192.0.2.1": a CNAME cannot share`},
		{"[local]\nrecords = [\"lan. SOA a. b. 1 2 3 4 5\"]\n", "SOA records are not served"},
		{"[local]\nhosts_files = [\"\"]\n", `:2: key "local.hosts_files[0]"`},
		{"listen = [\"127.0.0.1:53\"]\n[local]\n[[local.address]]\nname = \"a.test\"\naddresses = [\"192.0.2.1\", \"nope\"]\n", `:5: key "local.address[0].addresses[1]"`},
		{"[[local.address]]\nname = \"a.test\"\n", `key "local.address[0].addresses": needs at least one`},
		{"[local]\nfrob = 1\n", `:2: key "local.frob": unknown key`},
	} {
		path := filepath.Join(t.TempDir(), "towerd.toml")
		if err := os.WriteFile(path, []byte(tt.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, false)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to contain %q", tt.body, err, tt.want)
		}
	}
}
