package test

// A real systemd as PID 1 for the tests (issue 32): a Debian bookworm tree,
// made once by debootstrap and kept outside the repository (like the Consul
// agent, it is reused by every later run and by CI's fresh clones on the
// same machine), booted by systemd-nspawn on a fresh overlay per test, so
// no test changes the tree. The container has its own network namespace
// (--private-network) with a veth pair whose both ends stay inside: a
// routable address for systemd-resolved (with only a loopback it says
// "Network is down") that reaches nothing outside. Its upstream DNS server
// is served by the test process itself, from sockets bound inside that
// namespace.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/towerd/towerd/test/dnstest"
)

// bootTreeDir holds the debootstrapped tree; TOWERD_TEST_CACHE moves it.
// Its name carries the package list, so a changed list makes a new tree.
func bootTreeDir() string {
	d := os.Getenv("TOWERD_TEST_CACHE")
	if d == "" {
		d = "/var/cache/towerd-test"
	}
	return filepath.Join(d, fmt.Sprintf("bookworm-%x", sha256.Sum256([]byte(bootPackages)))[:len("bookworm-")+8])
}

// bootPackages are what the tree has besides minbase: systemd as init,
// resolved and the NSS modules Debian installs with systemd (nss-resolve;
// nss-systemd, which shows DynamicUser= accounts), D-Bus for systemctl, ip
// for the veth pair, dig. (On the host, systemd-container comes without
// its recommended libnss-mymachines, which edits the host's nsswitch.conf:
// test/install-deps.sh.)
const bootPackages = "systemd,systemd-sysv,systemd-resolved,libnss-resolve,libnss-systemd,dbus,iproute2,dnsutils"

// Inside the container: upstreamAddr is the fake DHCP-given server (veth
// end b), towerd's upstream through resolved's resolv.conf.
const (
	vethNet      = "10.32.0."
	upstreamAddr = vethNet + "2"
)

// needBootTree skips when not root, fails when a tool is missing (CI runs
// test/install-deps.sh), and returns the tree, made on first use.
func needBootTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("booting a systemd container needs root")
	}
	for _, tool := range []string{"systemd-nspawn", "debootstrap", "unshare", "nsenter", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the booted-systemd test needs %s: run test/install-deps.sh", tool)
		}
	}
	dir := bootTreeDir()
	if _, err := os.Stat(filepath.Join(dir, "usr/lib/systemd/systemd")); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// One maker at a time (flock), into a temporary name renamed when
	// complete, so an interrupted run leaves no half tree behind.
	tmp := dir + ".partial"
	script := fmt.Sprintf(`set -e
[ -x %[1]s/usr/lib/systemd/systemd ] && exit 0
rm -rf %[2]s
debootstrap --variant=minbase --include=%[3]s bookworm %[2]s %[4]s
mv %[2]s %[1]s`, dir, tmp, bootPackages, debianMirror())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "flock", dir+".lock", "sh", "-c", script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap of the test tree: %v\n%s", err, lastLines(string(out), 20))
	}
	t.Logf("made the bookworm tree %s in %v (kept for later runs)", dir, time.Since(start).Round(time.Second))
	return dir
}

// debianMirror is the machine's own Debian mirror (its apt sources), the
// only one reachable here; deb.debian.org otherwise.
func debianMirror() string {
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:" && !strings.Contains(fields[1], "security"):
				return fields[1]
			case len(fields) >= 3 && fields[0] == "deb" && !strings.Contains(line, "security"):
				for _, w := range fields[1:] {
					if strings.HasPrefix(w, "http") {
						return w
					}
				}
			}
		}
	}
	return "http://deb.debian.org/debian"
}

// node is one container: its writable layer (kept across reboots) and,
// while booted, its nspawn process and PID 1.
type node struct {
	t      *testing.T
	name   string
	tree   string
	layer  string // upper, work, merged
	nspawn *exec.Cmd
	exited chan struct{}
	log    *logLines
	pid1   int
	// cgroups are the container's own, one per hierarchy, removed at the
	// end.
	cgroups []string
}

// cgroupHierarchies are the cgroup trees systemd uses here: the unified one
// and, on a hybrid host, the named systemd one.
func cgroupHierarchies() []string {
	var hs []string
	for _, h := range []string{"/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		hs = append(hs, "/sys/fs/cgroup") // pure cgroup v2
	}
	return hs
}

