package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Issue 35 item 3, attacked on the built binary: a control socket in a
// directory others may write is refused, and a socket served by anyone
// but root or towerd's user is refused by the CLI before it sends a byte.

// nobodyWrapper runs a command as nobody (uid/gid 65534, no groups).
var nobodyWrapper = []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}

// TestControlDirWritableByOthersRefused: [control] socket in a 0777 or a
// sticky 1777 directory makes no socket there; towerd serves DNS and its
// log names the directory and the fix.
func TestControlDirWritableByOthersRefused(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t)
	base := filepath.Dir(controlPath(t))
	for _, mode := range []uint32{0o777, 0o1777, 0o775} {
		dir := filepath.Join(base, fmt.Sprintf("mode%04o", mode))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "control.sock")
		d := startTowerd(t, "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr, "-control", sock)
		if d.Control != "" {
			t.Errorf("mode %04o: towerd listens on the control socket %s", mode, d.Control)
		}
		want := regexp.MustCompile(`level=ERROR msg="control socket unusable.*` + regexp.QuoteMeta(dir) +
			fmt.Sprintf(` is writable by others than its owner \(mode %04o\).*chmod go-w `, mode) + regexp.QuoteMeta(dir))
		if !want.MatchString(d.stderr.String()) {
			t.Errorf("mode %04o: no refusal naming %s and the fix:\n%s", mode, dir, lastLines(d.stderr.String(), 20))
		}
		if _, err := os.Lstat(sock); err == nil {
			t.Errorf("mode %04o: a file was made at %s", mode, sock)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("mode %04o: %d files made in the refused directory", mode, len(entries))
		}
	}
}

// TestControlImpostorRefusedByCLI: nobody serves the control socket's path
// with a towerd of its own; root's flush, cache load and lookup are refused
// by the CLI, naming the impostor, and the impostor receives nothing. With
// the file's owner forged as root, the listener's credentials still tell.
func TestControlImpostorRefusedByCLI(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs util-linux setpriv")
	}
	up := newTestUpstream(t)
	base := filepath.Dir(controlPath(t))
	dir := filepath.Join(base, "nobodys")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "control.sock")
	imp := startTowerdVia(t, nobodyWrapper, "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr, "-control", sock)
	if imp.Control != sock {
		t.Fatalf("the impostor does not serve %s:\n%s", sock, lastLines(imp.stderr.String(), 20))
	}
	snapshot := filepath.Join(base, "snapshot.bin")
	if err := os.WriteFile(snapshot, []byte("operator's snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	actions := [][]string{{"flush", "-all"}, {"cache", "load", snapshot}, {"lookup", "www.example.com"}, {"reload"}}
	refused := func(how, names string) {
		t.Helper()
		for _, a := range actions {
			_, stderr := cli(t, 1, append(a, "-control", sock)...)
			if !strings.Contains(stderr, "not towerd's control socket") || !strings.Contains(stderr, names) ||
				!strings.Contains(stderr, sock) {
				t.Errorf("%s: towerd %s: %q does not refuse the impostor by name (%s)", how, strings.Join(a, " "), stderr, names)
			}
		}
	}
	before := len(imp.stderr.String())
	refused("file of nobody", "belongs to uid 65534")
	// Root may forge the file's owner; the listener stays nobody's.
	if err := os.Lchown(sock, 0, 0); err != nil {
		t.Fatal(err)
	}
	refused("listener of nobody", "served by uid 65534")
	// The impostor was sent nothing to act on (it logs each flush, load
	// and reload, and each lookup at debug level).
	after := imp.stderr.String()[before:]
	for _, acted := range []string{"flushed", "loaded", "reload", "www.example.com"} {
		if strings.Contains(after, acted) {
			t.Errorf("the impostor acted (%s):\n%s", acted, after)
		}
	}
}
