package test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// What glibc reads on the node, in a namespace of the test's: the tests
// that run getent (TestGetentThroughTowerdWithTheInstalledFiles,
// TestSearchListThroughGlibc) bind their resolv.conf and nsswitch.conf
// over /etc's there, never on the machine itself.

// namespace is a private mount namespace (and, withNet, network
// namespace, its loopback up) with resolv and nss bind-mounted over
// /etc's, held until the test ends. Without its own network the host's
// loopback is reachable from it.
type namespace struct {
	pid   int
	flags []string // nsenter's
}

func newNamespace(t *testing.T, withNet bool, resolv, nss string) *namespace {
	t.Helper()
	unshare, script := []string{"--mount"}, ""
	n := &namespace{flags: []string{"--mount"}}
	if withNet {
		unshare, script = append(unshare, "--net"), "ip link set lo up; "
		n.flags = append(n.flags, "--net")
	}
	holder := exec.Command("unshare", append(unshare, "--propagation", "private", "sh", "-c",
		`set -e; `+script+`mount --bind "$1" /etc/resolv.conf; mount --bind "$2" /etc/nsswitch.conf; echo ready; exec cat`,
		"sh", resolv, nss)...)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = holder.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Skipf("could not set up the namespace (%q, %v): unshare not permitted here?", line, err)
	}
	n.pid = holder.Process.Pid
	return n
}

// command runs name in the namespace.
func (n *namespace) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append(append([]string{"--target", strconv.Itoa(n.pid)}, n.flags...), append([]string{"--", name}, args...)...)...)
}
