package dnsmasqimport

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/test/dnstest"
)

// runImport runs `towerd import-dnsmasq args` and returns its status and
// outputs.
func runImport(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestImportCommandOnADebianRoot: issue 25 item 2. With --root and no
// file, the import reads what dnsmasq reads on that node, Debian's
// CONFIG_DIR first, names every file it read, and takes the node's
// absolute paths under the root, never this machine's.
func TestImportCommandOnADebianRoot(t *testing.T) {
	root := t.TempDir()
	dnstest.WriteTree(t, root, debianNode)
	code, out, errOut := runImport(t, "--root", root)
	if code != base.ExitOK {
		t.Fatalf("status %d\n%s", code, errOut)
	}
	for _, f := range []string{"/etc/default/dnsmasq", "/etc/dnsmasq.d/10-consul", "/etc/dnsmasq.d/20-lab", "/etc/dnsmasq.conf"} {
		if !strings.Contains(errOut, "read "+f+" under "+root+": ") {
			t.Errorf("stderr does not say %s was read:\n%s", f, errOut)
		}
	}
	if !strings.Contains(out, `name    = "consul."`) || !strings.Contains(out, `servers = ["127.0.0.1:8600"]`) {
		t.Errorf("the consul zone of CONFIG_DIR is missing:\n%s", out)
	}
	// A directory is read as conf-dir reads it, and the node's own
	// configuration named in part says what it left out.
	code, out, errOut = runImport(t, "/etc/dnsmasq.d", "--root", root)
	if code != base.ExitOK || !strings.Contains(out, `"lab.example."`) || strings.Contains(out, "old.example") {
		t.Errorf("import of a directory: status %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "also reads /etc/dnsmasq.conf under "+root) {
		t.Errorf("no word of the file left out:\n%s", errOut)
	}
	code, _, errOut = runImport(t, "/etc/dnsmasq.conf", "--root", root)
	if code != base.ExitOK || !strings.Contains(errOut, "also reads /etc/dnsmasq.d/10-consul under "+root) {
		t.Errorf("import of dnsmasq.conf alone does not say CONFIG_DIR's files are left out: status %d\n%s", code, errOut)
	}
	// Under a root, a path is as the node sees it.
	if code, _, errOut = runImport(t, "--root", root, "etc/dnsmasq.conf"); code != base.ExitConfig || !strings.Contains(errOut, "absolute") {
		t.Errorf("a relative path under --root: status %d\n%s", code, errOut)
	}
}

// TestImportCommandWarnsOfAForeignConfiguration: a configuration copied
// from another node, imported without --root, takes what its includes
// name from this machine; the import says so.
func TestImportCommandWarnsOfAForeignConfiguration(t *testing.T) {
	dir := t.TempDir()
	dnstest.WriteTree(t, dir, map[string]string{
		"copied/dnsmasq.conf": "conf-file=" + filepath.Join(dir, "here.conf") + "\n",
		"here.conf":           "server=/consul/127.0.0.1#8600\n",
	})
	code, _, errOut := runImport(t, filepath.Join(dir, "copied/dnsmasq.conf"))
	if code != base.ExitOK || !strings.Contains(errOut, "was read from this machine") || !strings.Contains(errOut, "--root") {
		t.Errorf("status %d, stderr:\n%s", code, errOut)
	}
}

func TestImportCommandWithoutDnsmasq(t *testing.T) {
	code, out, errOut := runImport(t, "--root", t.TempDir())
	if code != base.ExitConfig || out != "" || !strings.Contains(errOut, "no dnsmasq configuration found") {
		t.Errorf("status %d\n%s%s", code, out, errOut)
	}
}
