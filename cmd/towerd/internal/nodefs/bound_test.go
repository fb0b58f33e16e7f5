package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/test/dnstest"
)

// TestRootReadsWithABound: what a root may hold in place of a file
// besides a FIFO (TestRootReadsNoFIFO): /dev/zero, endless, and a
// sparse file of 8 GiB. Each is refused at once, and nothing past the
// bound is read.
func TestRootReadsWithABound(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{"etc/ok": "12345678", "dev/": ""})
	big := filepath.Join(root, "etc", "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 8<<30); err != nil {
		t.Fatal(err)
	}
	zero := unix.Mknod(filepath.Join(root, "dev", "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))) == nil
	if zero {
		if err := os.Symlink("/dev/zero", filepath.Join(root, "etc", "resolv.conf")); err != nil {
			t.Fatal(err)
		}
	}
	n := openTest(t, root)
	if _, err := n.ReadFile("/etc/big"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8 GiB sparse file: err = %v, want ErrTooLarge", err)
	}
	if zero {
		if _, err := n.ReadFile("/etc/resolv.conf"); !errors.Is(err, ErrNotRegular) {
			t.Errorf("link to /dev/zero: err = %v, want ErrNotRegular", err)
		}
	} else {
		t.Log("mknod not permitted: the /dev/zero case is not run")
	}
	n.SetReadLimit(8)
	if data, err := n.ReadFile("/etc/ok"); err != nil || string(data) != "12345678" {
		t.Errorf("a file of exactly the bound: %q, %v", data, err)
	}
	n.SetReadLimit(7)
	if _, err := n.ReadFile("/etc/ok"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file one byte over the bound: err = %v, want ErrTooLarge", err)
	}
}
