package test

// towerd under a real systemd as PID 1 (issue 32), as an operator sets it
// up: the Debian package or the bare binary, `towerd install` and its
// next: lines, socket activation, sd_notify, DNS through glibc and dig,
// restart and reload under load, the control socket's permissions, a
// reboot, an upgrade over a running towerd, and uninstall and purge back to
// the node as it was. The container (nspawn_test.go) is a Debian bookworm
// with systemd-resolved, as Debian installs it.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/towerd/towerd/test/dnstest"
)

// bootedDebs builds the package of this tree (make deb) and, from it, the
// "previous" package an upgrade starts from: the same program with the
// units of towerd before issue 32 (DynamicUser=yes, which kept the state
// under /var/lib/private) and without a system user, version 0.0.1.
func bootedDebs(t *testing.T) (cur, prev, binary string) {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "make", "-s", "-C", "..", "deb", "VERSION=v9.9.9", "DEB_DIR="+out, "SOURCE_DATE_EPOCH=1764460800")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "towerd_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb built %v", debs)
	}
	cur = debs[0]
	tree := filepath.Join(out, "prev")
	output(t, "", nil, "dpkg-deb", "-R", cur, tree)
	control := filepath.Join(tree, "DEBIAN/control")
	re := regexp.MustCompile(`(?m)^Version: .*$`)
	writeFile(t, control, re.ReplaceAllString(readFile(t, control), "Version: 0.0.1"))
	unit := filepath.Join(tree, "lib/systemd/system/towerd.service")
	old := readFile(t, unit)
	switch {
	case strings.Contains(old, "\nUser=towerd\nGroup=towerd\n"):
		writeFile(t, unit, strings.Replace(old, "\nUser=towerd\nGroup=towerd\n", "\nDynamicUser=yes\n", 1))
	case !strings.Contains(old, "\nDynamicUser=yes\n"): // (the units of before issue 32 have it already)
		t.Fatalf("the package's towerd.service has neither User=towerd/Group=towerd nor DynamicUser=yes:\n%s", old)
	}
	writeFile(t, filepath.Join(tree, "usr/lib/sysusers.d/towerd.conf"), "# before issue 21: no account\n")
	prev = filepath.Join(out, "towerd_0.0.1_prev.deb")
	output(t, "", nil, "dpkg-deb", "--root-owner-group", "-Znone", "--build", tree, prev) // no xz: seconds, not a minute
	return cur, prev, filepath.Join(out, "deb/towerd")
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBootedSystemd boots Debian with systemd as PID 1 and sets towerd up
// on it, packaged and not. It fails on the units of before issue 32: the
// service never started (217/USER).
func TestBootedSystemd(t *testing.T) {
	tree := needBootTree(t)
	before := hostState(t)
	t.Cleanup(func() {
		if after := hostState(t); after != before {
			t.Errorf("the host changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
	start := time.Now()
	cur, prev, binary := bootedDebs(t)
	t.Logf("packages built in %v", time.Since(start).Round(100*time.Millisecond))
	t.Run("package", func(t *testing.T) { bootedPackage(t, tree, cur, prev) })
	t.Run("binary", func(t *testing.T) { bootedBinary(t, tree, binary) })
}

// bootedNode boots a fresh container with the test upstream answering on
// upstreamAddr, and returns the node state to come back to.
func bootedNode(t *testing.T, tree string) (*node, *dnstest.Upstream, string) {
	n := newNode(t, tree)
	t.Logf("booted in %v", n.boot().Round(time.Millisecond))
	up := serveUpstream(t, n)
	// The node as Debian set it up: resolved's stub answers glibc.
	n.must("getent ahostsv4 before.example.test | grep -q 192.0.2.1")
	return n, up, nodeState(t, n)
}

// serveUpstream answers as the node's DHCP-given DNS server, inside it.
func serveUpstream(t *testing.T, n *node) *dnstest.Upstream {
	pc, ln := n.listenInside(upstreamAddr + ":53")
	up := dnstest.NewUpstreamOn(t, pc, ln)
	for i, name := range []string{"before", "www", "cached", "load", "reboot", "upgrade"} {
		up.Add(t, fmt.Sprintf("%s.example.test. 3600 IN A 192.0.2.%d", name, i+1))
	}
	// A name for each checkServing, never asked before: its answer must
	// come through towerd from here, not from a cache.
	for i := range 8 {
		up.Add(t, fmt.Sprintf("fresh%d.example.test. 3600 IN A 192.0.2.%d", i, 100+i))
	}
	return up
}

// nodeState is what must be as before once towerd is gone: every file
// under /etc (type, mode, owner, link target, bytes) and towerd's state
// directories. The account files are left out: the test adds users of its
// own, and towerd's system user stays on purpose (uninstall says so).
func nodeState(t *testing.T, n *node) string {
	t.Helper()
	out := n.must(`cd / && find etc var/lib/towerd var/lib/private -xdev \
		\( -path etc/passwd -o -path 'etc/passwd-' -o -path etc/group -o -path 'etc/group-' -o -path etc/shadow -o -path 'etc/shadow-' \
		   -o -path etc/gshadow -o -path 'etc/gshadow-' -o -path etc/subuid -o -path 'etc/subuid-' -o -path etc/subgid -o -path 'etc/subgid-' \
		   -o -path etc/machine-id -o -path etc/ld.so.cache -o -path etc/.pwd.lock \) -prune -o \
		-printf '%y %m %u:%g %p -> %l\n' 2>/dev/null | sort
	find etc -xdev -type f ! -name 'passwd*' ! -name 'group*' ! -name 'shadow*' ! -name 'gshadow*' ! -name 'sub[ug]id*' \
		! -name machine-id ! -name ld.so.cache ! -name .pwd.lock -print0 | sort -z | xargs -0 sha256sum`)
	return out
}

// sameState reports what differs between two nodeStates.
func sameState(t *testing.T, what, before, after string) {
	t.Helper()
	b, a := lineSet(before), lineSet(after)
	var diff []string
	for l := range b {
		if !a[l] {
			diff = append(diff, "- "+l)
		}
	}
	for l := range a {
		if !b[l] {
			diff = append(diff, "+ "+l)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%s: the node is not as it was:\n%s", what, strings.Join(diff, "\n"))
	}
}

func lineSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			m[l] = true
		}
	}
	return m
}

// towerdInstall runs `towerd install` as an operator would, then every
// next: line it prints, in order, and returns its output.
func towerdInstall(t *testing.T, n *node, towerd string) string {
	t.Helper()
	out := n.must(towerd + " install 2>&1")
	for _, line := range section(out, "next:") {
		cmd, _, _ := strings.Cut(line, "#")
		n.must(cmd)
	}
	return out
}

// section returns the indented lines under title in install's report.
func section(out, title string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == title:
			in = true
		case in && strings.HasPrefix(l, "  "):
			lines = append(lines, strings.TrimSpace(l))
		default:
			in = false
		}
	}
	return lines
}

