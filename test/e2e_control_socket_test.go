package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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

// controlFloodConns is how many idle connections the flood holds (issue
// 35's 10,000); under the race detector, whose goroutines cost ten times
// as much, a fifth of them.
func controlFloodConns() int {
	if raceEnabled {
		return 2000
	}
	return 10000
}

// controlFloodRedial is how soon a flood connection closed or refused dials
// again: fast enough to keep towerd's listen queue full.
const controlFloodRedial = 20 * time.Millisecond

// TestControlIdleFloodLeavesRootsCLI: 10,000 connections to the control
// socket that never send a byte, each reconnecting as soon as towerd
// closes it, do not lock root's own CLI out: 10 of 10 `towerd
// log-queries` answer, each within the CLI's timeout.
func TestControlIdleFloodLeavesRootsCLI(t *testing.T) {
	up := newTestUpstream(t)
	d := startTowerd(t, "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr)
	if d.Control == "" {
		t.Fatal("no control socket")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var held, dials atomic.Int64
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	for range controlFloodConns() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for {
				c, err := net.DialTimeout("unix", d.Control, time.Second)
				dials.Add(1)
				if err == nil {
					mu.Lock()
					open[c] = true
					mu.Unlock()
					held.Add(1)
					_, _ = c.Read(buf) // until towerd closes it, or the test ends
					held.Add(-1)
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}
				select { // and again, a little later
				case <-stop:
					return
				case <-time.After(controlFloodRedial):
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	// Let the flood fill the slots and the listen queue.
	for held.Load() < int64(controlFloodConns()/2) && dials.Load() < int64(4*controlFloodConns()) {
		runtime.Gosched()
	}
	answered := 0
	var took []time.Duration
	for range 10 {
		began := time.Now()
		code, stdout, stderr := runToExit(t, "log-queries", "-control", d.Control)
		took = append(took, time.Since(began).Round(time.Millisecond))
		if code == 0 && strings.Contains(stdout, "query log") {
			answered++
		} else {
			t.Logf("exit %d: %s%s", code, stdout, stderr)
		}
	}
	t.Logf("root's CLI: %d of 10 answered (%v); flood holding %d connections after %d dials", answered, took, held.Load(), dials.Load())
	if answered < 10 {
		t.Errorf("root's CLI answered %d of 10 under a flood of %d idle connections, want 10", answered, controlFloodConns())
	}
}