// killCgroups kills, by PID, every process in the container's cgroups:
// all of them this test's (nspawn and what it started).
func (n *node) killCgroups() {
	for _, dir := range n.cgroups {
		_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || fi.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroups removes the container's cgroups, deepest first (a cgroup
// goes with rmdir once empty); a process left in them is killed first.
func (n *node) removeCgroups() {
	n.killCgroups()
	for _, dir := range n.cgroups {
		var dirs []string
		_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// newNode prepares a container over the tree: a fresh overlay layer with
// the veth unit and resolved's upstream, as DHCP would give it.
func newNode(t *testing.T, tree string) *node {
	t.Helper()
	n := &node{t: t, tree: tree, layer: t.TempDir(),
		name: fmt.Sprintf("towerd-t%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(n.layer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	veth := "[Unit]\nDescription=test network: a veth pair inside the container\nDefaultDependencies=no\nBefore=network.target systemd-resolved.service\n\n" +
		"[Service]\nType=oneshot\nRemainAfterExit=yes\n" +
		"ExecStart=/sbin/ip link add ve0 type veth peer name ve1\n" +
		"ExecStart=/sbin/ip addr add " + vethNet + "1/24 dev ve0\n" +
		"ExecStart=/sbin/ip addr add " + upstreamAddr + "/24 dev ve1\n" +
		"ExecStart=/sbin/ip link set ve0 up\nExecStart=/sbin/ip link set ve1 up\n\n" +
		"[Install]\nWantedBy=sysinit.target\n"
	upper := filepath.Join(n.layer, "upper")
	n.write(upper, "etc/systemd/system/testnet.service", veth)
	if err := os.MkdirAll(filepath.Join(upper, "etc/systemd/system/sysinit.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../testnet.service", filepath.Join(upper, "etc/systemd/system/sysinit.target.wants/testnet.service")); err != nil {
		t.Fatal(err)
	}
	n.write(upper, "etc/systemd/resolved.conf.d/test-upstream.conf", "[Resolve]\nDNS="+upstreamAddr+"\n")
	// debootstrap's minbase has no /etc/hosts; every installed node does.
	n.write(upper, "etc/hosts", "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
	t.Cleanup(func() {
		if n.nspawn != nil {
			n.poweroff()
		}
		// nspawn's own leftovers on the host, named after the machine.
		_ = os.RemoveAll("/run/systemd/nspawn/propagate/" + n.name)
		n.removeCgroups()
	})
	return n
}

func (n *node) write(root, rel, content string) {
	n.t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// boot starts the container and waits until its systemd finished booting.
// The overlay is mounted in a mount namespace of nspawn's own, so it goes
// with it and the host's mount table never sees it.
func (n *node) boot() time.Duration {
	n.t.Helper()
	start := time.Now()
	l := n.layer
	// --keep-unit runs the container in nspawn's own cgroup (its
	// "payload" and "supervisor" below it): without a cgroup of its own
	// per container, two nspawns started from the same cgroup (another
	// test's, a run before) share them, and the second container hangs
	// before its systemd prints a line. The cgroups go with the test.
	cgroups := ""
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.name)
		n.cgroups = append(n.cgroups, dir)
		cgroups += fmt.Sprintf("mkdir -p %s && echo $$ > %s/cgroup.procs && ", dir, dir)
	}
	script := fmt.Sprintf("%smount -t overlay overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s/merged && "+
		"exec systemd-nspawn -q -D %s/merged -b --private-network --register=no --keep-unit --console=passive -M %s",
		cgroups, n.tree, l, l, l, l, n.name)
	n.nspawn = exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	n.log = newLogLines()
	n.nspawn.Stdout, n.nspawn.Stderr = n.log, n.log
	n.nspawn.WaitDelay = 5 * time.Second
	if err := n.nspawn.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.nspawn, n.exited)
	// PID 1 of the container is nspawn's child (sh exec'd nspawn).
	// Another process's state: polled.
	defer func() {
		if n.pid1 == 0 {
			n.t.Logf("no container PID 1; its console:\n%s", lastLines(n.log.String(), 30))
		}
	}()
	dnstest.Eventually(n.t, func() bool {
		select {
		case <-n.exited:
			n.t.Fatalf("systemd-nspawn exited while booting:\n%s", lastLines(n.log.String(), 30))
		default:
		}
		n.pid1 = childPID(n.nspawn.Process.Pid)
		return n.pid1 != 0
	}, 30*time.Second, "the container's PID 1")
	// PID 1 runs a moment before it made /run/systemd/system ("offline":
	// "System has not been booted with systemd") and before it listens on
	// its private socket, which systemctl needs ("Failed to connect to
	// bus"): until then systemctl cannot wait for the boot.
	var out string
	dnstest.Eventually(n.t, func() bool {
		out, _ = n.sh(60*time.Second, "systemctl is-system-running --wait")
		// "offline" alone, too: systemctl says it when it cannot reach PID 1.
		early := strings.HasPrefix(out, "offline") || strings.Contains(out, "Failed to connect to bus") ||
			strings.Contains(out, "has not been booted with systemd")
		return !early
	}, 60*time.Second, "systemctl to reach the container's PID 1")
	if s := strings.TrimSpace(out); s != "running" {
		failed, _ := n.sh(10*time.Second, "systemctl --failed --no-legend; journalctl -b -p warning --no-pager | tail -20")
		n.t.Fatalf("the container booted %q, not running:\n%s\nits console:\n%s", s, failed, lastLines(n.log.String(), 30))
	}
	return time.Since(start)
}

// childPID returns the child of pid that runs systemd, 0 for none yet
// (nspawn's first child is a helper until it execs the container's init).
func childPID(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(data)) {
		c, _ := strconv.Atoi(f)
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c)); strings.TrimSpace(string(comm)) == "systemd" {
			return c
		}
	}
	return 0
}

// poweroff shuts the container down as an operator would and waits for
// nspawn to end (killed after 60 s).
func (n *node) poweroff() {
	n.t.Helper()
	if n.pid1 == 0 {
		// Not booted as far as the test knows: nspawn powers its container
		// off on SIGTERM.
		_ = n.nspawn.Process.Signal(syscall.SIGTERM)
	} else if _, err := n.sh(30*time.Second, "systemctl poweroff --no-block"); err != nil {
		_ = n.nspawn.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		// Killing nspawn alone would leave its container running: every
		// process in the container's own cgroups goes, by PID.
		n.killCgroups()
		_ = n.nspawn.Process.Kill()
		<-n.exited
		n.t.Errorf("the container did not power off within 60 s")
	}
	n.nspawn, n.pid1 = nil, 0
}

// reboot powers off and boots again over the same writable layer.
func (n *node) reboot() time.Duration {
	n.poweroff()
	return n.boot()
}

// run runs a command inside the container (all of PID 1's namespaces) with
// a clean environment and returns its output (stdout then stderr) and exit
// code; -1 when it could not run or timed out.
func (n *node) run(timeout time.Duration, stdin []byte, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.pid1), "-a", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
		"HOME=/root", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		code = -1
		out.WriteString("\n(timed out after " + timeout.String() + ")")
	} else if err != nil && code == -1 {
		out.WriteString("\n" + err.Error())
	}
	return out.String(), code
}

// sh runs a shell script inside; the error says the exit code.
func (n *node) sh(timeout time.Duration, script string) (string, error) {
	out, code := n.run(timeout, nil, "sh", "-c", script)
	if code != 0 {
		return out, fmt.Errorf("exit %d", code)
	}
	return out, nil
}

// must runs a script inside and fails the test when it fails.
func (n *node) must(script string) string {
	n.t.Helper()
	out, err := n.sh(3*time.Minute, script)
	if err != nil {
		// systemd's own lines about towerd (a unit that cannot start logs
		// from its child, "(towerd)[PID]", not only under -u towerd).
		journal, _ := n.sh(30*time.Second, "journalctl -b --no-pager -o short-monotonic | grep -i towerd | tail -15")
		n.t.Fatalf("in the container: %s: %v\n%s\njournalctl -b:\n%s", script, err, lastLines(out, 40), journal)
	}
	return out
}

// put copies data to path inside the container.
func (n *node) put(path string, data []byte, mode os.FileMode) {
	n.t.Helper()
	out, code := n.run(time.Minute, data, "sh", "-c", fmt.Sprintf("cat > %s && chmod %o %s", path, mode, path))
	if code != 0 {
		n.t.Fatalf("copying %s into the container: %s", path, out)
	}
}

// inNetns runs f on a thread inside the container's network namespace;
// sockets f makes stay there and work from any goroutine. The thread is
// never given back to the runtime (the goroutine ends locked, so it dies).
func (n *node) inNetns(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", n.pid1), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// listenInside binds UDP and TCP on addr inside the container.
func (n *node) listenInside(addr string) (net.PacketConn, net.Listener) {
	n.t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	err := n.inNetns(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		n.t.Fatalf("binding %s inside the container: %v", addr, err)
	}
	return pc, ln
}

// hostFiles are the host's files the booted tests must never change.
var hostFiles = []string{"/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/hosts", "/etc/passwd", "/etc/group"}

// hostState is a fingerprint of what the host must keep: those files'
// bytes (through their links), /etc/systemd/system's tree, and the host's
// mount table lines naming the tree.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range hostFiles {
		target, _ := os.Readlink(f)
		data, err := os.ReadFile(f)
		fmt.Fprintf(&b, "%s -> %q: %d bytes %x err=%v\n", f, target, len(data), sha256.Sum256(data), err)
	}
	var units []string
	_ = filepath.Walk("/etc/systemd/system", func(p string, fi os.FileInfo, _ error) error {
		if fi != nil {
			target, _ := os.Readlink(p)
			units = append(units, fmt.Sprintf("%s %v %s", p, fi.Mode(), target))
		}
		return nil
	})
	sort.Strings(units)
	b.WriteString(strings.Join(units, "\n"))
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, "towerd-t") || strings.Contains(l, bootTreeDir()) {
			b.WriteString("\nmount: " + l)
		}
	}
	return b.String()
}
