package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/test/dnstest"
)

// Issue 25 item 1: a re-run of install never loses a setting of a config
// it imported. The e2e test (test/e2e_install_dnsmasq_test.go) runs the
// same day with the built binary.

// dnsmasqNodeImport is what --from-dnsmasq reads on the Consul dnsmasq node.
func dnsmasqNodeImport(t *testing.T, fsys fileSystem) *Import {
	t.Helper()
	read, err := dnsmasqimport.ReadNode(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return &Import{Source: strings.Join(read.Paths(), ", "), Directives: read.Directives}
}

func TestReinstallKeepsAnImport(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	imp := dnsmasqNodeImport(t, fsys)
	imp.Directives = append(imp.Directives, dnsmasqimport.Directive{File: DnsmasqConf, Line: 99, Name: "cache-size", Value: "4242", Has: true})
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Import: imp})
	imported := read(t, root, "etc/towerd/towerd.toml")
	if !strings.Contains(imported, "size = 4242") || !strings.Contains(imported, `"consul."`) {
		t.Fatalf("the import is not in towerd.toml:\n%s", imported)
	}
	stamps := stampsOf(t, root)

	// A plain re-run: nothing changes, and the report says why.
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if r.Changed() {
		t.Errorf("a plain re-run changed something: %+v", r.Changes)
	}
	if c := changeFor(r, ConfigPath); c.Action != "unchanged" || !strings.Contains(c.Detail, "earlier install imported") {
		t.Errorf("report of towerd.toml: %+v", c)
	}
	for p, s := range stampsOf(t, root) {
		if stamps[p] != s {
			t.Errorf("a plain re-run rewrote %s", p)
		}
	}

	// --upstream: merged, every imported setting kept.
	r = mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Upstreams: []string{"10.0.0.9"}})
	merged := read(t, root, "etc/towerd/towerd.toml")
	for _, want := range []string{"size = 4242", `"consul."`, `servers = ["10.0.0.9:53"]`} {
		if !strings.Contains(merged, want) {
			t.Errorf("the merged towerd.toml lacks %q:\n%s", want, merged)
		}
	}
	if c := changeFor(r, ConfigPath); c.Action != "wrote" || !strings.HasPrefix(c.Detail, "merged: ") || !strings.Contains(c.Detail, "was: zone \".\" follows") {
		t.Errorf("report of the merge: %+v", c)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestReinstallRefusesToPinOverAnImportedRoot: an import that names zone
// "."'s servers itself keeps them; --upstream on a re-run is refused
// before anything changes, as it is with --from-dnsmasq.
func TestReinstallRefusesToPinOverAnImportedRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{"etc/resolv.conf": "nameserver 127.0.0.1\n"})
	fsys := rootOf(t, root)
	imp := &Import{Source: DnsmasqConf, Directives: []dnsmasqimport.Directive{
		{File: DnsmasqConf, Line: 1, Name: "server", Value: "192.0.2.9", Has: true},
		{File: DnsmasqConf, Line: 2, Name: "no-resolv"},
	}}
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Import: imp})
	installed := dnstest.Tree(t, root)
	_, err := install(fsys, InstallOptions{Binary: fakeBinary(t), Upstreams: []string{"10.0.0.9"}})
	if err == nil || !strings.Contains(err.Error(), "--upstream cannot take effect") || !strings.Contains(err.Error(), "earlier install imported") {
		t.Errorf("--upstream over an imported zone \".\" = %v", err)
	}
	dnstest.DiffTrees(t, installed, dnstest.Tree(t, root))
}

// TestReinstallKeepsAnOlderTowerdsImport: an import by a towerd whose
// record did not keep the directives is recognised by its header and
// kept; a flag that needs it rewritten is refused.
func TestReinstallKeepsAnOlderTowerdsImport(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
	fsys := rootOf(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Import: dnsmasqNodeImport(t, fsys)})
	// What an older towerd recorded: the file and its sum, nothing else.
	m, err := loadManifest(fsys)
	if err != nil {
		t.Fatal(err)
	}
	m.file(ConfigPath).Config = nil
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(root, "etc/towerd/install-state.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	installed := dnstest.Tree(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if c := changeFor(r, ConfigPath); c.Action != "kept" || !strings.Contains(c.Detail, "whose record does not keep the import") {
		t.Errorf("report of the older import: %+v", c)
	}
	if _, err := install(fsys, InstallOptions{Binary: fakeBinary(t), Upstreams: []string{"10.0.0.9"}}); err == nil ||
		!strings.Contains(err.Error(), "--upstream cannot take effect") {
		t.Errorf("--upstream over an older import = %v", err)
	}
	if got := dnstest.Tree(t, root)["etc/towerd/towerd.toml"]; got != installed["etc/towerd/towerd.toml"] {
		t.Errorf("the older import changed: %+v", got)
	}
}
