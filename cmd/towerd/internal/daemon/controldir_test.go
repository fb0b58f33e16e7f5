package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
)

// A control socket directory anyone but root or towerd's user may write is
// refused, with the directory and the fix named; a directory above the
// socket's may be sticky (as /tmp), the socket's own may not (issue 35).
func TestCheckControlDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	base := t.TempDir()
	mk := func(rel string, mode uint32, uid int) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, mode); err != nil { // the test's own fixture: modes past the umask, sticky bit
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Lchown(p, uid, -1); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	open := mk("open", 0o777, -1)
	sticky := mk("sticky", 0o1777, -1)
	group := mk("group", 0o775, -1)
	nobodys := mk("nobodys", 0o755, 65534)
	safe := mk("safe", 0o755, -1)
	underSticky := mk("sticky/run", 0o755, -1)
	underOpen := mk("open/run", 0o755, -1)
	link := filepath.Join(open, "link") // a link in a directory anyone may write
	if err := os.Symlink(safe, link); err != nil {
		t.Fatal(err)
	}
	nobodyLink := filepath.Join(safe, "nobody-link")
	if err := os.Symlink(open, nobodyLink); err != nil {
		t.Fatal(err)
	}
	goodLink := filepath.Join(safe, "good-link")
	if err := os.Symlink(underSticky, goodLink); err != nil {
		t.Fatal(err)
	}
	uid := uint32(os.Geteuid())
	for _, tc := range []struct {
		dir     string
		refused string // the directory the message names; "" = accepted
	}{
		{safe, ""},
		{underSticky, ""},
		{goodLink, ""},
		{open, open},
		{sticky, sticky},
		{group, group},
		{nobodys, nobodys},
		{underOpen, open},
		{link, open},
		{nobodyLink, open},
	} {
		err := checkControlDir(tc.dir, uid)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.dir, err)
		case tc.refused != "" && !errors.Is(err, errUnsafeControlDir):
			t.Errorf("%s: %v, want refused", tc.dir, err)
		case tc.refused != "" && (!strings.Contains(err.Error(), tc.refused+" ") || !strings.Contains(err.Error(), "/run/towerd")):
			t.Errorf("%s: %q does not name %s and the fix", tc.dir, err, tc.refused)
		}
	}
	// bindControl refuses too, and makes nothing there.
	policy := admin.AccessPolicy{UID: uid}
	if _, _, _, err := bindControl(filepath.Join(open, "control.sock"), policy); !errors.Is(err, errUnsafeControlDir) {
		t.Errorf("bindControl in a 0777 directory: %v, want refused", err)
	}
	if _, err := os.Lstat(filepath.Join(open, "control.sock")); err == nil {
		t.Errorf("a socket was made in the refused directory")
	}
}

// 100 starts racing a symlink planted at the socket's path and at every
// other name that appears in its directory: no file's mode changes, and the
// path is never left a link while towerd says it listens (issue 35: a
// chmod of the temporary name once made a root-owned 0600 file 0660).
func TestBindControlRacingSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(target, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "control.sock")
	policy := admin.AccessPolicy{UID: uint32(os.Geteuid()), Group: "g", GID: uint32(os.Getegid()), HaveGroup: true}

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the racer: what a user who may write dir would do
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Symlink(target, path)
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != "control.sock" {
					tmp := filepath.Join(dir, "x"+e.Name())
					if os.Symlink(target, tmp) == nil {
						_ = os.Rename(tmp, filepath.Join(dir, e.Name()))
					}
				}
			}
			runtime.Gosched()
			if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				_ = os.Remove(path)
			}
		}
	}()
	bound, refused := 0, 0
	for range 100 {
		l, cs, _, err := bindControl(path, policy)
		if err != nil {
			refused++
			continue
		}
		bound++
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != controlSocketMode {
			t.Errorf("after a successful bind, %s is mode %o (%v), want the 0660 socket", path, st.Mode, err)
		}
		l.Close()
		cs.remove()
	}
	close(stop)
	<-done
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the file the links pointed at is now %04o, want 0600", fi.Mode().Perm())
	}
	t.Logf("%d starts bound, %d refused a link at the path", bound, refused)
}
