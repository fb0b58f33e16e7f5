package test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// startActivated runs towerd the way towerd.socket does, with the real
// systemd-socket-activate: one UDP and one TCP socket on addr and the
// control socket at control, all named "dns" like FileDescriptorName=dns
// (one name per unit). systemd-socket-activate makes sockets of one
// type per run, so two runs are chained: the outer binds UDP and passes it
// on, the inner adds TCP and passes both (it forwards sockets it inherits).
// Each execs the next program in place, so the PID started here ends up
// being towerd's. Like systemd, they start the program on the first packet.
func startActivated(t *testing.T, addr, control string, env []string, args ...string) *process {
	t.Helper()
	mustNotUseSystemResolvers(t, args)
	inner := []string{"systemd-socket-activate", "--listen=" + addr, "--listen=" + control, "--fdname=dns"}
	for _, e := range env {
		// systemd-socket-activate passes on only the variables named with -E.
		inner = append(inner, "--setenv="+e)
	}
	inner = append(append(inner, "--", towerdBin), args...)
	cmd := exec.Command("systemd-socket-activate", append([]string{"--listen=" + addr, "--datagram", "--"}, inner...)...)
	cmd.Env = systemdEnv()
	p := startProcess(t, cmd)
	// The outer one logs this once its socket is bound; a query sent
	// before would be refused.
	bound := regexp.MustCompile(`^Listening on ` + regexp.QuoteMeta(addr) + ` as 3\.`)
	if _, err := p.stderr.waitFor(bound, readyTimeout, p.exited); err != nil {
		t.Fatalf("systemd-socket-activate did not bind %s: %v\n%s", addr, err, p.stderr)
	}
	return p
}

// firstQuery is the packet that wakes a socket-activated towerd: it waits in
// the socket while towerd starts, so it gets one long wait instead of retries.
func firstQuery(t *testing.T, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: readyTimeout}
	reply, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("first query to the activated socket %s: %v", addr, err)
	}
	return reply
}

