package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/systemd"
)

// verifyUnitDir runs the real `systemd-analyze verify` on the units in dir (with
// their drop-in directories). It passes only with exit status 0 and no
// output: for an unknown key systemd-analyze warns but exits 0.
func verifyUnitDir(t *testing.T, dir string) (string, bool) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (test/install-deps.sh)")
	}
	cmd := exec.Command("systemd-analyze", "verify", filepath.Join(dir, systemd.SocketUnitName), filepath.Join(dir, systemd.ServiceUnitName))
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "LISTEN_") && name != "NOTIFY_SOCKET" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running systemd-analyze: %v", err)
	}
	return string(out), err == nil && strings.TrimSpace(string(out)) == ""
}

// writeUnitDir renders the units with this test binary as ExecStart (the
// verifier insists the program exists) and the given drop-ins beside them.
func writeUnitDir(t *testing.T, dropIns ...PlannedFile) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	units, err := systemd.Units(exe)
	if err != nil {
		t.Skipf("test binary path unusable in ExecStart: %v", err)
	}
	dir := t.TempDir()
	for _, u := range units {
		if err := os.WriteFile(filepath.Join(dir, u.Name), []byte(u.Content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dropIns {
		// /etc/systemd/system/towerd.socket.d/x.conf → dir/towerd.socket.d/x.conf
		p := filepath.Join(dir, filepath.Base(filepath.Dir(d.Path)), filepath.Base(d.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, d.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestUnitsWithDropInsPassSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	nodeTree{files: map[string]string{"/usr/bin/dockerd": "", systemd.ConsulTokenPath: "secret\n"}}.write(t, root)
	n, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	docker, err := PlanDocker(n, true)
	if err != nil {
		t.Fatal(err)
	}
	token, ok := PlanConsulToken(n)
	if !ok {
		t.Fatal("no token drop-in for a node with a token file")
	}
	dir := writeUnitDir(t, docker.SocketDropIn, token)
	if out, ok := verifyUnitDir(t, dir); !ok {
		t.Fatalf("systemd-analyze verify rejected the units with drop-ins:\n%s", out)
	}
	// The drop-ins are really read: a misspelt key in one is reported.
	bad := docker.SocketDropIn
	bad.Data = []byte(strings.Replace(string(bad.Data), "FreeBind=", "FreeBnd=", 1))
	if out, ok := verifyUnitDir(t, writeUnitDir(t, bad, token)); ok || !strings.Contains(out, "FreeBnd") {
		t.Errorf("a misspelt key in a drop-in passed verify:\n%s", out)
	}
	if _, ok := PlanConsulToken(nodeRootOf(t, nodeTree{})); ok {
		t.Error("token drop-in planned without a token file: LoadCredential= would fail the unit")
	}
}

func nodeRootOf(t *testing.T, tr nodeTree) *nodefs.Root {
	t.Helper()
	root := t.TempDir()
	tr.write(t, root)
	n, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}
