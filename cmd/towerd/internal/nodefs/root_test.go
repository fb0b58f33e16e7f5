package nodefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// What Root's doc promises, one case per rule.

// openTest opens dir as a node's root for one test.
func openTest(t *testing.T, dir string) *Root {
	t.Helper()
	n, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestRootReadsAsTheNodeWould: reads follow links the way the node
// itself would, with the root as "/", and never outside it.
func TestRootReadsAsTheNodeWould(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	dnstest.WriteTree(t, outside, map[string]string{"secret": "outside\n", "dir/x": "outside\n"})
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{
		"run/real/resolv.conf": "inside\n",
		"usr/lib/x":            "inside\n",
		"etc/abs":              "->/run/real/resolv.conf",
		"etc/rel":              "->../run/real/resolv.conf",
		"etc/climb":            "->../../../../../../usr/lib/x",
		"etc/dirlink":          "->/usr/lib",
		"etc/out":              "->" + outside + "/secret",
		"etc/outdir":           "->" + outside + "/dir",
		"etc/loop":             "->loop2",
		"etc/loop2":            "->loop",
		"etc/sub/":             "",
	})
	n := openTest(t, root)
	for name, want := range map[string]string{
		"/etc/abs":                "inside\n", // absolute: from the root
		"/etc/rel":                "inside\n",
		"/etc/climb":              "inside\n", // ".." stops at the root
		"/etc/dirlink/x":          "inside\n", // a linked directory on the way
		"/etc/../../../usr/lib/x": "inside\n",
	} {
		if data, err := n.ReadFile(name); err != nil || string(data) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", name, data, err, want)
		}
	}
	// A link to the outside is taken inside the root, where nothing is.
	for _, name := range []string{"/etc/out", "/etc/outdir/x"} {
		if data, err := n.ReadFile(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%s) = %q, %v; want not found inside the root", name, data, err)
		}
	}
	if _, err := n.ReadDir("/etc/outdir"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir of a link out = %v, want not found inside the root", err)
	}
	if _, err := n.ReadFile("/etc/loop"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("ReadFile of a loop = %v, want ELOOP", err)
	}
	if _, err := n.ReadFile("/etc/sub"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ReadFile of a directory = %v, want a refusal", err)
	}
	entries, err := n.ReadDir("/etc/dirlink")
	if err != nil || len(entries) != 1 || entries[0].Name() != "x" {
		t.Errorf("ReadDir through an absolute link = %v, %v", entries, err)
	}
	entries, err = n.ReadDir("/etc")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "abs climb dirlink loop loop2 out outdir rel sub" {
		t.Errorf("ReadDir(/etc) = %s, want every entry sorted by name", got)
	}
	// Lstat and Readlink see the link itself.
	if info, err := n.Lstat("/etc/out"); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat of a link = %v, %v", info, err)
	}
	if target, err := n.Readlink("/etc/out"); err != nil || target != outside+"/secret" {
		t.Errorf("Readlink = %q, %v", target, err)
	}
}

// TestRootReadsNoFIFO: a FIFO planted where install reads neither
// blocks it nor feeds it.
func TestRootReadsNoFIFO(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{"etc/": ""})
	if err := syscall.Mkfifo(filepath.Join(root, "etc/resolv.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := openTest(t, root)
	done := make(chan error, 1)
	go func() {
		_, err := n.ReadFile("/etc/resolv.conf")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadFile of a FIFO = %v, want a refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
	if err := n.Overwrite("/etc/resolv.conf", []byte("x"), 0o644); err == nil {
		t.Error("Overwrite wrote into a FIFO")
	}
}

// TestRootChangesNothingOutside: every change acts on the last element
// itself, through directories that stay inside the root; a directory on the
// way that leads out (an absolute link, even to a place inside, or a
// relative one that climbs out) is refused with ErrEscapesRoot, and a
// relative link that stays inside (merged /usr) is followed.
func TestRootChangesNothingOutside(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	dnstest.WriteTree(t, outside, map[string]string{"victim": "precious\n", "dir/keep": "precious too\n"})
	outsideBefore := dnstest.Tree(t, outside)
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{
		"usr/sbin/":    "",
		"sbin":         "->usr/sbin",
		"abs":          "->/usr/sbin",
		"climb":        "->../../../../../../../../../.." + outside + "/dir",
		"out":          "->" + outside + "/dir",
		"etc/victim":   "->" + outside + "/victim",
		"etc/loop":     "->loop",
		"etc/loopdir":  "->loopdir",
		"etc/resolved": "",
	})
	n := openTest(t, root)
	changes := map[string]func(dir string) error{
		"WriteTemp": func(dir string) error { _, err := n.WriteTemp(dir+"/f", []byte("x"), 0o644); return err },
		"Mkdir":     func(dir string) error { return n.Mkdir(dir+"/d", 0o755) },
		"Symlink":   func(dir string) error { return n.Symlink("/x", dir+"/l") },
		"Remove":    func(dir string) error { return n.Remove(dir + "/keep") },
		"Rename":    func(dir string) error { return n.Rename("/etc/resolved", dir+"/keep") },
		"Overwrite": func(dir string) error { return n.Overwrite(dir+"/keep", []byte("x"), 0o644) },
		"Lstat":     func(dir string) error { _, err := n.Lstat(dir + "/keep"); return err },
	}
	for op, change := range changes {
		for _, dir := range []string{"/out", "/climb", "/abs"} {
			if err := change(dir); !errors.Is(err, ErrEscapesRoot) {
				t.Errorf("%s in %s = %v, want ErrEscapesRoot", op, dir, err)
			} else if !strings.Contains(err.Error(), "leads out of the root") {
				t.Errorf("%s in %s: %q does not say why", op, dir, err)
			}
		}
	}
	if err := n.Mkdir("/sbin/d", 0o755); err != nil {
		t.Errorf("Mkdir through /sbin -> usr/sbin = %v", err)
	} else if _, err := os.Stat(filepath.Join(root, "usr/sbin/d")); err != nil {
		t.Errorf("the directory is not where the relative link leads: %v", err)
	}
	// The last element is never followed.
	if err := n.Overwrite("/etc/victim", []byte("x"), 0o644); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Overwrite of a link = %v, want ELOOP (not written through)", err)
	}
	if err := n.Remove("/etc/victim"); err != nil {
		t.Errorf("Remove of a link = %v", err)
	}
	if _, err := n.Lstat("/etc/loopdir/x"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Lstat below a loop = %v, want ELOOP", err)
	}
	dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
}