// checkServing checks towerd as PID 1 runs it: the service active as user
// towerd, its sockets from towerd.socket, READY and STATUS= received, and
// DNS through glibc, dig on 127.0.0.1 and ::1, UDP and TCP.
func checkServing(t *testing.T, n *node, up *dnstest.Upstream, fresh int) {
	t.Helper()
	// The first query starts towerd when nothing ran it yet (socket
	// activation: after a reboot); then READY=1 makes it active.
	name := fmt.Sprintf("fresh%d.example.test", fresh)
	n.must(fmt.Sprintf("getent ahostsv4 %s | grep -q '^192.0.2.%d '", name, 100+fresh))
	if up.Count(name+".", dns.TypeA) == 0 {
		t.Errorf("the upstream never saw %s: the answer did not come through towerd", name)
	}
	waitActive(t, n)
	show := n.must("systemctl show towerd.service -p ActiveState -p SubState -p User -p Type -p StatusText -p WatchdogUSec -p NRestarts -p TriggeredBy")
	for _, want := range []string{"ActiveState=active", "SubState=running", "User=towerd", "Type=notify", "WatchdogUSec=30s", "NRestarts=0", "TriggeredBy=towerd.socket"} {
		if !strings.Contains(show, want+"\n") {
			t.Errorf("systemctl show towerd.service lacks %s:\n%s", want, show)
		}
	}
	// STATUS= came over sd_notify and says the sockets are systemd's.
	if !strings.Contains(show, "(from systemd)") {
		t.Errorf("towerd's STATUS= does not say its sockets came from systemd:\n%s", show)
	}
	if u := n.must("stat -c %U /proc/$(systemctl show -p MainPID --value towerd)"); u != "towerd\n" {
		t.Errorf("towerd's process runs as %q, want towerd", u)
	}
	for _, args := range []string{"@127.0.0.1", "@::1", "@127.0.0.1 +tcp", "@::1 +tcp"} {
		out := n.must("dig +tries=1 +time=3 +short " + args + " www.example.test A")
		if strings.TrimSpace(out) != "192.0.2.2" {
			t.Errorf("dig %s www.example.test = %q", args, out)
		}
	}
	if j := n.must("journalctl -b --no-pager -o cat | grep -c 'TCP_NODELAY failed' || true"); strings.TrimSpace(j) != "0" {
		t.Errorf("towerd.socket logged TCP_NODELAY failures %s times", strings.TrimSpace(j))
	}
	if j := n.must("journalctl -b --no-pager -u towerd -o cat | grep -c 'search' || true"); strings.TrimSpace(j) != "0" {
		t.Errorf("towerd warned about the search domains %s times", strings.TrimSpace(j))
	}
}

