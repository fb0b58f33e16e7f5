package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// [control] is checked like every table: errors name the key.
func TestControlConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		control ControlConfig
		wantKey string // "" = valid
	}{
		{"default", defaultControlConfig(), ""},
		{"off", ControlConfig{Socket: "", Group: "towerd", MaxConnections: 1}, ""},
		{"relative, as make run's", ControlConfig{Socket: "bin/control.sock", MaxConnections: 4}, ""},
		{"too long", ControlConfig{Socket: "/" + strings.Repeat("x", 120), MaxConnections: 4}, "control.socket"},
		{"a directory", ControlConfig{Socket: "/run/towerd/", MaxConnections: 4}, "control.socket"},
		{"bad group", ControlConfig{Socket: DefaultControlSocket, Group: "a:b", MaxConnections: 4}, "control.group"},
		{"no connections", ControlConfig{Socket: DefaultControlSocket, MaxConnections: 0}, "control.max_connections"},
	} {
		cfg := DefaultConfig()
		cfg.Control = tc.control
		err := cfg.Validate()
		switch {
		case tc.wantKey == "" && err != nil:
			t.Errorf("%s: rejected: %v", tc.name, err)
		case tc.wantKey != "" && (err == nil || !strings.Contains(err.Error(), `key "`+tc.wantKey+`"`)):
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.wantKey)
		}
	}
}

// Locate finds the two addresses in files Load refuses, skips what it
// cannot read with a note, lets drop-ins win as Load does, and never
// blocks on a FIFO (issue 25: a broken edit disabled every control
// command).
func TestLocateReadsBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write("towerd.toml", "[cache]\nsize = 0\nbogus = 1\n[admin]\nlisten = \"127.0.0.1:1\"\n[control]\nsocket = \"/run/a.sock\"\n")
	if _, err := Load(path, false); err == nil {
		t.Fatal("the file is meant to be invalid")
	}
	loc := Locate(path, false)
	if loc.AdminListen != "127.0.0.1:1" || loc.ControlSocket != "/run/a.sock" || len(loc.Notes) != 0 {
		t.Errorf("invalid file: %+v", loc)
	}
	write("towerd.d/10-ctl.toml", "[control]\nsocket = \"/run/b.sock\"\n")
	write("towerd.d/20-broken.toml", "[cache\nsize = \n[admin]\nlisten = \"127.0.0.1:2\"  # the node's\n")
	loc = Locate(path, false)
	if loc.ControlSocket != "/run/b.sock" || loc.AdminListen != "127.0.0.1:2" || len(loc.Notes) != 1 ||
		!strings.Contains(loc.Notes[0], "20-broken.toml is not valid TOML") {
		t.Errorf("drop-ins: %+v; want b.sock, the broken file's admin line, and a note on it", loc)
	}
	other := t.TempDir() // no drop-ins beside these
	fifo := filepath.Join(other, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	loc = Locate(fifo, false)
	if loc.ControlSocket != DefaultControlSocket || len(loc.Notes) != 1 || !strings.Contains(loc.Notes[0], "not a regular file") {
		t.Errorf("FIFO: %+v", loc)
	}
	if loc := Locate(filepath.Join(other, "missing.toml"), true); len(loc.Notes) != 0 || loc.AdminListen != DefaultAdminListen {
		t.Errorf("missing optional file: %+v", loc)
	}
}
