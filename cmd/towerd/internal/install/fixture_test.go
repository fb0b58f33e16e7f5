package install

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/test/dnstest"
)

// Resolved-style node as Debian and Ubuntu ship it: /etc/resolv.conf is a
// relative link to resolved's stub file, and resolved's real upstreams are
// in /run/systemd/resolve/resolv.conf. Addresses are from the documentation
// ranges: nothing ever queries them.
const (
	stubResolvConf = "# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).\n" +
		"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.example lab.example\n"
	resolvedResolvConf = "# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).\n" +
		"nameserver 192.0.2.10\nnameserver 2001:db8::53\nsearch corp.example lab.example\n"
)

func resolvedRoot(t *testing.T) string {
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{
		"etc/resolv.conf":                       "->../run/systemd/resolve/stub-resolv.conf",
		"etc/systemd/resolved.conf":             "[Resolve]\n#DNS=\n",
		"run/systemd/resolve/stub-resolv.conf":  stubResolvConf,
		"run/systemd/resolve/resolv.conf":       resolvedResolvConf,
		"usr/local/":                            "",
		"etc/hosts":                             "127.0.0.1 localhost\n",
		"usr/lib/systemd/system/getty@.service": "[Service]\n",
	})
	return root
}

// rootOf opens dir as a node's root for one test.
func rootOf(t *testing.T, dir string) *nodefs.Root {
	t.Helper()
	n, err := nodefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// fakeBinary stands in for the towerd executable install copies.
func fakeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "towerd")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho towerd\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// stampsOf returns inode and modification time of every file and link, to
// tell "unchanged" from "rewritten with the same bytes".
func stampsOf(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		out[p] = fmt.Sprintf("ino %d mtime %d.%d", st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
		return nil
	})
	return out
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
