package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallRefusesSymlinksOutOfTheRoot: issue 13 item 2 with the built
// binary. Links planted under --root that point out of it: at a file
// install replaces (resolv.conf, the binary) the link itself is replaced
// and its target untouched; at a directory install writes into (the unit
// directory) install stops with an error that says why. Either way nothing
// outside the root changes, and uninstall puts the root back as it was.
func TestInstallRefusesSymlinksOutOfTheRoot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		links   map[string]string // under the root -> under the outside dir
		refused string            // "" = install succeeds
	}{
		{"files", map[string]string{"etc/resolv.conf": "victim", "usr/local/bin/towerd": "victim"}, ""},
		{"unit directory", map[string]string{"etc/systemd/system": "dir"}, "leads out of the root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			outside := t.TempDir()
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("precious\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(outside, "dir"), 0o700); err != nil {
				t.Fatal(err)
			}
			outsideBefore := treeState(t, outside)
			root := resolvedNode(t)
			for at, to := range tt.links {
				p := filepath.Join(root, at)
				os.RemoveAll(p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(outside, to), p); err != nil {
					t.Fatal(err)
				}
			}
			before := treeState(t, root)

			// resolv.conf is no longer resolved's link: the node counts as
			// static, and the file it names is outside: pin the servers.
			code, out, errOut := runToExit(t, "install", "--root", root, "--upstream", "192.0.2.10")
			switch {
			case tt.refused == "" && code != 0:
				t.Fatalf("install: status %d\n%s%s", code, out, errOut)
			case tt.refused != "" && (code == 0 || !strings.Contains(errOut, tt.refused)):
				t.Fatalf("install: status %d, want a refusal saying %q\n%s%s", code, tt.refused, out, errOut)
			}
			sameTree(t, "outside the root after install", outsideBefore, treeState(t, outside), true)
			if tt.refused == "" {
				if s := treeState(t, root)["etc/resolv.conf"]; s.kind != "file" || !strings.HasPrefix(s.data, "# Managed by towerd") {
					t.Errorf("resolv.conf after install: %+v", s)
				}
			}

			code, out, errOut = runToExit(t, "uninstall", "--root", root)
			if code != 0 {
				t.Fatalf("uninstall: status %d\n%s%s", code, out, errOut)
			}
			sameTree(t, "outside the root after uninstall", outsideBefore, treeState(t, outside), true)
			sameTree(t, "the root after uninstall", before, treeState(t, root), false)
		})
	}
}
