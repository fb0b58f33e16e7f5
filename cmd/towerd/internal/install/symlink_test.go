package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/test/dnstest"
)

// TestPlantedSymlinksCannotSteerInstall: issue 13 item 2. Someone who
// could write under the root before install ran plants a symlink at each
// path install writes, or at a directory on its way, pointing out of the
// root. Nothing outside the root changes (the whole outside tree is
// compared, content and modes), install either refuses with an error that
// says why or replaces the link itself, and uninstall then puts the root
// back as it was.
func TestPlantedSymlinksCannotSteerInstall(t *testing.T) {
	tests := []struct {
		name string
		// plant returns the links to add under the root, given the outside
		// directory (absolute).
		plant   func(outside string) map[string]string
		refused string // "" = install succeeds
		// replaced: the planted link sits at a name that is towerd's own
		// (a backup), so install replaces it and uninstall removes it.
		replaced bool
	}{
		{"resolv.conf", func(o string) map[string]string {
			return map[string]string{"etc/resolv.conf": "->" + o + "/victim"}
		}, "", false},
		{"the resolv.conf backup", func(o string) map[string]string {
			return map[string]string{"etc/resolv.pre-towerd-backup.conf": "->" + o + "/victim"}
		}, "", true},
		{"the old temp names", func(o string) map[string]string {
			return map[string]string{
				"etc/.resolv.conf.towerd-new":                    "->" + o + "/victim",
				"etc/.resolv.pre-towerd-backup.conf.towerd-link": "->" + o + "/victim",
				"usr/local/bin/.towerd.towerd-new":               "->" + o + "/victim",
				"etc/systemd/system/.towerd.socket.towerd-new":   "->" + o + "/victim",
			}
		}, "", false},
		{"the binary", func(o string) map[string]string {
			return map[string]string{"usr/local/bin/towerd": "->" + o + "/victim"}
		}, "", false},
		{"the binary's backup", func(o string) map[string]string {
			return map[string]string{
				"usr/local/bin/towerd":            "an older towerd\n",
				"usr/local/bin/towerd.pre-towerd": "->" + o + "/victim",
			}
		}, "", true},
		{"a unit", func(o string) map[string]string {
			return map[string]string{"etc/systemd/system/towerd.service": "->" + o + "/victim"}
		}, "", false},
		{"the config", func(o string) map[string]string {
			return map[string]string{"etc/towerd/towerd.toml": "->" + o + "/victim"}
		}, "", false},
		{"the drop-in", func(o string) map[string]string {
			return map[string]string{"etc/systemd/resolved.conf.d/towerd.conf": "->" + o + "/victim"}
		}, "", false},
		{"the binary's directory", func(o string) map[string]string {
			return map[string]string{"usr/local/bin": "->" + o + "/dir"}
		}, "leads out of the root", false},
		{"the unit directory", func(o string) map[string]string {
			return map[string]string{"etc/systemd/system": "->" + o + "/dir"}
		}, "leads out of the root", false},
		{"the unit directory, relative", func(o string) map[string]string {
			return map[string]string{"etc/systemd/system": "->../../../../../../../../../../../../.." + o + "/dir"}
		}, "leads out of the root", false},
		{"the drop-in directory", func(o string) map[string]string {
			return map[string]string{"etc/systemd/resolved.conf.d": "->" + o + "/dir"}
		}, "leads out of the root", false},
		{"the record's directory", func(o string) map[string]string {
			return map[string]string{"etc/towerd": "->" + o + "/dir"}
		}, "leads out of the root", false},
		{"the record", func(o string) map[string]string {
			return map[string]string{"etc/towerd/install-state.json": "->" + o + "/victim"}
		}, "is a symlink", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outside := t.TempDir()
			dnstest.WriteTree(t, outside, map[string]string{"victim": "precious\n", "dir/keep": "precious too\n"})
			if err := os.Chmod(filepath.Join(outside, "victim"), 0o600); err != nil {
				t.Fatal(err)
			}
			outsideBefore := dnstest.Tree(t, outside)
			root := resolvedRoot(t)
			for name := range tt.plant(outside) {
				os.Remove(filepath.Join(root, name)) // resolv.conf is a link already
			}
			dnstest.WriteTree(t, root, tt.plant(outside))
			before := dnstest.Tree(t, root)
			fsys := rootOf(t, root)

			opts := InstallOptions{Binary: fakeBinary(t)}
			if tt.name == "resolv.conf" {
				// No longer resolved's link: a static node, whose servers
				// (outside the root) cannot be read.
				opts.Upstreams = []string{"192.0.2.1"}
			}
			_, err := install(fsys, opts)
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("install: %v", err)
			case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("install = %v, want a refusal saying %q", err, tt.refused)
			}
			dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
			if n := dnstest.Tree(t, root)["etc/resolv.conf"]; tt.refused == "" && n.Kind != "file" {
				t.Errorf("resolv.conf is %+v after install, want towerd's file", n)
			}
			if strings.HasPrefix(tt.name, "the record") {
				// Uninstall refuses the planted record just the same.
				if _, err := uninstall(fsys, UninstallOptions{}); err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Errorf("uninstall = %v, want a refusal saying %q", err, tt.refused)
				}
				dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
				return
			}
			mustUninstall(t, fsys)
			dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
			if tt.replaced {
				for link := range tt.plant(outside) {
					if strings.Contains(link, "pre-towerd") {
						delete(before, link)
					}
				}
			}
			dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
		})
	}
}

