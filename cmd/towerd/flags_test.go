package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

func TestFlagsOverrideFile(t *testing.T) {
	path := dnstest.WriteFile(t, "t.toml", "[cache]\nsize = 42\n[[zone]]\nname = \".\"\nservers = [\"192.0.2.1\"]\n")
	o, err := parseFlags("serve", []string{"-config", path, "-cache-size", "7", "-upstream", "192.0.2.9:5300, 192.0.2.8",
		"-listen", "127.0.0.1:1053"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	zones, _, err := cfg.ForwardZones(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var root string
	for _, z := range zones {
		if z.Name == "." {
			root = strings.Join(z.Servers, ",")
		}
	}
	if cfg.Cache.Size != 7 || root != "192.0.2.9:5300,192.0.2.8:53" || cfg.Listen[0] != "127.0.0.1:1053" {
		t.Fatalf("flags not applied: size %d root %q listen %v", cfg.Cache.Size, root, cfg.Listen)
	}
	if cfg.StateSaveInterval.Duration != 5*time.Minute {
		t.Errorf("state_save_interval %v without the flag, want the default 5m", cfg.StateSaveInterval)
	}
	o, _ = parseFlags("serve", []string{"-config", path, "-state-save-interval", "0s"}, os.Stderr)
	if cfg, err = o.load(); err != nil || cfg.StateSaveInterval.Duration != 0 {
		t.Errorf("-state-save-interval 0s: %v, %v; want 0s (save only on stop)", cfg.StateSaveInterval, err)
	}
	o, _ = parseFlags("serve", []string{"-config", path, "-cache-size", "-1"}, os.Stderr)
	if _, err := o.load(); err == nil || !strings.Contains(err.Error(), "cache.size") {
		t.Fatalf("bad flag value accepted: %v", err)
	}
}

func TestConsulHTTPFlag(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		enabled bool
		address string
	}{
		{"off", false, ""},
		{"127.0.0.1:18500", true, "127.0.0.1:18500"},
		{"unix:///run/consul/http.sock", true, "unix:///run/consul/http.sock"},
	} {
		o, err := parseFlags("serve", []string{"-config", "", "-consul-http", tc.flag}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.load()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Consul.Enabled != tc.enabled || cfg.Consul.Address != tc.address {
			t.Errorf("-consul-http %s: enabled %v address %q", tc.flag, cfg.Consul.Enabled, cfg.Consul.Address)
		}
	}

	// An address never turns on a watch the configuration turned off.
	path := dnstest.WriteFile(t, "towerd.toml", "[consul]\nenabled = false\n")
	o, err := parseFlags("serve", []string{"-config", path, "-consul-http", "127.0.0.1:18500"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.Enabled {
		t.Error("-consul-http turned on the watch that consul.enabled = false turned off")
	}
}

// -admin overrides the file and goes through the same checks.
func TestAdminFlag(t *testing.T) {
	path := dnstest.WriteFile(t, "towerd.toml", "[admin]\nlisten = \"127.0.0.1:9999\"\n")
	for _, tc := range []struct {
		flag, want, wantErr string
	}{
		{"", "127.0.0.1:9999", ""},
		{"127.0.0.1:0", "127.0.0.1:0", ""},
		{"-", "", ""}, // -admin '' turns it off
		{"0.0.0.0:9253", "", "after applying flags"},
	} {
		args := []string{"-config", path}
		switch tc.flag {
		case "":
		case "-":
			args = append(args, "-admin", "")
		default:
			args = append(args, "-admin", tc.flag)
		}
		o, err := parseFlags("serve", args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := o.load()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "admin.listen") {
				t.Errorf("-admin %q: error %v, want admin.listen %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil || cfg.Admin.Listen != tc.want {
			t.Errorf("-admin %q: listen %q, err %v; want %q", tc.flag, cfg.Admin.Listen, err, tc.want)
		}
	}
}

// bucketQuantile answers what histogram_quantile would for the same buckets.
// runStats runs `towerd stats args...` and returns its exit code and output.
func runStats(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"stats"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// Without a daemon: exit 1 and a one-line reason that names the address.
func TestStatsCommandWithoutDaemon(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	code, out, errOut := runStats("-admin", addr)
	if code != exitFail || out != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no towerd admin server at "+addr) {
		t.Errorf("stderr %q, want one line naming %s", errOut, addr)
	}
}

// The address comes from the config file's [admin] table unless -admin
// names one, read leniently: a file that does not validate, or does not
// parse, still leaves stats its address (issue 25). With the admin server
// off, stats asks the control socket.
func TestStatsCommandReadsConfig(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	off := dnstest.WriteFile(t, "towerd.toml", "[admin]\nlisten = \"\"\n[control]\nsocket = \""+sock+"\"\n")
	if code, _, errOut := runStats("-config", off); code != exitFail || !strings.Contains(errOut, "no towerd control socket at "+sock) {
		t.Errorf("admin off: exit %d, stderr %q; want 1 naming %s", code, errOut, sock)
	}
	bothOff := dnstest.WriteFile(t, "towerd.toml", "[admin]\nlisten = \"\"\n[control]\nsocket = \"\"\n")
	if code, _, errOut := runStats("-config", bothOff); code != exitFail || !strings.Contains(errOut, "are off") {
		t.Errorf("both off: exit %d, stderr %q", code, errOut)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// Invalid elsewhere (cache.size 0): the address still counts.
	invalid := dnstest.WriteFile(t, "towerd.toml", "[cache]\nsize = 0\n[admin]\nlisten = \""+addr+"\"\n")
	if code, _, errOut := runStats("-config", invalid); code != exitFail || !strings.Contains(errOut, "no towerd admin server at "+addr) {
		t.Errorf("invalid config: exit %d, stderr %q; want 1 naming %s", code, errOut, addr)
	}
	// Not TOML at all: the [admin] listen line still counts, and the note
	// names the file.
	broken := dnstest.WriteFile(t, "towerd.toml", "[cache\nsize = \n[admin]\nlisten = \""+addr+"\"\n")
	if code, _, errOut := runStats("-config", broken); code != exitFail || !strings.Contains(errOut, "no towerd admin server at "+addr) ||
		!strings.Contains(errOut, broken+" is not valid TOML") {
		t.Errorf("broken config: exit %d, stderr %q; want 1 naming %s and the file", code, errOut, addr)
	}
	// A FIFO in the config's place: the defaults, at once (unless a towerd
	// of this machine's, `make run`'s, answers there).
	fifo := filepath.Join(t.TempDir(), "towerd.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runStats("-config", fifo); code != exitOK && (code != exitFail || !strings.Contains(errOut, "127.0.0.1:9253") ||
		!strings.Contains(errOut, "not a regular file")) {
		t.Errorf("FIFO config: exit %d, stderr %q; want 1, the default address and why", code, errOut)
	}
	if code, _, _ := runStats("extra"); code != exitConfig {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
}