func TestSocketActivation(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t, "udp.activated.example. 300 IN A 192.0.2.61", "tcp.activated.example. 300 IN A 192.0.2.62")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	// towerd is told to listen elsewhere; under socket activation it must
	// take systemd's sockets instead and leave this address alone.
	configured := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	notify := newNotifySocket(t)

	// The control socket comes from systemd too; -control names another
	// path, which must stay untouched.
	control, ownControl := controlPath(t), controlPath(t)
	p := startActivated(t, addr, control, []string{"NOTIFY_SOCKET=" + notify.Path},
		"-config", "", "-listen", configured, "-admin", "", "-control", ownControl, "-consul-http", "off", "-state-dir", "",
		"-log-level", "debug", "-upstream", def.Addr, "-consul-dns", consul.Addr)
	d := &towerd{process: p}
	t.Cleanup(func() { d.stopAndCheck(t) })

	reply := firstQuery(t, addr, query("udp.activated.example.", dns.TypeA, false))
	if got := addresses(reply.Answer); len(got) != 1 || got[0] != "192.0.2.61" {
		t.Fatalf("UDP answer %v, want 192.0.2.61", got)
	}
	reply = mustExchange(t, addr, "tcp", query("tcp.activated.example.", dns.TypeA, true))
	if got := addresses(reply.Answer); len(got) != 1 || got[0] != "192.0.2.62" {
		t.Fatalf("TCP answer %v, want 192.0.2.62", got)
	}
	if def.CountNet("tcp.activated.example.", dns.TypeA, "udp")+def.CountNet("tcp.activated.example.", dns.TypeA, "tcp") != 1 {
		t.Errorf("the TCP question did not reach the upstream exactly once")
	}

	m, err := p.stderr.waitFor(servingLine, readyTimeout, p.exited)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"udp/%s tcp/%s"`, addr, addr); m[1] != want {
		t.Errorf("serving %s, want the inherited sockets %s", m[1], want)
	}
	ready := notify.nextNot(t, readyTimeout)
	if !ready.has("READY=1") || !strings.Contains(ready.Fields["STATUS"], "(from systemd)") {
		t.Errorf("first message %q, want READY=1 with a status naming systemd's sockets", ready.Raw)
	}
	if m := controlLine.FindStringSubmatch(p.stderr.String()); m == nil || m[1] != control ||
		!strings.Contains(p.stderr.String(), "from=systemd") {
		t.Errorf("control socket %v, want systemd's %s", m, control)
	}
	out, _ := cli(t, 0, "flush", "-all", "-control", control)
	mustContain(t, "flush over systemd's control socket", out, "flushed 2 entries")
	if _, err := os.Lstat(ownControl); err == nil {
		t.Errorf("towerd bound %s although systemd passed a control socket", ownControl)
	}

	// The PID systemd-socket-activate started is towerd itself, and the only
	// DNS sockets it has are the inherited ones: it bound nothing.
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.cmd.Process.Pid))
	if err != nil || exe != towerdBin {
		t.Fatalf("pid %d runs %q (%v), want towerd", p.cmd.Process.Pid, exe, err)
	}
	udp, tcp := socketsOf(t, p.cmd.Process.Pid)
	if !slices.Equal(udp, []string{addr}) || !slices.Equal(tcp, []string{addr}) {
		t.Errorf("towerd's unconnected UDP sockets %v and TCP listeners %v, want only the inherited %s", udp, tcp, addr)
	}
	for _, network := range []string{"udp", "tcp"} {
		l, err := listen(network, configured)
		if err != nil {
			t.Errorf("the configured listen address %s is taken over %s: %v", configured, network, err)
			continue
		}
		l.Close()
	}

	// A reload keeps the inherited sockets as towerd's own addresses: no
	// "restart needed" warning, and both still answer.
	d.signal(t, syscall.SIGHUP)
	if _, err := p.stderr.waitFor(regexp.MustCompile(`msg=reloaded`), readyTimeout, p.exited); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.stderr.String(), "only on restart") {
		t.Error("a reload under socket activation asked for a restart to change listen addresses")
	}
	for _, network := range []string{"udp", "tcp"} {
		mustExchange(t, addr, network, query("udp.activated.example.", dns.TypeA, false))
	}
}

func listen(network, addr string) (interface{ Close() error }, error) {
	if network == "udp" {
		return net.ListenPacket(network, addr)
	}
	return net.Listen(network, addr)
}

// socketsOf reads /proc for pid's sockets: UDP ones bound but not connected
// (serving sockets; upstream queries use connected ones) and listening TCP
// ones, as ip:port.
func socketsOf(t *testing.T, pid int) (udp, tcp []string) {
	t.Helper()
	inodes := map[string]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	// The kernel writes these tables in pieces, and while other tests
	// open and close sockets a read can skip a socket or show it twice:
	// each table is read a few times, and a socket counted once, by inode.
	seenUDP, seenTCP := map[string]string{}, map[string]string{}
	for range procNetReads {
		for _, table := range []string{"udp", "udp6", "tcp", "tcp6"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(data), "\n")[1:] {
				f := strings.Fields(line)
				if len(f) < 10 || !inodes[f[9]] {
					continue
				}
				switch {
				case strings.HasPrefix(table, "udp") && strings.Trim(f[2], "0:") == "":
					seenUDP[f[9]] = procAddr(f[1])
				case strings.HasPrefix(table, "tcp") && f[3] == "0A": // TCP_LISTEN
					seenTCP[f[9]] = procAddr(f[1])
				}
			}
		}
	}
	udp, tcp = slices.Sorted(maps.Values(seenUDP)), slices.Sorted(maps.Values(seenTCP))
	return udp, tcp
}

// procNetReads is how many times socketsOf reads each /proc/net table: a
// socket that one read skips under churn is in another.
const procNetReads = 5

// procAddr turns /proc/net's "0100007F:1F90" into "127.0.0.1:8080".
func procAddr(hex string) string {
	ipHex, portHex, _ := strings.Cut(hex, ":")
	port, _ := strconv.ParseUint(portHex, 16, 16)
	if len(ipHex) != 8 {
		return "[" + ipHex + "]:" + strconv.FormatUint(port, 10)
	}
	v, _ := strconv.ParseUint(ipHex, 16, 32)
	ip := net.IPv4(byte(v), byte(v>>8), byte(v>>16), byte(v>>24)) // little-endian in /proc
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

var statusUDP = regexp.MustCompile(`udp/(\S+)`)

// TestNotifyProtocol runs towerd with a NOTIFY_SOCKET the test owns and a
// 1 s watchdog, and checks the messages systemd would act on, in order.
func TestNotifyProtocol(t *testing.T) {
	t.Parallel()
	before, after, consul := newTestUpstream(t), newTestUpstream(t), newTestUpstream(t)
	before.Add(t, "ready.example. 300 IN A 192.0.2.71")
	after.Add(t, "reloaded.example. 300 IN A 192.0.2.72")
	configFor := func(u *testUpstream) string {
		return fmt.Sprintf("listen = [\"127.0.0.1:0\"]\n"+
			"[[zone]]\nname = \".\"\nservers = [%q]\n[[zone]]\nname = \"consul.\"\nservers = [%q]\n", u.Addr, consul.Addr)
	}
	cfgPath := writeConfig(t, configFor(before))
	notify := newNotifySocket(t)
	const watchdog = time.Second

	mustNotUseSystemResolvers(t, []string{"-config", cfgPath})
	// No admin server and no Consul watch: nothing but DNS to this test's
	// own upstreams.
	cmd := exec.Command(towerdBin, "-config", cfgPath, "-admin", "", "-control", "", "-consul-http", "off", "-state-dir", "", "-log-level", "debug")
	cmd.Env = systemdEnv("NOTIFY_SOCKET="+notify.Path, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds()))
	d := &towerd{process: startProcess(t, cmd)}
	t.Cleanup(func() { d.stopAndCheck(t) })

	// READY=1 comes once answers are possible: the very first query sent
	// after it, one packet with no retry, is answered over UDP and TCP.
	ready := notify.nextNot(t, readyTimeout)
	if !ready.has("READY=1") {
		t.Fatalf("first message %q, want READY=1", ready.Raw)
	}
	m := statusUDP.FindStringSubmatch(ready.Fields["STATUS"])
	if m == nil {
		t.Fatalf("READY's STATUS=%q names no UDP address", ready.Fields["STATUS"])
	}
	for _, network := range []string{"udp", "tcp"} {
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		reply, _, err := c.Exchange(query("ready.example.", dns.TypeA, false), m[1])
		if err != nil || len(addresses(reply.Answer)) != 1 {
			t.Fatalf("%s query right after READY=1: %v %v", network, reply, err)
		}
	}

	// WATCHDOG=1 every half of WATCHDOG_USEC, each with a live status.
	var pings []notifyMessage
	for len(pings) < 5 {
		msg := notify.next(t, 2*watchdog)
		if !msg.has("WATCHDOG=1") {
			t.Fatalf("unexpected message between pings: %q", msg.Raw)
		}
		if !strings.Contains(msg.Fields["STATUS"], "in flight; upstreams 2/2 up") {
			t.Errorf("ping status %q lacks the upstream summary", msg.Fields["STATUS"])
		}
		pings = append(pings, msg)
	}
	checkPeriod(t, pings, watchdog/2, watchdog)

	// SIGHUP: RELOADING=1 with the monotonic clock, then READY=1 once the
	// new configuration answers.
	if err := os.WriteFile(cfgPath, []byte(configFor(after)), 0o600); err != nil {
		t.Fatal(err)
	}
	sent := monotonicUsec(t)
	d.signal(t, syscall.SIGHUP)
	reloading := notify.nextNot(t, readyTimeout)
	usec, err := strconv.ParseInt(reloading.Fields["MONOTONIC_USEC"], 10, 64)
	if !reloading.has("RELOADING=1") || err != nil || usec < sent || usec > sent+readyTimeout.Microseconds() {
		t.Fatalf("after SIGHUP got %q, want RELOADING=1 with MONOTONIC_USEC just after %d", reloading.Raw, sent)
	}
	if again := notify.next(t, readyTimeout); !again.has("READY=1") {
		t.Fatalf("after RELOADING=1 got %q, want READY=1", again.Raw)
	}
	reply := mustExchange(t, m[1], "udp", query("reloaded.example.", dns.TypeA, false))
	if got := addresses(reply.Answer); len(got) != 1 || got[0] != "192.0.2.72" {
		t.Errorf("after READY=1 the new upstream should answer; got %v", got)
	}

	// SIGTERM: STOPPING=1, then nothing more.
	d.signal(t, syscall.SIGTERM)
	if stopping := notify.nextNot(t, stopTimeout); !stopping.has("STOPPING=1") {
		t.Fatalf("after SIGTERM got %q, want STOPPING=1", stopping.Raw)
	}
	if code := d.waitExit(t, stopTimeout); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if rest := notify.rest(t); len(rest) > 0 {
		t.Errorf("messages after STOPPING=1: %v", rest)
	}
}

// checkPeriod wants the pings' median spacing near period, and no gap as
// long as the watchdog timeout (systemd would have killed towerd).
func checkPeriod(t *testing.T, pings []notifyMessage, period, timeout time.Duration) {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(pings); i++ {
		gaps = append(gaps, pings[i].At.Sub(pings[i-1].At))
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	if median < period*8/10 || median > period*13/10 {
		t.Errorf("watchdog pings %v apart (median %v), want about %v", gaps, median, period)
	}
	if sorted[len(sorted)-1] >= timeout {
		t.Errorf("a watchdog gap of %v reaches WATCHDOG_USEC %v", sorted[len(sorted)-1], timeout)
	}
}

// monotonicUsec reads CLOCK_MONOTONIC, the clock of MONOTONIC_USEC.
func monotonicUsec(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() / 1000
}
