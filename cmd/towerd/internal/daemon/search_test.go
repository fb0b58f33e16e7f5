package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
	"github.com/towerd/towerd/test/dnstest"
)

// The node's search list comes from search.resolv_conf, read as a bounded
// regular file: a FIFO, a device or a file past the bound is refused with
// a warning and the last good list stays; a file that is gone, or has no
// search line, means none; [[search.list]] tables follow the node's.
func TestSearchListsFromTheNodesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	write := func(body string) {
		t.Helper()
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err) // the FIFO below must go before a file takes its name
		}
		dnstest.WriteFile(t, path, body)
	}
	var logs bytes.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg := config.DefaultConfig()
	cfg.Search.ResolvConf = path
	five := 5
	cfg.Search.Lists = []config.SearchListConfig{{Domains: []string{"default.svc.cluster.local", "svc.cluster.local"}, Ndots: &five}}
	got := func() string { return fmt.Sprint(d.searchLists(cfg)) }

	write("nameserver 127.0.0.1\nsearch corp.example ec2.internal\noptions ndots:2 timeout:1\n")
	const node = "{[corp.example ec2.internal] 2}"
	const k8s = "{[default.svc.cluster.local svc.cluster.local] 5}"
	if g := got(); g != "["+node+" "+k8s+"]" {
		t.Fatalf("lists %s", g)
	}

	// Past the bound, a FIFO (opened without blocking), a device: the
	// last good list stays, each with a warning.
	write(strings.Repeat("# padding\n", resolvconf.MaxFileSize/10+1) + "search other.example\n")
	if g := got(); g != "["+node+" "+k8s+"]" {
		t.Errorf("a file past the bound: lists %s", g)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if g := got(); g != "["+node+" "+k8s+"]" {
		t.Errorf("a FIFO: lists %s", g)
	}
	cfg.Search.ResolvConf = "/dev/zero"
	if g := got(); g != "["+node+" "+k8s+"]" {
		t.Errorf("/dev/zero: lists %s", g)
	}
	cfg.Search.ResolvConf = path
	if n := strings.Count(logs.String(), "the node's search list cannot be read"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, logs.String())
	}

	// A list past the resolver's bounds: none, with a warning.
	write("search " + strings.Repeat("d.example ", 9) + "\n")
	if g := got(); g != "["+k8s+"]" || !strings.Contains(logs.String(), "the node's search list is not used") {
		t.Errorf("nine domains: lists %s", g)
	}

	// No search line, then no file: none, as for glibc.
	write("nameserver 127.0.0.1\n")
	if g := got(); g != "["+k8s+"]" {
		t.Errorf("no search line: lists %s", g)
	}
	write("domain corp.example\n")
	if g := got(); g != "[{[corp.example] 1} "+k8s+"]" {
		t.Errorf("a domain line: lists %s", g)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if g := got(); g != "["+k8s+"]" {
		t.Errorf("no file: lists %s", g)
	}
	cfg.Search.Enabled = false
	if g := got(); g != "[]" {
		t.Errorf("search.enabled = false: lists %s", g)
	}
}
