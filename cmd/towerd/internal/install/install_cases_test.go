package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/test/dnstest"
)

func TestDryRunsChangeNothing(t *testing.T) {
	root := resolvedRoot(t)
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), DryRun: true})
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
	if !r.Changed() || changeFor(r, ResolvConfPath).Action != "would write" {
		t.Errorf("a dry run should report the plan, got %+v", r.Changes)
	}
	if c := changeFor(r, "/etc/towerd/"); c.Action != "would create" {
		t.Errorf("the plan should create /etc/towerd/ once: %+v", r.Changes)
	}

	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	installed := dnstest.Tree(t, root)
	r, err := uninstall(fsys, UninstallOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	dnstest.DiffTrees(t, installed, dnstest.Tree(t, root))
	if c := changeFor(r, ResolvConfPath); c.Action != "would restore" {
		t.Errorf("the uninstall plan should restore resolv.conf: %+v", r.Changes)
	}
}

func TestInstallNeedsAnUpstream(t *testing.T) {
	root := t.TempDir()
	// resolved's stub is the only server, and resolved's own list is gone:
	// forwarding to the stub would break once install turns it off.
	dnstest.WriteTree(t, root, map[string]string{
		"etc/resolv.conf":                      "->../run/systemd/resolve/stub-resolv.conf",
		"run/systemd/resolve/stub-resolv.conf": stubResolvConf,
	})
	before := dnstest.Tree(t, root)
	_, err := install(rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	if err == nil || !strings.Contains(err.Error(), "--upstream") {
		t.Fatalf("install = %v, want an error that suggests --upstream", err)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))

	r := mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t), Upstreams: []string{"192.0.2.5", "192.0.2.6:5353"}})
	if cfg := read(t, root, "etc/towerd/towerd.toml"); !strings.Contains(cfg, `servers = ["192.0.2.5:53", "192.0.2.6:5353"]`) {
		t.Errorf("config:\n%s", cfg)
	}
	if len(r.Warnings) != 0 {
		t.Errorf("given upstreams need no warning: %q", r.Warnings)
	}
}

func TestAnOperatorsConfigIsKept(t *testing.T) {
	root := resolvedRoot(t)
	const mine = "[[zone]]\nname = \".\"\nservers = [\"192.0.2.99\"]\n"
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/towerd.toml": mine})
	before := dnstest.Tree(t, root)
	fsys := rootOf(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if c := changeFor(r, ConfigPath); c.Action != "kept" {
		t.Errorf("config change %+v, want kept", c)
	}
	if got := read(t, root, "etc/towerd/towerd.toml"); got != mine {
		t.Errorf("install rewrote the operator's config:\n%s", got)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

func TestUninstallKeepsAConfigEditedSinceInstall(t *testing.T) {
	root := resolvedRoot(t)
	fsys := rootOf(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	cfgPath := filepath.Join(root, "etc/towerd/towerd.toml")
	edited := read(t, root, "etc/towerd/towerd.toml") + "log_level = \"debug\"\n"
	dnstest.WriteFile(t, cfgPath, edited)

	r := mustUninstall(t, fsys)
	if got := read(t, root, "etc/towerd/towerd.toml"); got != edited {
		t.Errorf("uninstall touched an edited config")
	}
	if c := changeFor(r, "/etc/towerd/"); c.Action != "kept" {
		t.Errorf("/etc/towerd/ holds the edited config and must stay: %+v", c)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], ConfigPath) {
		t.Errorf("warnings %q, want one about the config", r.Warnings)
	}
	if got := read(t, root, "etc/resolv.conf"); got != stubResolvConf {
		t.Errorf("resolv.conf was not restored:\n%s", got)
	}
}

func TestUninstallRefusesWhileEnabled(t *testing.T) {
	root := resolvedRoot(t)
	fsys := rootOf(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	// What `systemctl enable towerd.socket` leaves behind.
	dnstest.WriteTree(t, root, map[string]string{"etc/systemd/system/sockets.target.wants/towerd.socket": "->/etc/systemd/system/towerd.socket"})
	installed := dnstest.Tree(t, root)
	_, err := uninstall(fsys, UninstallOptions{})
	if err == nil || !strings.Contains(err.Error(), "systemctl disable --now") {
		t.Fatalf("uninstall = %v, want a refusal naming systemctl disable", err)
	}
	dnstest.DiffTrees(t, installed, dnstest.Tree(t, root))
}

func TestAForeignFileIsBackedUpAndPutBack(t *testing.T) {
	root := resolvedRoot(t)
	dnstest.WriteTree(t, root, map[string]string{
		"usr/local/bin/towerd":              "an older towerd, installed by hand\n",
		"etc/systemd/system/towerd.service": "[Service]\nExecStart=/opt/towerd\n",
	})
	before := dnstest.Tree(t, root)
	fsys := rootOf(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if got := read(t, root, "usr/local/bin/towerd.pre-towerd"); got != "an older towerd, installed by hand\n" {
		t.Errorf("backup of the binary: %q", got)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

func TestAbsoluteStubLinkIsReadInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{
		"etc/resolv.conf":                      "->/run/systemd/resolve/stub-resolv.conf",
		"run/systemd/resolve/stub-resolv.conf": "nameserver 127.0.0.53\nsearch inside.example\n",
		"run/systemd/resolve/resolv.conf":      "nameserver 192.0.2.20\n",
	})
	fsys := rootOf(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if got := read(t, root, "etc/resolv.conf"); !strings.Contains(got, "search inside.example\n") {
		t.Errorf("the search list was not read through the absolute link inside the root:\n%s", got)
	}
	if n := dnstest.Tree(t, root)["etc/resolv.pre-towerd-backup.conf"]; n.Data != "/run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("backup %+v, want the absolute link as it was", n)
	}
}

func TestUninstallWithoutARecord(t *testing.T) {
	root := resolvedRoot(t)
	before := dnstest.Tree(t, root)
	r := mustUninstall(t, rootOf(t, root))
	if r.Changed() || len(r.Warnings) != 0 {
		t.Errorf("nothing installed: changes %+v warnings %q", r.Changes, r.Warnings)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))

	// A resolv.conf with towerd's marker but no record (an install that
	// died before saving it) is reported, not guessed at.
	os.Remove(filepath.Join(root, "etc/resolv.conf"))
	dnstest.WriteFile(t, filepath.Join(root, "etc/resolv.conf"), resolvConfMarker+"\nnameserver 127.0.0.1\n")
	r = mustUninstall(t, rootOf(t, root))
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "marker") {
		t.Errorf("warnings %q, want one about the marker", r.Warnings)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/resolv.conf")); errors.Is(err, os.ErrNotExist) {
		t.Error("uninstall without a record removed resolv.conf")
	}
}
