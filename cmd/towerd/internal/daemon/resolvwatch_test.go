package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// followEventWait bounds each wait for the watch; the poll runs every
// millisecond, so only a broken watch comes near it.
const followEventWait = 10 * time.Second

type followEvent struct {
	what    string
	servers []string
}

// Zone "." follows its resolv.conf (issue 14), through the poll alone
// (inotify off, the interval injected): a file missing at start leaves the
// zone without servers (SERVFAIL at once, no refusal to start) until the
// file appears; a change of servers swaps the zone's group and is counted,
// a change of anything else is not, a file naming only towerd is ignored;
// a reload that finds the file gone keeps the servers; a reload that pins
// servers stops the following; and Shutdown stops the watch.
func TestFollowResolvConf(t *testing.T) {
	dir := t.TempDir()
	resolvPath := filepath.Join(dir, "resolv.conf")
	cfg := quietConfig()
	cfg.ResolvConf = resolvPath
	// consul. must not go to a real agent's port; 192.0.2.0/24 is never
	// asked (the test only sends a name under ".").
	cfg.Zones = []config.ZoneConfig{{Name: "consul.", Servers: []string{"192.0.2.250"}}}
	zones, source, err := cfg.ForwardZones("/")
	if err != nil {
		t.Fatalf("missing resolv_conf at start: %v", err)
	}
	if source != resolvPath {
		t.Fatalf("source %q, want %q", source, resolvPath)
	}
	next := cfg
	d, err := New(Options{
		Config: cfg, Zones: zones, ZonesSource: source, Log: slog.New(slog.DiscardHandler),
		Load:            func() (config.Config, error) { return next, nil },
		ResolvConfWatch: resolvconf.WatchOptions{PollInterval: time.Millisecond, NoInotify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	// As if towerd also served 127.0.0.1:53 (binding it is not needed for
	// what this test checks: the file naming towerd itself).
	d.cfg.Listen = append(d.cfg.Listen, "127.0.0.1:53")
	events := make(chan followEvent, 16)
	d.followEvent = func(what string, servers []string) { events <- followEvent{what, slices.Clone(servers)} }
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() {
		d.Shutdown()
		<-done
	})
	expect := func(what string, servers ...string) {
		t.Helper()
		select {
		case ev := <-events:
			if ev.what != what || !slices.Equal(ev.servers, servers) {
				t.Fatalf("follow event %s %v, want %s %v", ev.what, ev.servers, what, servers)
			}
		case <-time.After(followEventWait):
			t.Fatalf("no follow event (want %s %v)", what, servers)
		}
	}
	changes := func() float64 {
		t.Helper()
		return metricValue(t, d.tel, "towerd_upstream_resolvconf_changes_total", "")
	}

	expect("kept") // the start's read: no file, no servers
	<-d.Ready()
	udp := strings.TrimPrefix(d.Addrs()[0], "udp/")
	if rcode := queryRcode(t, udp, "www.example."); rcode != dns.RcodeServerFailure {
		t.Errorf("without servers: rcode %s, want SERVFAIL", dns.RcodeToString[rcode])
	}

	// The file appears the way a DHCP client writes it: a rename.
	replaceFile(t, resolvPath, "nameserver 192.0.2.1\nnameserver 192.0.2.2\n")
	expect("changed", "192.0.2.1:53", "192.0.2.2:53")
	// Bytes that change but name the same servers: no swap, not counted.
	replaceFile(t, resolvPath, "# lease renewed\nnameserver 192.0.2.1\nnameserver 192.0.2.2\nsearch corp.example\n")
	expect("unchanged", "192.0.2.1:53", "192.0.2.2:53")
	// Edited in place.
	if err := os.WriteFile(resolvPath, []byte("nameserver 192.0.2.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("changed", "192.0.2.3:53")
	// A file naming only towerd: forwarding to itself would loop.
	replaceFile(t, resolvPath, "nameserver 127.0.0.1\n")
	expect("kept", "192.0.2.3:53")
	if n := changes(); n != 2 {
		t.Errorf("changes counted %v, want 2", n)
	}

	// A reload while the file is gone keeps the servers in force.
	if err := os.Remove(resolvPath); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatalf("reload with the file gone: %v", err)
	}
	expect("kept", "192.0.2.3:53")
	if n := metricValue(t, d.tel, "towerd_config_reloads_total", "success"); n != 1 {
		t.Errorf("reloads %v, want 1: following the file is not a reload", n)
	}
	replaceFile(t, resolvPath, "nameserver 192.0.2.4\n")
	expect("changed", "192.0.2.4:53")

	// Servers pinned by a reload: the file is no longer followed.
	next.Zones = append(slices.Clone(cfg.Zones), config.ZoneConfig{Name: ".", Servers: []string{"192.0.2.9"}})
	if err := d.Reload(); err != nil {
		t.Fatalf("reload pinning servers: %v", err)
	}
	if n := changes(); n != 3 {
		t.Errorf("changes counted %v, want 3", n)
	}
	d.Shutdown()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	done <- nil // for the cleanup
	if d.follow != nil {
		t.Error("a watch still runs after Shutdown")
	}
	select {
	case ev := <-events:
		t.Errorf("follow event %v after the servers were pinned", ev)
	default:
	}
}

// readFollowed makes the default choice: resolved's file when it has
// content, else /etc/resolv.conf; an empty file counts as missing.
func TestReadFollowed(t *testing.T) {
	root := t.TempDir()
	paths := resolvconf.SystemPaths(root)
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p, data, refused := readFollowed(paths); p != "" || data != nil || refused != nil {
		t.Errorf("no files: %q %q %v", p, data, refused)
	}
	write(paths[1], "nameserver 192.0.2.1\n")
	if p, _, _ := readFollowed(paths); p != paths[1] {
		t.Errorf("only /etc/resolv.conf: read %q", p)
	}
	write(paths[0], "")
	if p, _, _ := readFollowed(paths); p != paths[1] {
		t.Errorf("resolved's file empty: read %q, want /etc/resolv.conf", p)
	}
	write(paths[0], "nameserver 192.0.2.2\n")
	if p, _, _ := readFollowed(paths); p != paths[0] {
		t.Errorf("resolved's file appeared: read %q, want it", p)
	}
	// A FIFO in resolved's place is passed over and named when nothing
	// else reads (issue 21).
	if err := os.Remove(paths[0]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(paths[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := readFollowed(paths); p != paths[1] {
		t.Errorf("resolved's file a FIFO: read %q, want /etc/resolv.conf", p)
	}
	if err := os.Remove(paths[1]); err != nil {
		t.Fatal(err)
	}
	if p, data, refused := readFollowed(paths); p != "" || data != nil || refused == nil || refused.Path != paths[0] || !strings.Contains(refused.Why, "FIFO") {
		t.Errorf("only a FIFO: %q %q %v; want it named as refused", p, data, refused)
	}
}

// replaceFile writes body to a temp file beside path and renames it over
// path, as DHCP clients and resolved do.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func queryRcode(t *testing.T, addr, name string) int {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return r.Rcode
}
