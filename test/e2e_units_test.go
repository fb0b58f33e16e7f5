package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/systemd"
)

// verifyUnits runs the real `systemd-analyze verify` on unit files in dir.
// It passes only with exit status 0 and no output at all: for an unknown
// key or a bad value systemd-analyze warns but still exits 0.
func verifyUnits(t *testing.T, dir string, names ...string) (string, bool) {
	t.Helper()
	args := []string{"verify"}
	for _, n := range names {
		args = append(args, filepath.Join(dir, n))
	}
	cmd := exec.Command("systemd-analyze", args...)
	cmd.Env = systemdEnv()
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running systemd-analyze: %v", err)
	}
	return string(out), err == nil && len(strings.TrimSpace(string(out))) == 0
}

func writeUnits(t *testing.T, units []systemd.Unit, edit func(name, content string) string) string {
	t.Helper()
	dir := t.TempDir()
	for _, u := range units {
		content := u.Content
		if edit != nil {
			content = edit(u.Name, content)
		}
		// The file names matter: towerd.socket starts the service of the
		// same name.
		if err := os.WriteFile(filepath.Join(dir, u.Name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestUnitsPassSystemdAnalyzeVerify checks both units with systemd's own
// verifier. verify insists that ExecStart's program exists, so the units
// are rendered (as `towerd install` renders them) with the path of the
// towerd binary this test run built; --root does not help here, because
// the verifier then also looks for /bin/kill and systemd's own targets
// inside the root.
func TestUnitsPassSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	units, err := systemd.Units(towerdBin)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeUnits(t, units, nil)
	if out, ok := verifyUnits(t, dir, systemd.SocketUnitName, systemd.ServiceUnitName); !ok {
		t.Fatalf("systemd-analyze verify rejected the units:\n%s", out)
	}

	// The verifier is really looking: a misspelt key and a missing program
	// are both reported.
	broken := writeUnits(t, units, func(name, content string) string {
		return strings.Replace(content, "ProtectSystem=strict", "ProtectSytem=strict", 1)
	})
	if out, ok := verifyUnits(t, broken, systemd.SocketUnitName, systemd.ServiceUnitName); ok || !strings.Contains(out, "ProtectSytem") {
		t.Errorf("a misspelt key passed verify:\n%s", out)
	}
	missing := writeUnits(t, units, func(name, content string) string {
		return strings.ReplaceAll(content, towerdBin, filepath.Join(t.TempDir(), "no-such-towerd"))
	})
	if out, ok := verifyUnits(t, missing, systemd.SocketUnitName, systemd.ServiceUnitName); ok || !strings.Contains(out, "no-such-towerd") {
		t.Errorf("a unit whose program is missing passed verify:\n%s", out)
	}
}

// TestUnitsSayWhatTheIssueAsks pins the settings operators rely on, so a
// later edit that drops one fails here and not on a node.
func TestUnitsSayWhatTheIssueAsks(t *testing.T) {
	t.Parallel()
	units, err := systemd.Units(systemd.DefaultBinaryPath)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		systemd.SocketUnitName: {
			"ListenDatagram=127.0.0.1:53", "ListenStream=127.0.0.1:53", "FileDescriptorName=" + systemd.DNSSocketName,
			"WantedBy=sockets.target",
		},
		systemd.ServiceUnitName: {
			"Type=notify", "ExecStart=" + systemd.DefaultBinaryPath + " serve -config /etc/towerd/towerd.toml",
			"ExecReload=/bin/sh -c 'kill -HUP $$MAINPID'", "User=towerd", "Group=towerd", "RemoveIPC=yes", "CapabilityBoundingSet=", "AmbientCapabilities=",
			"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
			"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallFilter=@system-service",
			"StateDirectory=towerd", "Restart=on-failure", "WatchdogSec=30s", "Requires=towerd.socket",
		},
	}
	for _, u := range units {
		lines := map[string]bool{}
		for _, l := range strings.Split(u.Content, "\n") {
			lines[strings.TrimSpace(l)] = true
		}
		for _, w := range want[u.Name] {
			if !lines[w] {
				t.Errorf("%s lacks the line %q", u.Name, w)
			}
		}
	}
	if _, err := systemd.Units("towerd"); err == nil {
		t.Error("a relative ExecStart path was accepted")
	}
}
