// Package netns makes network namespaces for tests that need nodes of
// their own (issue 23's day: three nodes and a shared DNS on a LAN), with
// ip(8): a namespace per node, a bridge in the LAN's namespace and a veth
// pair from it to each node, so that nothing is added to the machine's own
// network. A test reaches into a namespace with Command (a process run
// there by `ip netns exec`) and DialContext (a socket made there, usable
// from anywhere). Everything is removed when the test ends. Root only.
package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace a test created, with its loopback up.
type Namespace struct {
	Name string
}

// Usable reports why namespaces cannot be made here, or "" when they can:
// root, ip(8) and a first namespace made and removed.
func Usable() string {
	if os.Geteuid() != 0 {
		return "needs root: ip netns"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) not found"
	}
	name := "towerd-probe-" + suffix()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return ""
}

// suffix is a random tag that keeps the names of parallel tests apart.
func suffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Prefix returns a prefix for the names of one test's namespaces and
// links: short (interface names have 15 bytes) and random.
func Prefix() string { return "t" + suffix() }

// New makes the namespace name, brings its loopback up and removes it when
// the test ends (ip netns del; a process still inside keeps it alive
// until it exits, which the test's own cleanups see to).
func New(t testing.TB, name string) *Namespace {
	t.Helper()
	run(t, "ip", "netns", "add", name)
	n := &Namespace{Name: name}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	n.IP(t, "link", "set", "lo", "up")
	return n
}

// IP runs ip(8) with args inside n (ip -n), failing the test on an error.
func (n *Namespace) IP(t testing.TB, args ...string) {
	t.Helper()
	run(t, "ip", append([]string{"-n", n.Name}, args...)...)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// Command is name run inside n by `ip netns exec` (which also gives it a
// mount namespace of its own, a slave of the machine's).
func (n *Namespace) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// DialContext dials addr from inside n: the socket is made by a thread
// that entered n and is never given back to the runtime (the goroutine
// ends with it locked, so the thread ends too); the connection then works
// from any goroutine. For http.Transport.DialContext.
func (n *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		fd, err := unix.Open("/run/netns/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: fmt.Errorf("opening namespace %s: %w", n.Name, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("entering namespace %s: %w", n.Name, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// LAN is a bridge in its own namespace with a veth pair to each node
// namespace: eth0 in the node, addressed 10.<net>.0.<i>/24.
type LAN struct {
	*Namespace
	Prefix string // 10.<net>.0.
}

// NewLAN makes the LAN's namespace (prefix+"lan") with its bridge, whose
// own address is <Prefix>254; subnet picks 10.<subnet>.0.0/24.
func NewLAN(t testing.TB, prefix string, subnet int) *LAN {
	t.Helper()
	l := &LAN{Namespace: New(t, prefix+"lan"), Prefix: fmt.Sprintf("10.%d.0.", subnet)}
	l.IP(t, "link", "add", "br0", "type", "bridge")
	l.IP(t, "addr", "add", l.Prefix+"254/24", "dev", "br0")
	l.IP(t, "link", "set", "br0", "up")
	return l
}

// Join makes the namespace name with eth0 on the LAN at <Prefix><host>.
func (l *LAN) Join(t testing.TB, name string, host int) *Namespace {
	t.Helper()
	n := New(t, name)
	port := fmt.Sprintf("v%d", host)
	l.IP(t, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.Name)
	l.IP(t, "link", "set", port, "master", "br0")
	l.IP(t, "link", "set", port, "up")
	n.IP(t, "addr", "add", fmt.Sprintf("%s%d/24", l.Prefix, host), "dev", "eth0")
	n.IP(t, "link", "set", "eth0", "up")
	return n
}

// Addr is the LAN address of host.
func (l *LAN) Addr(host int) string { return fmt.Sprintf("%s%d", l.Prefix, host) }
