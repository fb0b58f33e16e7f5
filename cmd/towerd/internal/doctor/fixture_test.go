package doctor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/systemd"
)

// A fixture is a node's root: regular files, symlinks and directories by
// node path. cleanNode is a node towerd was installed on and has nothing
// doctor would point out; each test changes one thing in it and expects
// exactly the findings that one change causes.

type fixture struct {
	files map[string]string
	links map[string]string
	dirs  []string
	modes map[string]os.FileMode
	// readOnlyDirs get mode 0555 once everything is written.
	readOnlyDirs []string
}

const towerdResolvConf = resolvConfMarkerLine + "nameserver 127.0.0.1\n"

// resolvConfMarkerLine starts the resolv.conf towerd install writes.
const resolvConfMarkerLine = "# Managed by towerd (`towerd install`): lookups go to towerd on 127.0.0.1:53.\n"

// cleanNode: towerd installed by hand the way install leaves a static
// node (zone "." pinned, resolv.conf towerd's), its socket enabled.
func cleanNode(t *testing.T) fixture {
	t.Helper()
	units, err := systemd.Units(systemd.DefaultBinaryPath)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{
		files: map[string]string{
			"/etc/resolv.conf":        towerdResolvConf,
			"/etc/nsswitch.conf":      "passwd: files\nhosts: files dns\n",
			"/etc/hosts":              "127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
			"/etc/towerd/towerd.toml": "[[zone]]\nname = \".\"\nservers = [\"10.0.0.2\"]\n",
			systemd.DefaultBinaryPath: "",
		},
		links: map[string]string{socketWants: "/etc/systemd/system/towerd.socket"},
		modes: map[string]os.FileMode{},
	}
	for _, u := range units {
		f.files[filepath.Join(systemd.UnitDir, u.Name)] = u.Content
	}
	return f
}

// write puts the fixture under a fresh root and returns it.
func (f fixture) write(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range f.dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range f.files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode, ok := f.modes[name]
		if !ok {
			mode = 0o644
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range f.links {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range f.readOnlyDirs {
		if err := os.Chmod(filepath.Join(root, d), 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, d), 0o755) })
	}
	return root
}

// diagnose reads root as a node image (nothing live is asked unless o
// names it) and returns the report. It fails the test when reading takes
// longer than a bound: a hostile file must not hang doctor.
func diagnose(t *testing.T, root string, o Options) Report {
	t.Helper()
	o.Root = root
	if o.ConfigPath == "" {
		o.ConfigPath = config.DefaultPath
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	type result struct {
		n   *Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := Read(context.Background(), o)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Read: %v", r.err)
		}
		return Diagnose(r.n)
	case <-time.After(60 * time.Second):
		t.Fatal("doctor did not finish reading the node within 60 s")
		return Report{}
	}
}

// got lists a report's findings as "id:severity", sorted.
func got(r Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.ID+":"+f.Severity.String())
	}
	slices.Sort(out)
	return out
}

// expectFindings fails unless the report has exactly want ("id:severity").
func expectFindings(t *testing.T, r Report, want ...string) {
	t.Helper()
	slices.Sort(want)
	if g := got(r); !slices.Equal(g, want) {
		t.Errorf("findings = %v\nwant       %v%s", g, want, dump(r))
	}
}

// finding returns the report's finding id, failing the test without one.
func finding(t *testing.T, r Report, id string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no finding %s in %v", id, got(r))
	return Finding{}
}

func dump(r Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString("\n  " + f.ID + ": " + f.Saw)
		for _, it := range f.Items {
			b.WriteString("\n    - " + it.Subject + ": " + it.Detail)
		}
	}
	for _, s := range r.Skipped {
		b.WriteString("\n  skipped " + s.Area + ": " + s.Reason)
	}
	return b.String()
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mkzero makes root/dev/zero the kernel's /dev/zero (a link to /dev/zero
// under the root resolves there), skipping the test where mknod is not
// permitted.
func mkzero(t *testing.T, root string) {
	t.Helper()
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	err := unix.Mknod(filepath.Join(dev, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5)))
	if err != nil && !os.IsExist(err) {
		t.Skipf("mknod /dev/zero under the root: %v", err)
	}
}
