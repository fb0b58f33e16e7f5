package test

import (
	"encoding/json"
	"strings"
	"testing"
)

// towerd doctor as an operator runs it (issue 27): the built binary on a
// node image before and after `towerd install` under the same root, its
// exit status gating a deploy, and a running towerd's admin server asked
// with -admin.

// doctorReport is the part of `towerd doctor -json` these tests read.
type doctorReport struct {
	Schema   string `json:"schema"`
	Findings []struct {
		ID       string `json:"id"`
		Severity string `json:"severity"`
	} `json:"findings"`
	Summary struct {
		Exit int `json:"exit"`
	} `json:"summary"`
}

func doctorJSON(t *testing.T, want int, args ...string) doctorReport {
	t.Helper()
	stdout, _ := cli(t, want, append([]string{"doctor", "-json"}, args...)...)
	var r doctorReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("towerd doctor -json: %v\n%s", err, stdout)
	}
	if r.Schema != "towerd-doctor/1" || r.Summary.Exit != want {
		t.Errorf("schema %q, summary.exit %d, want %d", r.Schema, r.Summary.Exit, want)
	}
	return r
}

func findingIDs(r doctorReport) string {
	var ids []string
	for _, f := range r.Findings {
		ids = append(ids, f.ID+":"+f.Severity)
	}
	return strings.Join(ids, " ")
}

func TestDoctorBeforeAndAfterInstall(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeNode(t, root, map[string]string{
		"etc/resolv.conf":   "nameserver 10.3.0.2\nnameserver 10.3.0.3\n",
		"etc/nsswitch.conf": "hosts: files dns\n",
		"etc/hosts":         "127.0.0.1 localhost\n",
	})
	r := doctorJSON(t, 2, "--root", root)
	if got := findingIDs(r); got != "resolver-timeout-long:warning towerd-not-installed:problem" {
		t.Errorf("before install: %s", got)
	}
	stdout, _ := cli(t, 2, "doctor", "--root", root)
	mustContain(t, "doctor's report", stdout, "PROBLEM  towerd-not-installed", "WARNING  resolver-timeout-long", "1 problem, 1 warning, 0 notes: exit 2")

	if code, out, errOut := runToExit(t, "install", "--root", root); code != 0 {
		t.Fatalf("install: status %d\n%s%s", code, out, errOut)
	}
	// Install prints `systemctl enable --now towerd.socket`; until it runs,
	// nothing would answer on 127.0.0.1:53 after a reboot.
	r = doctorJSON(t, 2, "--root", root)
	if got := findingIDs(r); got != "towerd-socket-not-enabled:problem" {
		t.Errorf("after install: %s", got)
	}
	enableSocket(t, root)
	r = doctorJSON(t, 0, "--root", root)
	if len(r.Findings) != 0 {
		t.Errorf("after systemctl enable: %s", findingIDs(r))
	}
}

// enableSocket does what `systemctl enable towerd.socket` does to a root.
func enableSocket(t *testing.T, root string) {
	t.Helper()
	writeNode(t, root, map[string]string{"etc/systemd/system/sockets.target.wants/towerd.socket": "->/etc/systemd/system/towerd.socket"})
}

// A running towerd named with -admin is asked for /stats; one that is not
// there is a problem.
func TestDoctorAsksTheRunningTowerd(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	root := t.TempDir()
	if code, out, errOut := runToExit(t, "install", "--root", root, "--upstream", s.def.Addr); code != 0 {
		t.Fatalf("install: status %d\n%s%s", code, out, errOut)
	}
	enableSocket(t, root)
	r := doctorJSON(t, 0, "--root", root, "-admin", s.d.Admin)
	if len(r.Findings) != 0 {
		t.Errorf("with towerd running: %s", findingIDs(r))
	}
	r = doctorJSON(t, 2, "--root", root, "-admin", closedAdminAddr(t))
	if got := findingIDs(r); got != "towerd-not-running:problem" {
		t.Errorf("with no towerd at -admin: %s", got)
	}
}