// underLoad runs action while a client inside the container asks towerd
// on 127.0.0.1:53 (UDP, one query at a time, no retry) at least min
// queries, and returns how long action took. Every query must be answered
// right: the socket keeps them while towerd restarts.
func underLoad(t *testing.T, n *node, min int, action func()) time.Duration {
	t.Helper()
	var conn net.PacketConn
	if err := n.inNetns(func() (err error) { conn, err = net.ListenPacket("udp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
	stop := make(chan struct{})
	var sent, lost, wrong int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for i := 0; ; i++ {
			select {
			case <-stop:
				if sent >= min {
					return
				}
			default:
			}
			q := new(dns.Msg)
			q.SetQuestion("load.example.test.", dns.TypeA)
			q.Id = uint16(i)
			wire, _ := q.Pack()
			sent++
			if _, err := conn.WriteTo(wire, to); err != nil {
				lost++
				continue
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				nr, _, err := conn.ReadFrom(buf)
				if err != nil {
					lost++
					break
				}
				r := new(dns.Msg)
				if r.Unpack(buf[:nr]) != nil || r.Id != q.Id {
					continue // a late answer to an earlier query
				}
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.4" {
					wrong++
				}
				break
			}
		}
	}()
	start := time.Now()
	action()
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if lost > 0 || wrong > 0 {
		t.Errorf("under load: %d queries, %d lost, %d answered wrong", sent, lost, wrong)
	}
	t.Logf("under load: %d queries, %d lost, %d wrong; the action took %v", sent, lost, wrong, took.Round(time.Millisecond))
	return took
}

// checkRestartReload restarts and reloads towerd under load (0 lost) and
// sees systemd's view of it: a new main PID after restart, the same after
// reload (RELOADING=1 then READY=1), a clean stop (STOPPING=1, exit 0).
func checkRestartReload(t *testing.T, n *node) {
	t.Helper()
	pid := strings.TrimSpace(n.must("systemctl show -p MainPID --value towerd"))
	// The journal from here on: an earlier failed start is not this stop's.
	cursor := strings.TrimSpace(strings.TrimPrefix(n.must("journalctl -u towerd -n 0 -q --show-cursor"), "-- cursor: "))
	took := underLoad(t, n, 300, func() { n.must("systemctl restart towerd") })
	t.Logf("systemctl restart towerd: %v (no Consul agent on this node)", took.Round(time.Millisecond))
	// Not a timing assert: READY=1 waited 10 s for a Consul sync that never
	// comes on a node without an agent (issue 32); it must not wait at all.
	if took > 8*time.Second {
		t.Errorf("systemctl restart towerd took %v: READY=1 waits for something", took)
	}
	if j := n.must("journalctl -b --no-pager -u towerd -o cat | grep -c 'waiting before reporting ready' || true"); strings.TrimSpace(j) != "0" {
		t.Errorf("READY=1 waited for something %s times", strings.TrimSpace(j))
	}
	pid2 := strings.TrimSpace(n.must("systemctl show -p MainPID --value towerd"))
	if pid2 == pid || pid2 == "0" {
		t.Errorf("restart: main PID %s -> %s", pid, pid2)
	}
	// The stop before was clean: towerd said STOPPING=1 and exited 0
	// (systemd logs a failure otherwise).
	if j := n.must("journalctl --no-pager -u towerd -o cat --after-cursor='" + cursor + "' | grep -cE 'Failed with result|status=[1-9]|timed out' || true"); strings.TrimSpace(j) != "0" {
		t.Errorf("the stop was not clean:\n%s", n.must("journalctl -b --no-pager -u towerd -o cat | tail -20"))
	}
	underLoad(t, n, 300, func() { n.must("systemctl reload towerd") })
	if pid3 := strings.TrimSpace(n.must("systemctl show -p MainPID --value towerd")); pid3 != pid2 {
		t.Errorf("reload changed the main PID %s -> %s", pid2, pid3)
	}
	if j := n.must("journalctl -b --no-pager -u towerd -o cat | grep -c 'Reloaded towerd.service' || true"); strings.TrimSpace(j) == "0" {
		t.Errorf("systemd did not see the reload finish (RELOADING=1, READY=1):\n%s", n.must("journalctl -b --no-pager -u towerd -o cat | tail -20"))
	}
	if s := n.must("systemctl show -p ActiveState -p SubState towerd"); s != "ActiveState=active\nSubState=running\n" {
		t.Errorf("after the reload: %s", s)
	}
}

// checkControl checks the control socket's permissions as PID 1 made them:
// root may, a member of group towerd may, anyone else exits 4.
func checkControl(t *testing.T, n *node, towerd string) {
	t.Helper()
	if st := n.must("stat -c '%U %G %a' /run/towerd/control.sock"); strings.TrimSpace(st) != "root towerd 660" {
		t.Errorf("control socket: %s, want root towerd 660", st)
	}
	n.must("id outsider >/dev/null 2>&1 || useradd --no-create-home outsider; id member >/dev/null 2>&1 || useradd --no-create-home -G towerd member")
	n.must(towerd + " cache list >/dev/null")
	if out, code := n.run(time.Minute, nil, "runuser", "-u", "outsider", "--", towerd, "cache", "list"); code != 4 {
		t.Errorf("a user outside group towerd: exit %d, want 4:\n%s", code, out)
	}
	if out, code := n.run(time.Minute, nil, "runuser", "-u", "member", "--", towerd, "cache", "list"); code != 0 {
		t.Errorf("a member of group towerd: exit %d, want 0:\n%s", code, out)
	}
}

// bootedPackage: the Debian package, upgraded from the previous one.
func bootedPackage(t *testing.T, tree, cur, prev string) {
	n, up, before := bootedNode(t, tree)
	data, err := os.ReadFile(prev)
	if err != nil {
		t.Fatal(err)
	}
	n.put("/root/prev.deb", data, 0o644)
	if data, err = os.ReadFile(cur); err != nil {
		t.Fatal(err)
	}
	n.put("/root/cur.deb", data, 0o644)

	// The previous package (DynamicUser=yes), set up and answering; its
	// cache then holds upgrade.example.test.
	n.must("apt-get install -y -q /root/prev.deb")
	towerdInstall(t, n, "towerd")
	n.must("dig +tries=1 +time=3 +short @127.0.0.1 upgrade.example.test | grep -q 192.0.2.6")
	n.must("test -L /var/lib/towerd && test -d /var/lib/private/towerd")

	// Upgrade over the running towerd: it keeps answering, and restarted
	// under the new units (user towerd) it has its cache from before:
	// systemd moved /var/lib/private/towerd to /var/lib/towerd.
	pid := n.must("systemctl show -p MainPID --value towerd")
	n.must("apt-get install -y -q /root/cur.deb")
	if pid2 := n.must("systemctl show -p MainPID --value towerd"); pid2 != pid {
		t.Errorf("the upgrade restarted towerd (%s -> %s): the package starts and stops nothing", strings.TrimSpace(pid), strings.TrimSpace(pid2))
	}
	n.must("dig +tries=1 +time=3 +short @127.0.0.1 upgrade.example.test | grep -q 192.0.2.6")
	n.must("getent passwd towerd")
	underLoad(t, n, 100, func() { n.must("systemctl restart towerd") })
	asked := up.Count("upgrade.example.test.", dns.TypeA)
	n.must("dig +tries=1 +time=3 +short @127.0.0.1 upgrade.example.test | grep -q 192.0.2.6")
	if got := up.Count("upgrade.example.test.", dns.TypeA); got != asked {
		t.Errorf("after the upgrade towerd asked upstream for upgrade.example.test again: the cache was not kept")
	}
	if st := n.must("stat -c '%F %U' /var/lib/towerd; test ! -e /var/lib/private/towerd && echo moved"); st != "directory towerd\nmoved\n" {
		t.Errorf("state directory after the upgrade: %q", st)
	}
	checkServing(t, n, up, 0)
	checkRestartReload(t, n)

	// A reboot: towerd.socket is enabled, towerd starts on the first query,
	// with the cache saved at the shutdown.
	n.must("dig +tries=1 +time=3 +short @127.0.0.1 reboot.example.test | grep -q 192.0.2.5")
	t.Logf("rebooted in %v", n.reboot().Round(time.Millisecond))
	up = serveUpstream(t, n)
	n.must("getent ahostsv4 reboot.example.test | grep -q 192.0.2.5")
	if up.Count("reboot.example.test.", dns.TypeA) != 0 {
		t.Errorf("after the reboot towerd asked upstream for reboot.example.test: the cache saved at shutdown was not loaded")
	}
	checkServing(t, n, up, 1)
	// After the reboot: towerd.socket, started before the upgrade by a
	// package without the group, gave the control socket to it only now.
	checkControl(t, n, "towerd")

	// Undo: what install's undo: lines say, then purge.
	n.must("systemctl disable --now towerd.socket towerd.service")
	out := n.must("towerd uninstall 2>&1")
	for _, line := range section(out, "next:") {
		cmd, _, _ := strings.Cut(line, "#")
		n.must(cmd)
	}
	n.must("apt-get purge -y -q towerd")
	n.must("getent ahostsv4 before.example.test | grep -q 192.0.2.1")
	sameState(t, "after uninstall and purge", before, nodeState(t, n))
}

// bootedBinary: the same without the package, from the bare binary.
func bootedBinary(t *testing.T, tree, binary string) {
	n, up, before := bootedNode(t, tree)
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	n.put("/root/towerd", data, 0o755)
	checkInstallPutsBack(t, n)
	out := towerdInstall(t, n, "/root/towerd")
	if !strings.Contains(out, "ready") {
		t.Errorf("install did not say towerd answers:\n%s", out)
	}
	checkServing(t, n, up, 0)
	checkRestartReload(t, n)
	checkWatchdog(t, n)
	checkControl(t, n, "towerd")
	t.Logf("rebooted in %v", n.reboot().Round(time.Millisecond))
	up = serveUpstream(t, n)
	checkServing(t, n, up, 1)

	n.must("systemctl disable --now towerd.socket towerd.service")
	out = n.must("/root/towerd uninstall 2>&1")
	if !strings.Contains(out, "kept            /var/lib/towerd/") {
		t.Errorf("uninstall does not say it keeps the saved cache:\n%s", out)
	}
	for _, line := range section(out, "next:") {
		cmd, _, _ := strings.Cut(line, "#")
		n.must(cmd)
	}
	n.must("rm -r /var/lib/towerd") // as uninstall says, to forget the cache
	n.must("getent ahostsv4 before.example.test | grep -q 192.0.2.1")
	sameState(t, "after uninstall", before, nodeState(t, n))
}

// checkWatchdog sees WATCHDOG=1 arrive at PID 1. With a drop-in of
// WatchdogSec=2s towerd must ping at least every 2 s (it pings at half the
// period), or systemd kills it ("Watchdog timeout") and Restart= starts
// another. Time passing is what is tested here, so the test lets 3 s pass
// (no sleep stands in for a readiness signal): then the main PID is the
// same, no restart is counted, and systemd's WatchdogTimestamp (the last
// ping it received) has moved on past the start.
func checkWatchdog(t *testing.T, n *node) {
	t.Helper()
	n.must(`mkdir -p /run/systemd/system/towerd.service.d &&
		printf '[Service]\nWatchdogSec=2s\n' >/run/systemd/system/towerd.service.d/watchdog-test.conf &&
		systemctl daemon-reload && systemctl restart towerd`)
	defer n.must(`rm -r /run/systemd/system/towerd.service.d && systemctl daemon-reload && systemctl restart towerd`)
	waitActive(t, n)
	props := "-p MainPID -p NRestarts -p WatchdogUSec -p WatchdogTimestampMonotonic -p ExecMainStartTimestampMonotonic"
	before := n.must("systemctl show " + props + " towerd.service")
	n.must("sleep 3")
	after := n.must("systemctl show " + props + " towerd.service")
	prop := func(show, name string) string {
		for _, line := range strings.Split(show, "\n") {
			if v, ok := strings.CutPrefix(line, name+"="); ok {
				return v
			}
		}
		return ""
	}
	if prop(after, "WatchdogUSec") != "2s" {
		t.Fatalf("the watchdog drop-in did not apply:\n%s", after)
	}
	if prop(before, "MainPID") != prop(after, "MainPID") || prop(after, "NRestarts") != "0" {
		t.Errorf("towerd was restarted under WatchdogSec=2s (no WATCHDOG=1 in time):\nbefore:\n%safter:\n%s%s",
			before, after, n.must("journalctl -b --no-pager -o cat -u towerd | tail -10"))
	}
	start, _ := strconv.ParseInt(prop(after, "ExecMainStartTimestampMonotonic"), 10, 64)
	ping, _ := strconv.ParseInt(prop(after, "WatchdogTimestampMonotonic"), 10, 64)
	if ping-start < 1_000_000 {
		t.Errorf("systemd saw no WATCHDOG=1 in the 3 s after the start (last ping %d µs after it):\n%s", ping-start, after)
	}
}

// waitActive waits (at most 30 s) for towerd.service to leave "activating":
// READY=1 arrives just after towerd's first answers.
func waitActive(t *testing.T, n *node) {
	t.Helper()
	out := n.must(`for i in $(seq 300); do
		s=$(systemctl show -p ActiveState --value towerd.service)
		[ "$s" = activating ] || break
		sleep 0.1
	done; echo $s`)
	if strings.TrimSpace(out) != "active" {
		t.Errorf("towerd.service is %s, not active:\n%s", strings.TrimSpace(out), n.must("journalctl -b --no-pager -o cat -u towerd | tail -20"))
	}
}

// checkInstallPutsBack: when towerd cannot start (here a drop-in naming a
// user that does not exist: 217/USER, as the units before issue 32 met),
// install on this running systemd says so, exits 1 and puts the node back
// as it was: glibc resolves through systemd-resolved again.
func checkInstallPutsBack(t *testing.T, n *node) {
	t.Helper()
	n.must("mkdir -p /etc/systemd/system/towerd.service.d && printf '[Service]\\nUser=nosuchuser\\n' > /etc/systemd/system/towerd.service.d/zz-fail.conf")
	before := nodeState(t, n)
	out, code := n.run(3*time.Minute, nil, "/root/towerd", "install")
	if code != 1 || !strings.Contains(out, "rolled back") {
		t.Errorf("install with a towerd that cannot start: exit %d, want 1 and the rollback:\n%s", code, out)
	}
	n.must("getent ahostsv4 before.example.test | grep -q 192.0.2.1")
	n.must("resolvectl query --cache=no before.example.test >/dev/null")
	sameState(t, "after install rolled back", before, nodeState(t, n))
	n.must("rm -r /etc/systemd/system/towerd.service.d && systemctl daemon-reload && systemctl reset-failed")
}
