package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/test/dnstest"
)

func read(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func mustInstall(t *testing.T, fsys fileSystem, opts InstallOptions) *Report {
	t.Helper()
	r, err := install(fsys, opts)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	return r
}

func mustUninstall(t *testing.T, fsys fileSystem) *Report {
	t.Helper()
	r, err := uninstall(fsys, UninstallOptions{})
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	return r
}

func TestInstallThenUninstallOnAResolvedNode(t *testing.T) {
	root := resolvedRoot(t)
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)

	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	conf := read(t, root, "etc/resolv.conf")
	for _, want := range []string{resolvConfMarker, "\nnameserver 127.0.0.1\n", "\nsearch corp.example lab.example\n", "\noptions edns0 trust-ad\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("resolv.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "127.0.0.53") {
		t.Errorf("resolv.conf still names resolved's stub:\n%s", conf)
	}
	after := dnstest.Tree(t, root)
	if n := after["etc/resolv.conf"]; n.Kind != "file" || n.Mode != 0o644 {
		t.Errorf("resolv.conf is %+v, want a regular file with mode 0644", n)
	}
	if n := after["etc/resolv.pre-towerd-backup.conf"]; n.Kind != "link" || n.Data != "../run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("backup is %+v, want the original symlink", n)
	}
	// Zone "." follows resolved's list of upstreams, which resolved keeps
	// current with DHCP, instead of a copy of it (issue 14).
	if cfg := read(t, root, "etc/towerd/towerd.toml"); !strings.Contains(cfg, `resolv_conf = "/run/systemd/resolve/resolv.conf"`) || strings.Contains(cfg, "[[zone]]") {
		t.Errorf("config does not follow resolved's upstreams:\n%s", cfg)
	}
	if dropIn := read(t, root, "etc/systemd/resolved.conf.d/towerd.conf"); !strings.Contains(dropIn, "[Resolve]\nDNSStubListener=no\n") {
		t.Errorf("drop-in:\n%s", dropIn)
	}
	if n := after["usr/local/bin/towerd"]; n.Mode != 0o755 {
		t.Errorf("binary mode %v, want 0755", n.Mode)
	}
	if !strings.Contains(strings.Join(r.Next, "\n"), "systemctl enable --now towerd.socket") {
		t.Errorf("next steps %q lack enabling the socket", r.Next)
	}

	stamps := stampsOf(t, root)
	again := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if again.Changed() {
		t.Errorf("second install changed something: %+v", again.Changes)
	}
	dnstest.DiffTrees(t, after, dnstest.Tree(t, root))
	for p, s := range stampsOf(t, root) {
		if stamps[p] != s {
			t.Errorf("second install rewrote %s", p)
		}
	}

	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
	if again := mustUninstall(t, fsys); again.Changed() {
		t.Errorf("second uninstall changed something: %+v", again.Changes)
	}
}

// bindMountFS refuses to rename over target, as the kernel does for a file
// that is a mount point (Docker and Kubernetes bind-mount /etc/resolv.conf).
type bindMountFS struct {
	*nodefs.Root
	target string
	errno  syscall.Errno
}

func (b bindMountFS) Rename(oldName, newName string) error {
	if newName == b.target {
		return &os.LinkError{Op: "rename", Old: oldName, New: newName, Err: b.errno}
	}
	return b.Root.Rename(oldName, newName)
}

func (b bindMountFS) Remove(name string) error {
	if name == b.target {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.EBUSY}
	}
	return b.Root.Remove(name)
}