// TestRootModesIgnoreTheUmask: a file or directory gets exactly the
// mode asked for, set on the open file, whatever the installing shell's
// umask. Not parallel: the umask is the process's.
func TestRootModesIgnoreTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	n := openTest(t, root)
	if err := n.Mkdir("/etc", 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := n.WriteTemp("/etc/resolv.conf", []byte("nameserver 127.0.0.1\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if !IsTempName(filepath.Base(tmp)) {
		t.Errorf("temp name %q is not one the sweep recognises", tmp)
	}
	if err := n.Rename(tmp, "/etc/resolv.conf"); err != nil {
		t.Fatal(err)
	}
	tree := dnstest.Tree(t, root)
	if got := tree["etc"]; got.Kind != "dir" || got.Mode != 0o755 {
		t.Errorf("directory: %+v, want mode 0755", got)
	}
	if got := tree["etc/resolv.conf"]; got.Kind != "file" || got.Mode != 0o644 {
		t.Errorf("file: %+v, want mode 0644", got)
	}
	if err := n.Overwrite("/etc/resolv.conf", []byte("x\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got := dnstest.Tree(t, root)["etc/resolv.conf"]; got.Mode != 0o640 || got.Data != "x\n" {
		t.Errorf("after Overwrite: %+v", got)
	}
}

// TestRootStaysOnItsDirectory: the root is held open, so a root
// directory renamed (or replaced by a link) after Open does not
// move what the Root reaches.
func TestRootStaysOnItsDirectory(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	dnstest.WriteTree(t, root, map[string]string{"etc/hosts": "inside\n"})
	dnstest.WriteTree(t, base, map[string]string{"other/etc/hosts": "other\n"})
	n := openTest(t, root)
	if err := os.Rename(root, filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "other"), root); err != nil {
		t.Fatal(err)
	}
	if data, err := n.ReadFile("/etc/hosts"); err != nil || string(data) != "inside\n" {
		t.Errorf("ReadFile after the root moved = %q, %v", data, err)
	}
}

// TestRootRefusesToFollowOut: issue 13's planted links, at the file
// operations themselves.
func TestRootRefusesToFollowOut(t *testing.T) {
	outside := t.TempDir()
	dnstest.WriteTree(t, outside, map[string]string{"victim": "precious\n"})
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{
		"out":        "->" + outside,
		"etc/link":   "->" + outside + "/victim",
		"etc/inside": "->../data/file",
		"data/file":  "inside\n",
		"etc/fifo/":  "",
	})
	fsys := openTest(t, root)
	if _, err := fsys.WriteTemp("/out/x", []byte("x"), 0o644); !errors.Is(err, ErrEscapesRoot) {
		t.Errorf("WriteTemp through a link out = %v, want ErrEscapesRoot", err)
	}
	if err := fsys.Overwrite("/etc/link", []byte("x"), 0o644); err == nil {
		t.Error("Overwrite wrote through a symlink")
	}
	if data, err := fsys.ReadFile("/etc/inside"); err != nil || string(data) != "inside\n" {
		t.Errorf("ReadFile through a link inside = %q, %v", data, err)
	}
	if _, err := fsys.ReadFile("/etc/link"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a link out = %v, want it resolved inside the root (not found)", err)
	}
	if err := fsys.Mkdir("/out/new", 0o755); !errors.Is(err, ErrEscapesRoot) {
		t.Errorf("Mkdir through a link out = %v, want ErrEscapesRoot", err)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(data) != "precious\n" {
		t.Errorf("outside file: %q, %v", data, err)
	}
}

// TestRootStatFollowsLinksInside: Stat describes what a name leads to,
// as ReadFile would read it, and a file over the bound is refused behind
// an absolute link as well (TestRootReadsWithABound has the bound itself).
func TestRootStatFollowsLinksInside(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{"etc/big": "", "etc/link": "->/etc/big"})
	if err := os.Truncate(filepath.Join(root, "etc/big"), MaxNodeFile+1); err != nil {
		t.Fatal(err)
	}
	n := openTest(t, root)
	if data, err := n.ReadFile("/etc/link"); !errors.Is(err, ErrTooLarge) || data != nil {
		t.Errorf("ReadFile of %d bytes behind a link = %d bytes, %v; want ErrTooLarge", MaxNodeFile+1, len(data), err)
	}
	if info, err := n.Stat("/etc/link"); err != nil || info.Size() != MaxNodeFile+1 || !info.Mode().IsRegular() {
		t.Errorf("Stat through an absolute link = %v, %v", info, err)
	}
	if _, err := n.Stat("/etc/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a missing file = %v", err)
	}
}
