package test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/towerd/towerd/systemd"
)

// resolvedNode lays out a node where systemd-resolved is in charge, as
// Debian and Ubuntu ship it, under a temp root. The upstreams are from the
// documentation ranges; nothing queries them.
func resolvedNode(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"etc/resolv.conf": "->../run/systemd/resolve/stub-resolv.conf",
		"run/systemd/resolve/stub-resolv.conf": "# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).\n" +
			"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.example\n",
		"run/systemd/resolve/resolv.conf": "# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).\n" +
			"nameserver 192.0.2.10\nnameserver 192.0.2.11\nsearch corp.example\n",
		"etc/systemd/resolved.conf":                              "[Resolve]\n#DNSStubListener=yes\n",
		"lib/systemd/system/systemd-resolved.service":            "[Service]\n",
		"etc/systemd/system/multi-user.target.wants/ssh.service": "->/lib/systemd/system/ssh.service",
		"usr/local/bin/other-tool":                               "#!/bin/sh\n",
	}
	writeNode(t, root, files)
	return root
}

// pathState is what "byte-identical" compares: type, mode, content or link
// target. stamp (inode, mtime) tells a rewrite with the same bytes.
type pathState struct {
	kind, data string
	mode       fs.FileMode
	stamp      string
}

func treeState(t *testing.T, root string) map[string]pathState {
	t.Helper()
	out := map[string]pathState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		info, _ := d.Info()
		s := pathState{mode: info.Mode().Perm()}
		switch {
		case d.IsDir():
			s.kind = "dir"
		case info.Mode()&fs.ModeSymlink != 0:
			s.kind, s.mode = "link", 0
			s.data, err = os.Readlink(p)
		default:
			s.kind = "file"
			var b []byte
			b, err = os.ReadFile(p)
			s.data = string(b)
			s.stamp = fmt.Sprintf("%d@%d.%d", st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
		}
		out[rel] = s
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree reports differences; withStamps also counts rewrites.
func sameTree(t *testing.T, what string, want, got map[string]pathState, withStamps bool) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !withStamps {
			w.stamp, g.stamp = "", ""
		}
		if !ok {
			t.Errorf("%s: %s is gone", what, p)
		} else if g != w {
			t.Errorf("%s: %s differs:\n want %+v\n  got %+v", what, p, w, g)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s is new", what, p)
		}
	}
}

func TestInstallAndUninstallUnderARoot(t *testing.T) {
	t.Parallel()
	root := resolvedNode(t)
	before := treeState(t, root)

	code, out, errOut := runToExit(t, "install", "--root", root, "--dry-run")
	if code != 0 || !strings.Contains(out, "would write     /etc/resolv.conf") {
		t.Fatalf("dry run: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after a dry run", before, treeState(t, root), true)

	code, out, errOut = runToExit(t, "install", "--root", root)
	if code != 0 {
		t.Fatalf("install: status %d\n%s%s", code, out, errOut)
	}
	for _, line := range []string{"backed up       /etc/resolv.conf", "wrote           /etc/resolv.conf", "systemctl enable --now towerd.socket"} {
		if !strings.Contains(out, line) {
			t.Errorf("install output lacks %q:\n%s", line, out)
		}
	}
	installed := treeState(t, root)
	conf := installed["etc/resolv.conf"]
	if conf.kind != "file" || conf.mode != 0o644 || !strings.Contains(conf.data, "\nnameserver 127.0.0.1\nsearch corp.example\noptions edns0 trust-ad\n") ||
		strings.Count(conf.data, "nameserver") != 1 {
		t.Errorf("resolv.conf after install: %+v", conf)
	}
	if b := installed["etc/resolv.pre-towerd-backup.conf"]; b.kind != "link" || b.data != "../run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("backup: %+v", b)
	}
	if d := installed["etc/systemd/resolved.conf.d/towerd.conf"]; !strings.Contains(d.data, "[Resolve]\nDNSStubListener=no\n") {
		t.Errorf("resolved's stub is not turned off: %+v", d)
	}
	units, err := systemd.Units(systemd.DefaultBinaryPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		if got := installed["etc/systemd/system/"+u.Name]; got.data != u.Content || got.mode != 0o644 {
			t.Errorf("installed %s differs from the repository's unit", u.Name)
		}
	}
	bin, err := os.ReadFile(towerdBin)
	if err != nil {
		t.Fatal(err)
	}
	if got := installed["usr/local/bin/towerd"]; got.data != string(bin) || got.mode != 0o755 {
		t.Errorf("installed binary: mode %v, same bytes %v", got.mode, got.data == string(bin))
	}
	// The config follows resolved's upstreams (resolv_conf), and towerd
	// accepts it and reads them from there.
	if cfg := installed["etc/towerd/towerd.toml"].data; !strings.Contains(cfg, `resolv_conf = "/run/systemd/resolve/resolv.conf"`) {
		t.Errorf("towerd.toml does not follow resolved's file:\n%s", cfg)
	}
	code, out, errOut = checkUnderRoot(t, root)
	if code != 0 || !strings.Contains(out, "zone .                    -> 192.0.2.10:53, 192.0.2.11:53") {
		t.Errorf("towerd check on the installed config: status %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = runToExit(t, "install", "--root", root)
	if code != 0 || !strings.Contains(out, "nothing to change") {
		t.Errorf("second install: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after the second install", installed, treeState(t, root), true)

	code, out, errOut = runToExit(t, "uninstall", "--root", root)
	if code != 0 || !strings.Contains(out, "restored        /etc/resolv.conf") || errOut != "" {
		t.Fatalf("uninstall: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after uninstall", before, treeState(t, root), false)
	code, out, _ = runToExit(t, "uninstall", "--root", root)
	if code != 0 || !strings.Contains(out, "nothing to change") {
		t.Errorf("second uninstall: status %d\n%s", code, out)
	}
}

func TestUninstallLeavesAResolvConfChangedSinceInstall(t *testing.T) {
	t.Parallel()
	root := resolvedNode(t)
	if code, out, errOut := runToExit(t, "install", "--root", root); code != 0 {
		t.Fatalf("install: status %d\n%s%s", code, out, errOut)
	}
	// Another tool takes the file over.
	theirs := []byte("# Generated by NetworkManager\nnameserver 192.0.2.99\n")
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), theirs, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runToExit(t, "uninstall", "--root", root)
	if code != 0 {
		t.Fatalf("uninstall: status %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "warning: left /etc/resolv.conf alone") || !strings.Contains(errOut, "/etc/resolv.pre-towerd-backup.conf") {
		t.Errorf("no warning naming resolv.conf and its backup:\n%s", errOut)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); !bytes.Equal(got, theirs) {
		t.Errorf("uninstall changed a resolv.conf that is someone else's now:\n%s", got)
	}
	after := treeState(t, root)
	for _, gone := range []string{"usr/local/bin/towerd", "etc/towerd", "etc/systemd/system/towerd.socket",
		"etc/systemd/system/towerd.service", "etc/systemd/resolved.conf.d"} {
		if _, ok := after[gone]; ok {
			t.Errorf("%s is still there: every other step must be undone", gone)
		}
	}
}

// checkUnderRoot runs towerd check on the towerd.toml installed under
// root, with its resolv_conf taken under root too: the file it names is
// the node's, never this machine's.
func checkUnderRoot(t *testing.T, root string) (int, string, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "etc/towerd/towerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(data), `resolv_conf = "/`, `resolv_conf = "`+root+`/`)
	p := filepath.Join(t.TempDir(), "towerd.toml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runToExit(t, "check", "-config", p)
}