func TestResolvConfThatCannotBeRenamedOver(t *testing.T) {
	const original = "nameserver 192.0.2.1\nsearch corp.example\n"
	for _, errno := range []syscall.Errno{syscall.EBUSY, syscall.EXDEV} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := t.TempDir()
			dnstest.WriteTree(t, root, map[string]string{"etc/resolv.conf": original})
			if err := os.Chmod(filepath.Join(root, "etc/resolv.conf"), 0o640); err != nil {
				t.Fatal(err)
			}
			before := dnstest.Tree(t, root)
			ino := inode(t, filepath.Join(root, "etc/resolv.conf"))
			fsys := bindMountFS{Root: rootOf(t, root), target: ResolvConfPath, errno: errno}

			r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
			if got := read(t, root, "etc/resolv.conf"); !strings.HasPrefix(got, resolvConfMarker) || !strings.Contains(got, "search corp.example") {
				t.Fatalf("resolv.conf after install:\n%s", got)
			}
			if inode(t, filepath.Join(root, "etc/resolv.conf")) != ino {
				t.Error("resolv.conf was replaced, not written in place")
			}
			if mode := dnstest.Tree(t, root)["etc/resolv.conf"].Mode; mode != 0o644 {
				t.Errorf("mode %v after the in-place write, want the explicit 0644", mode)
			}
			if !strings.Contains(changeFor(r, ResolvConfPath).Detail, "in place") {
				t.Errorf("the report does not say the file was written in place: %+v", changeFor(r, ResolvConfPath))
			}

			mustUninstall(t, fsys)
			dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
			if inode(t, filepath.Join(root, "etc/resolv.conf")) != ino {
				t.Error("uninstall replaced the bind-mounted file instead of writing it in place")
			}
		})
	}
	t.Run("other errors stop the install", func(t *testing.T) {
		root := t.TempDir()
		dnstest.WriteTree(t, root, map[string]string{"etc/resolv.conf": original})
		fsys := bindMountFS{Root: rootOf(t, root), target: ResolvConfPath, errno: syscall.EPERM}
		if _, err := install(fsys, InstallOptions{Binary: fakeBinary(t)}); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("install = %v, want EPERM", err)
		}
		if got := read(t, root, "etc/resolv.conf"); got != original {
			t.Errorf("resolv.conf changed after a failed install:\n%s", got)
		}
		// What was done before the failure is recorded and undone.
		mustUninstall(t, fsys)
		if _, err := os.Lstat(filepath.Join(root, "usr/local/bin/towerd")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the binary of the failed install is still there: %v", err)
		}
	})
}

// changeFor returns the last decision about name (a backup comes first).
func changeFor(r *Report, name string) Change {
	var last Change
	for _, c := range r.Changes {
		if c.Path == name {
			last = c
		}
	}
	return last
}

func TestUninstallLeavesAResolvConfSomeoneElseChanged(t *testing.T) {
	tests := map[string]func(t *testing.T, path string){
		"rewritten by another tool": func(t *testing.T, path string) {
			dnstest.WriteFile(t, path, "# Generated by NetworkManager\nnameserver 192.0.2.77\n")
		},
		"edited, marker kept": func(t *testing.T, path string) {
			data, _ := os.ReadFile(path)
			dnstest.WriteFile(t, path, string(data)+"nameserver 192.0.2.78\n")
		},
		"replaced by a symlink": func(t *testing.T, path string) {
			os.Remove(path)
			if err := os.Symlink("/run/resolvconf/resolv.conf", path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			root := resolvedRoot(t)
			fsys := rootOf(t, root)
			mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
			live := filepath.Join(root, "etc/resolv.conf")
			change(t, live)
			theirs := dnstest.Tree(t, root)["etc/resolv.conf"]

			r := mustUninstall(t, fsys)
			if got := dnstest.Tree(t, root)["etc/resolv.conf"]; got != theirs {
				t.Errorf("uninstall touched a resolv.conf that is no longer towerd's: %+v", got)
			}
			if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], ResolvConfPath) || !strings.Contains(r.Warnings[0], ResolvConfBackup) {
				t.Errorf("warnings %q, want one naming %s and its backup", r.Warnings, ResolvConfPath)
			}
			if _, err := os.Lstat(filepath.Join(root, "etc/resolv.pre-towerd-backup.conf")); err != nil {
				t.Errorf("the backup should stay for the operator: %v", err)
			}
			// Every other step is still undone.
			for _, p := range []string{"usr/local/bin/towerd", "etc/towerd", "etc/systemd/resolved.conf.d", "etc/systemd/system"} {
				if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there after uninstall", p)
				}
			}
		})
	}
}
