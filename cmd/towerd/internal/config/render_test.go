package config

import (
	"strings"
	"testing"
	"time"
)

// A rendered file reads back through Decode and Validate with every value
// intact: the renderer and the loader agree on the keys and their syntax.
func TestRenderReadsBack(t *testing.T) {
	f := File{
		Header: []string{"written by a test", "", `odd "quotes" \ and a tab	here`},
		Keys: []Key{
			{Table: "cache", Name: "size", Value: 2000, Comment: "dnsmasq.conf:3 cache-size=2000"},
			{Name: "listen", Value: []string{"127.0.0.1:5353", "[::1]:5353"}},
			{Table: "serve_stale", Name: "client_timeout", Value: time.Duration(0)},
			{Table: "serve_stale", Name: "enabled", Value: true},
			{Table: "cache", Name: "min_ttl", Value: Dur(30 * time.Second)},
			{Name: "resolv_conf", Value: "/etc/odd \"name\"\x01.conf"},
		},
		Zones: []Zone{
			{Name: ".", Servers: []string{"192.0.2.1:53", "[2001:db8::1]:53"}, Lead: []string{"the servers of a test"}},
			{Name: "corp.example.", Servers: []string{"192.0.2.53:53"}, Comment: "extra.conf:1"},
		},
	}
	out := f.Render()
	cfg := DefaultConfig()
	if err := Decode(out, "rendered", &cfg); err != nil {
		t.Fatalf("does not decode: %v\n%s", err, out)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("not valid: %v\n%s", err, out)
	}
	if cfg.Cache.Size != 2000 || cfg.Cache.MinTTL.Duration != 30*time.Second || !cfg.ServeStale.Enabled ||
		cfg.ServeStale.ClientTimeout.Duration != 0 || cfg.ResolvConf != "/etc/odd \"name\"\x01.conf" ||
		strings.Join(cfg.Listen, " ") != "127.0.0.1:5353 [::1]:5353" {
		t.Errorf("read back as %+v\n%s", cfg, out)
	}
	if len(cfg.Zones) != 2 || cfg.Zones[0].Name != "." || strings.Join(cfg.Zones[0].Servers, " ") != "192.0.2.1:53 [2001:db8::1]:53" ||
		cfg.Zones[1].Name != "corp.example." {
		t.Errorf("zones read back as %+v\n%s", cfg.Zones, out)
	}
	// Top-level keys come before any table, or TOML would put them in it.
	if strings.Index(string(out), "listen") > strings.Index(string(out), "[cache]") {
		t.Errorf("a top-level key follows a table:\n%s", out)
	}
}

// What `towerd install` writes loads back with its listen address and
// zone "." servers; an install that found no servers still writes a file
// that decodes, and validation then names the empty zone.
func TestInstallFileReadsBack(t *testing.T) {
	out := InstallFile("127.0.0.1:53", []string{"192.0.2.5:53", "192.0.2.6:5353"}, "--upstream").Render()
	if !strings.Contains(string(out), `servers = ["192.0.2.5:53", "192.0.2.6:5353"]`) {
		t.Errorf("zone \".\" servers not written as expected:\n%s", out)
	}
	cfg := DefaultConfig()
	if err := Decode(out, "towerd.toml", &cfg); err != nil {
		t.Fatalf("does not decode: %v\n%s", err, out)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("not valid: %v\n%s", err, out)
	}
	if strings.Join(cfg.Listen, " ") != "127.0.0.1:53" || len(cfg.Zones) != 1 || cfg.Zones[0].Name != "." ||
		strings.Join(cfg.Zones[0].Servers, " ") != "192.0.2.5:53 192.0.2.6:5353" {
		t.Errorf("read back as listen %v zones %+v\n%s", cfg.Listen, cfg.Zones, out)
	}
}

// Install's file with resolv_conf (issue 14): zone "." follows the file,
// no [[zone]] "." is written, and Docker's bridge extends listen and allow.
func TestInstallSettingsFollowAFile(t *testing.T) {
	out := InstallSettings{
		Listen:     []string{"127.0.0.1:53", "172.17.0.1:53"},
		Allow:      []string{"127.0.0.0/8", "::1/128", "172.17.0.0/16"},
		ResolvConf: "/run/systemd/resolve/resolv.conf",
	}.File().Render()
	cfg := DefaultConfig()
	if err := Decode(out, "towerd.toml", &cfg); err != nil {
		t.Fatalf("does not decode: %v\n%s", err, out)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("not valid: %v\n%s", err, out)
	}
	if cfg.ResolvConf != "/run/systemd/resolve/resolv.conf" || len(cfg.Zones) != 0 ||
		strings.Join(cfg.Listen, " ") != "127.0.0.1:53 172.17.0.1:53" ||
		strings.Join(cfg.Allow, " ") != "127.0.0.0/8 ::1/128 172.17.0.0/16" {
		t.Errorf("read back as %+v\n%s", cfg, out)
	}
}

// An imported file is completed, not overwritten: its zones and keys stay,
// resolv_conf is added only when it names no servers for ".", and listen
// and allow are merged.
func TestInstallSettingsCompleteAnImport(t *testing.T) {
	imported := File{
		Keys:  []Key{{Name: "allow", Value: []string{"10.0.0.0/8"}}, {Table: "cache", Name: "size", Value: 1000}},
		Zones: []Zone{{Name: "consul.", Servers: []string{"127.0.0.1:8600"}}},
	}
	s := InstallSettings{Listen: []string{"127.0.0.1:53"}, Allow: []string{"127.0.0.0/8", "10.0.0.0/8"}, ResolvConf: "/run/towerd-dhclient/resolv.conf"}
	out := s.Complete(imported).Render()
	cfg := DefaultConfig()
	if err := Decode(out, "towerd.toml", &cfg); err != nil {
		t.Fatalf("does not decode: %v\n%s", err, out)
	}
	if cfg.ResolvConf != "/run/towerd-dhclient/resolv.conf" || cfg.Cache.Size != 1000 ||
		strings.Join(cfg.Allow, " ") != "10.0.0.0/8 127.0.0.0/8" || len(cfg.Zones) != 1 || cfg.Zones[0].Name != "consul." {
		t.Errorf("completed import read back as %+v\n%s", cfg, out)
	}
	withRoot := File{Zones: []Zone{{Name: ".", Servers: []string{"192.0.2.1:53"}}}}
	out = s.Complete(withRoot).Render()
	if strings.Contains(string(out), "resolv_conf") {
		t.Errorf("an import with servers for \".\" got resolv_conf:\n%s", out)
	}
}
