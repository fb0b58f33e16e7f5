package install

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/test/dnstest"
)

// errKilled is what faultFS panics with: the process died here.
var errKilled = errors.New("killed")

// faultFS lets an install or uninstall make steps changes to the file
// system and kills it (a panic no caller recovers) at the next one. A kill
// during WriteTemp leaves the temp file half written, as SIGKILL between
// write(2) calls would.
type faultFS struct {
	fileSystem
	steps *int
}

func (f faultFS) step() {
	if *f.steps == 0 {
		panic(errKilled)
	}
	*f.steps--
}

func (f faultFS) WriteTemp(name string, data []byte, perm fs.FileMode) (string, error) {
	if *f.steps == 0 {
		_, _ = f.fileSystem.WriteTemp(name, data[:len(data)/2], perm)
		panic(errKilled)
	}
	f.step()
	return f.fileSystem.WriteTemp(name, data, perm)
}
func (f faultFS) Overwrite(name string, data []byte, perm fs.FileMode) error {
	f.step()
	return f.fileSystem.Overwrite(name, data, perm)
}
func (f faultFS) Symlink(target, name string) error {
	f.step()
	return f.fileSystem.Symlink(target, name)
}
func (f faultFS) Rename(o, n string) error { f.step(); return f.fileSystem.Rename(o, n) }
func (f faultFS) Remove(name string) error { f.step(); return f.fileSystem.Remove(name) }
func (f faultFS) Mkdir(name string, perm fs.FileMode) error {
	f.step()
	return f.fileSystem.Mkdir(name, perm)
}

// killedAfter runs op on fsys killed after steps changes; it reports
// whether op finished first.
func killedAfter(t *testing.T, steps int, fsys fileSystem, op func(fileSystem) error) (finished bool) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			if p != errKilled {
				panic(p)
			}
			finished = false
		}
	}()
	if err := op(faultFS{fileSystem: fsys, steps: &steps}); err != nil {
		t.Fatalf("step budget %d: %v", steps, err)
	}
	return true
}

// killFixture is a root to kill install on, and how install is run there.
type killFixture struct {
	build  func(t *testing.T) string
	docker bool
	// fromDnsmasq: install imports the node's dnsmasq configuration, whose
	// directives go into the record (issue 25 item 1).
	fromDnsmasq bool
}

// killFixtures are the nodes install is killed on: resolved's (resolv.conf
// a link, a drop-in to write, nothing of towerd's); one where a
// hand-installed towerd, a unit and a plain resolv.conf must be backed up;
// and issue 14's nodes, for the files it added: nsswitch.conf, Docker's
// daemon.json and socket drop-in and the Consul token's drop-in (Debian 12
// with --docker and a token), NetworkManager's drop-in, and dhclient's hook
// with its seeded file in a directory of towerd's under /run.
var killFixtures = map[string]killFixture{
	"resolved node": {build: resolvedRoot},
	"foreign files": {build: func(t *testing.T) string {
		root := t.TempDir()
		dnstest.WriteTree(t, root, map[string]string{
			"etc/resolv.conf":                   "nameserver 192.0.2.1\nsearch corp.example\n",
			"usr/local/bin/towerd":              "an older towerd, installed by hand\n",
			"etc/systemd/system/towerd.service": "[Service]\nExecStart=/opt/towerd\n",
		})
		return root
	}},
	"debian12 with docker and a token": {docker: true, build: func(t *testing.T) string {
		root, _ := buildNode(t, nodeCase{kind: nodeDebianResolved, docker: true})
		dnstest.WriteTree(t, root, map[string]string{"etc/towerd/consul-token": "s3cret\n"})
		return root
	}},
	"networkmanager": {build: func(t *testing.T) string {
		root, _ := buildNode(t, nodeCase{kind: nodeUbuntuNM})
		return root
	}},
	"dhclient": {build: func(t *testing.T) string {
		root, _ := buildNode(t, nodeCase{kind: nodeDhclient})
		return root
	}},
	"dnsmasq, imported": {fromDnsmasq: true, build: func(t *testing.T) string {
		root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
		return root
	}},
	// The package's program, units and sample config: install writes
	// its drop-in in a directory of its own under /etc/towerd.
	"packaged dhclient": {build: packagedDhclientNode},
}

