package install

import (
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/systemd"
	"github.com/towerd/towerd/test/dnstest"
)

// packagedSample stands in for docs/towerd.toml, the package's conffile:
// every key commented out.
const packagedSample = "# towerd's configuration (towerd.toml(5)). Every key is shown at its\n" +
	"# default, commented out.\n\n#listen = [\"127.0.0.1:53\"]\n#resolv_conf = \"\"\n\n[cache]\n#size = 10000\n"

// addPackage lays out what `apt install ./towerd_*.deb` puts under root:
// the program, its units in /lib/systemd/system and the sample config.
func addPackage(t *testing.T, root string) {
	t.Helper()
	units, err := systemd.Units(PackagedBinaryPath)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"usr/bin/towerd":          "#!/bin/sh\necho packaged towerd\n",
		"etc/towerd/towerd.toml":  packagedSample,
		"usr/share/doc/towerd/x/": "",
	}
	for _, u := range units {
		files[path.Join("lib/systemd/system", u.Name)] = u.Content
	}
	dnstest.WriteTree(t, root, files)
}

// packagedDhclientNode is issue 14's dhclient node with towerd's package
// installed: the node where the sample config used to hide resolv_conf.
func packagedDhclientNode(t *testing.T) string {
	root, _ := buildNode(t, nodeCase{kind: nodeDhclient})
	addPackage(t, root)
	return root
}

// TestInstallOnAPackagedNode: with the package's units under the root,
// install copies neither the program nor the units, leaves the sample
// towerd.toml to dpkg and writes its settings as towerd.d/00-install.toml;
// a second run changes nothing and uninstall restores the root byte for
// byte.
func TestInstallOnAPackagedNode(t *testing.T) {
	t.Parallel()
	root := packagedDhclientNode(t)
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)

	dry := mustInstall(t, fsys, InstallOptions{Root: root, Binary: filepath.Join(root, PackagedBinaryPath), DryRun: true})
	if c := changeFor(dry, ConfigDropIn); c.Action != "would write" {
		t.Errorf("dry run on %s: %+v", ConfigDropIn, c)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))

	r := mustInstall(t, fsys, InstallOptions{Root: root, Binary: filepath.Join(root, PackagedBinaryPath)})
	after := dnstest.Tree(t, root)
	for _, p := range []string{"usr/local/bin/towerd", "etc/systemd/system/towerd.service", "etc/systemd/system/towerd.socket"} {
		if _, ok := after[p]; ok {
			t.Errorf("%s was written: it would override the package's", p)
		}
	}
	for _, p := range []string{"usr/bin/towerd", "lib/systemd/system/towerd.service", "lib/systemd/system/towerd.socket", "etc/towerd/towerd.toml"} {
		if after[p] != before[p] {
			t.Errorf("%s changed: it is the package's", p)
		}
	}
	dropIn := after[strings.TrimPrefix(ConfigDropIn, "/")]
	if !strings.Contains(dropIn.Data, `resolv_conf = "/run/towerd-dhclient/resolv.conf"`) || dropIn.Mode != 0o644 {
		t.Errorf("%s: %+v, want resolv_conf naming dhclient's file", ConfigDropIn, dropIn)
	}
	if c := changeFor(r, PackagedBinaryPath); c.Action != "found" || !strings.Contains(c.Detail, "nothing is copied") ||
		strings.Contains(c.Detail, "not this program") {
		t.Errorf("report for %s: %+v", PackagedBinaryPath, c)
	}
	if c := changeFor(r, ConfigDropIn); !strings.Contains(c.Detail, "package's sample") {
		t.Errorf("report for %s: %+v", ConfigDropIn, c)
	}
	if !strings.Contains(after["etc/resolv.conf"].Data, resolvConfMarker) {
		t.Errorf("resolv.conf is not towerd's")
	}

	if r := mustInstall(t, fsys, InstallOptions{Root: root, Binary: fakeBinary(t)}); r.Changed() {
		t.Errorf("second install changed %+v", r.Changes)
	} else if c := changeFor(r, PackagedBinaryPath); !strings.Contains(c.Detail, "not this program") {
		t.Errorf("another program than the package's: %+v", c)
	}
	dnstest.DiffTrees(t, after, dnstest.Tree(t, root))

	r = mustUninstall(t, fsys)
	if len(r.Warnings) != 0 {
		t.Errorf("uninstall warns %q", r.Warnings)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestPackagedSampleWithoutPackage: a towerd.toml that sets nothing is no
// operator's config, package or not: install writes the drop-in (and still
// copies the program, there being no package).
func TestPackagedSampleWithoutPackage(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeUbuntuNM})
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/towerd.toml": packagedSample})
	before := dnstest.Tree(t, root)
	mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	after := dnstest.Tree(t, root)
	if !strings.Contains(after["etc/towerd/towerd.d/00-install.toml"].Data, `resolv_conf = "/run/NetworkManager/no-stub-resolv.conf"`) {
		t.Errorf("drop-in: %+v", after["etc/towerd/towerd.d/00-install.toml"])
	}
	if after["etc/towerd/towerd.toml"] != before["etc/towerd/towerd.toml"] || after["usr/local/bin/towerd"].Kind != "file" {
		t.Errorf("towerd.toml %+v, usr/local/bin/towerd %+v", after["etc/towerd/towerd.toml"], after["usr/local/bin/towerd"])
	}
	mustUninstall(t, rootOf(t, root))
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))

	// One key set: the operator's, kept as before, and no drop-in.
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/towerd.toml": packagedSample + "log_level = \"debug\"\n"})
	r := mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	if c := changeFor(r, ConfigPath); c.Action != "kept" {
		t.Errorf("an edited towerd.toml: %+v, want kept", c)
	}
	if _, ok := dnstest.Tree(t, root)["etc/towerd/towerd.d"]; ok {
		t.Errorf("a drop-in dir was made beside an operator's towerd.toml")
	}
}