// TestUninstallRefusesAPlantedRecord: the record decides what uninstall
// removes; a link in its place is refused, not followed.
func TestUninstallRefusesAPlantedRecord(t *testing.T) {
	outside := t.TempDir()
	dnstest.WriteTree(t, outside, map[string]string{"record.json": `{"files":[{"path":"/etc/hosts","sum":"x"}]}`})
	root := resolvedRoot(t)
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/install-state.json": "->" + outside + "/record.json"})
	before := dnstest.Tree(t, root)
	if _, err := uninstall(rootOf(t, root), UninstallOptions{}); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Fatalf("uninstall = %v, want a refusal of the linked record", err)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestTempNamesAreUnpredictable: two temp names for one path differ, and
// the sweep recognises them and nothing else.
func TestTempNamesAreUnpredictable(t *testing.T) {
	a, b := nodefs.TempName(ResolvConfPath), nodefs.TempName(ResolvConfPath)
	if a == b || !strings.HasPrefix(a, "/etc/.resolv.conf.towerd-") {
		t.Errorf("temp names %q, %q", a, b)
	}
	for name, want := range map[string]bool{
		filepath.Base(a):                  true,
		".resolv.conf.towerd-new":         false,
		"resolv.conf":                     false,
		".x.towerd-0123456789abcdeg":      false,
		".towerd.towerd-0123456789abcdef": true,
	} {
		if got := nodefs.IsTempName(name); got != want {
			t.Errorf("nodefs.IsTempName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestPlantedSymlinksAtIssue14Files: the same for the files issue 14 added
// (nsswitch.conf, Docker's daemon.json and socket drop-in, the Consul
// token's drop-in, NetworkManager's drop-in, dhclient's hook and the file
// it seeds): nothing outside the root changes, install refuses a directory
// that leads out of the root or replaces (or leaves) a link, and uninstall
// puts the root back as it was.
func TestPlantedSymlinksAtIssue14Files(t *testing.T) {
	debian := func(t *testing.T) string {
		root, _ := buildNode(t, nodeCase{kind: nodeDebianResolved, docker: true})
		dnstest.WriteTree(t, root, map[string]string{"etc/towerd/consul-token": "s3cret\n"})
		return root
	}
	nm := func(t *testing.T) string { root, _ := buildNode(t, nodeCase{kind: nodeUbuntuNM}); return root }
	dhclient := func(t *testing.T) string { root, _ := buildNode(t, nodeCase{kind: nodeDhclient}); return root }
	tests := []struct {
		name    string
		fixture func(t *testing.T) string
		link    string // under the root
		target  string // under the outside directory
		refused string // "" = install succeeds
		// replaced: install replaces the link (backing it up as a link).
		replaced bool
	}{
		{"nsswitch.conf", debian, "etc/nsswitch.conf", "victim", "", false},
		{"daemon.json", debian, "etc/docker/daemon.json", "victim", "", true},
		{"the socket drop-in", debian, "etc/systemd/system/towerd.socket.d/docker0.conf", "victim", "", true},
		{"the socket drop-in directory", debian, "etc/systemd/system/towerd.socket.d", "dir", "leads out of the root", false},
		{"the token drop-in directory", debian, "etc/systemd/system/towerd.service.d", "dir", "leads out of the root", false},
		{"NetworkManager's conf.d", nm, "etc/NetworkManager/conf.d", "dir", "leads out of the root", false},
		{"NetworkManager's drop-in", nm, "etc/NetworkManager/conf.d/99-towerd.conf", "victim", "", true},
		{"the dhclient hook", dhclient, "etc/dhcp/dhclient-enter-hooks.d/towerd", "victim", "", true},
		{"the hook directory", dhclient, "etc/dhcp/dhclient-enter-hooks.d", "dir", "leads out of the root", false},
		{"the followed file's directory", dhclient, "run/towerd-dhclient", "dir", "leads out of the root", false},
		{"the followed file", dhclient, "run/towerd-dhclient/resolv.conf", "victim", "", false},
		{"the config drop-in directory", packagedDhclientNode, "etc/towerd/towerd.d", "dir", "leads out of the root", false},
		{"the config drop-in", packagedDhclientNode, "etc/towerd/towerd.d/00-install.toml", "victim", "", false},
		{"the package's sample", packagedDhclientNode, "etc/towerd/towerd.toml", "victim", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			outside := t.TempDir()
			dnstest.WriteTree(t, outside, map[string]string{"victim": "precious\n", "dir/keep": "precious too\n"})
			outsideBefore := dnstest.Tree(t, outside)
			root := tt.fixture(t)
			os.RemoveAll(filepath.Join(root, tt.link))
			dnstest.WriteTree(t, root, map[string]string{tt.link: "->" + outside + "/" + tt.target})
			before := dnstest.Tree(t, root)
			fsys := rootOf(t, root)

			// Only the Debian fixture has Docker: --docker there.
			docker := nodeHas(fsys, DockerDaemonJSON)
			r, err := install(fsys, InstallOptions{Binary: fakeBinary(t), Docker: docker})
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("install: %v", err)
			case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("install = %v, want a refusal saying %q", err, tt.refused)
			}
			dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
			if tt.refused == "" {
				if c := changeFor(r, "/"+tt.link); c.Action == "" && !tt.replaced {
					t.Errorf("the report says nothing of %s: %+v", tt.link, r.Changes)
				}
				if n := dnstest.Tree(t, root)[tt.link]; tt.replaced != (n.Kind == "file") {
					t.Errorf("%s after install: %+v (replaced: %v)", tt.link, n, tt.replaced)
				}
			}
			mustUninstall(t, fsys)
			dnstest.DiffTrees(t, outsideBefore, dnstest.Tree(t, outside))
			dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
		})
	}
}