// TestInstallKilledAtEveryStep: issue 13 item 3. For every n, an install
// killed after n changes is undone byte for byte by uninstall, and
// finished by a second install into exactly what an uninterrupted install
// makes (which uninstall then undoes byte for byte as well).
func TestInstallKilledAtEveryStep(t *testing.T) {
	for name, kf := range killFixtures {
		fixture := kf.build
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			binary := fakeBinary(t)
			opts := InstallOptions{Binary: binary, Docker: kf.docker}
			doInstall := func(fsys fileSystem) error { _, err := install(fsys, opts); return err }

			clean := fixture(t)
			if kf.fromDnsmasq {
				opts.Import = dnsmasqNodeImport(t, rootOf(t, clean))
			}
			before := dnstest.Tree(t, clean)
			mustInstall(t, rootOf(t, clean), opts)
			installed := dnstest.Tree(t, clean)

			steps := 0
			for ; ; steps++ {
				undone := fixture(t)
				if killedAfter(t, steps, rootOf(t, undone), doInstall) {
					break
				}
				r := mustUninstall(t, rootOf(t, undone))
				t.Run("uninstall after kill", func(t *testing.T) {
					dnstest.DiffTrees(t, before, dnstest.Tree(t, undone))
					if len(r.Warnings) != 0 {
						t.Errorf("kill after %d steps: uninstall warns %q", steps, r.Warnings)
					}
				})

				finished := fixture(t)
				killedAfter(t, steps, rootOf(t, finished), doInstall)
				mustInstall(t, rootOf(t, finished), opts)
				t.Run("install after kill", func(t *testing.T) {
					dnstest.DiffTrees(t, installed, dnstest.Tree(t, finished))
				})
				mustUninstall(t, rootOf(t, finished))
				t.Run("install after kill, then uninstall", func(t *testing.T) {
					dnstest.DiffTrees(t, before, dnstest.Tree(t, finished))
				})
				if t.Failed() {
					t.Fatalf("install killed after %d changes (see above)", steps)
				}
			}
			if steps < 10 {
				t.Fatalf("install finished after %d changes; the test killed too few steps to mean much", steps)
			}
			t.Logf("install killed after each of its %d changes", steps)
		})
	}
}

// TestUninstallKilledAtEveryStep: an uninstall killed after n changes is
// finished by the next uninstall, byte for byte.
func TestUninstallKilledAtEveryStep(t *testing.T) {
	for name, kf := range killFixtures {
		fixture := kf.build
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := InstallOptions{Binary: fakeBinary(t), Docker: kf.docker}
			if kf.fromDnsmasq {
				opts.Import = dnsmasqNodeImport(t, rootOf(t, fixture(t)))
			}
			doUninstall := func(fsys fileSystem) error { _, err := uninstall(fsys, UninstallOptions{}); return err }
			steps := 0
			for ; ; steps++ {
				root := fixture(t)
				before := dnstest.Tree(t, root)
				mustInstall(t, rootOf(t, root), opts)
				if killedAfter(t, steps, rootOf(t, root), doUninstall) {
					break
				}
				r := mustUninstall(t, rootOf(t, root))
				dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
				if len(r.Warnings) != 0 {
					t.Errorf("uninstall after the kill warns %q", r.Warnings)
				}
				if t.Failed() {
					t.Fatalf("uninstall killed after %d changes (see above)", steps)
				}
			}
			t.Logf("uninstall killed after each of its %d changes", steps)
		})
	}
}

// TestNoTempFileIsLeft: what a kill during a write leaves is there to be
// swept (the test above would not see a temp file the sweep missed if the
// tree compare ignored dot files; it does not).
func TestNoTempFileIsLeft(t *testing.T) {
	root := resolvedRoot(t)
	steps := 3
	killedAfter(t, steps, rootOf(t, root), func(fsys fileSystem) error {
		_, err := install(fsys, InstallOptions{Binary: fakeBinary(t)})
		return err
	})
	var temps []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && nodefs.IsTempName(d.Name()) {
			temps = append(temps, p)
		}
		return err
	})
	if len(temps) == 0 {
		t.Fatal("the kill left no temp file: the sweep is not exercised")
	}
	mustUninstall(t, rootOf(t, root))
	for _, p := range temps {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there", p)
		}
	}
}