// TestAHandWrittenUnitOverridingThePackage: a unit in /etc/systemd/system
// that install did not write is left alone, with a warning: it shadows the
// package's.
func TestAHandWrittenUnitOverridingThePackage(t *testing.T) {
	t.Parallel()
	root := packagedDhclientNode(t)
	dnstest.WriteTree(t, root, map[string]string{"etc/systemd/system/towerd.service": "[Service]\nExecStart=/opt/towerd serve\n"})
	r := mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "/etc/systemd/system/towerd.service is not towerd install's") {
		t.Errorf("warnings %q", r.Warnings)
	}
	if got := read(t, root, "etc/systemd/system/towerd.service"); got != "[Service]\nExecStart=/opt/towerd serve\n" {
		t.Errorf("the hand-written unit changed: %q", got)
	}
}

// TestPackageAfterAnEarlierInstall: towerd install ran from a copied
// binary, then the package came: the next install undoes the copies in
// /usr/local/bin and /etc/systemd/system (they override the package's) and
// uninstall still restores the node as it was, with the package.
func TestPackageAfterAnEarlierInstall(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeDhclient})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if dnstest.Tree(t, root)["usr/local/bin/towerd"].Kind != "file" {
		t.Fatal("no copy to begin with")
	}
	// dpkg finds install's towerd.toml in place and keeps it (the admin's
	// version of the conffile).
	units, _ := systemd.Units(PackagedBinaryPath)
	pkg := map[string]string{"usr/bin/towerd": "packaged\n"}
	for _, u := range units {
		pkg["lib/systemd/system/"+u.Name] = u.Content
	}
	dnstest.WriteTree(t, root, pkg)
	withPackage := dnstest.Tree(t, root)

	r := mustInstall(t, fsys, InstallOptions{Root: root, Binary: filepath.Join(root, PackagedBinaryPath)})
	after := dnstest.Tree(t, root)
	for _, p := range []string{"usr/local/bin/towerd", "etc/systemd/system/towerd.service", "etc/systemd/system/towerd.socket"} {
		if _, ok := after[p]; ok {
			t.Errorf("%s is still there, overriding the package's", p)
		}
		if c := changeFor(r, "/"+p); c.Action != "removed" {
			t.Errorf("report for %s: %+v", p, c)
		}
	}
	if _, ok := after["etc/towerd/towerd.d"]; ok {
		t.Errorf("install's own towerd.toml stays its target; no drop-in")
	}
	mustUninstall(t, fsys)
	want := before
	for p, n := range withPackage {
		if p == "usr" || p == "lib" || strings.HasPrefix(p, "usr/bin") || strings.HasPrefix(p, "lib/") {
			want[p] = n
		}
	}
	dnstest.DiffTrees(t, want, dnstest.Tree(t, root))
}
