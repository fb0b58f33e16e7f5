package install

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/towerd/towerd/systemd"
	"github.com/towerd/towerd/test/dnstest"
)

// fakeSystemctl puts a systemctl first on PATH that logs each call's
// arguments, one line each (and a systemd-sysusers that logs its own),
// and fails (exit 1, a message on stderr) the
// calls whose arguments are exactly fail. It returns the log's path.
func fakeSystemctl(t *testing.T, fail string) string {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> \"$FAKE_SYSTEMCTL_LOG\"\n" +
		"if [ \"$*\" = \"$FAKE_SYSTEMCTL_FAIL\" ]; then echo \"Job for $2 failed.\" >&2; exit 1; fi\nexit 0\n"
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// systemd-sysusers too: the real one would create user towerd on the
	// machine running the tests.
	sysusers := "#!/bin/sh\necho \"systemd-sysusers $*\" >> \"$FAKE_SYSTEMCTL_LOG\"\nexit 0\n"
	if err := os.WriteFile(filepath.Join(dir, "systemd-sysusers"), []byte(sysusers), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_SYSTEMCTL_LOG", logPath)
	t.Setenv("FAKE_SYSTEMCTL_FAIL", fail)
	return logPath
}

func calls(t *testing.T, logPath string) []string {
	t.Helper()
	data, err := os.ReadFile(logPath)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// silentUDP is an address where a UDP socket is bound and never answers:
// towerd "started" but never ready.
func silentUDP(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// answeringDNS is a DNS server on loopback that answers every query with
// SERVFAIL, as a towerd without upstreams yet would: any answer is ready.
func answeringDNS(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

func activateOn(t *testing.T, kind nodeKind, act Activation) (root string, before, installed map[string]dnstest.Node, r *Report, err error) {
	t.Helper()
	root, _ = buildNode(t, nodeCase{kind: kind})
	before = dnstest.Tree(t, root)
	r, err = install(rootOf(t, root), InstallOptions{Binary: fakeBinary(t), Activate: &act})
	return root, before, dnstest.Tree(t, root), r, err
}

var rollbackCalls = []string{"disable --now towerd.socket towerd.service", "daemon-reload", "restart systemd-resolved.service"}

// TestActivateRollsBackWhenSystemctlFails: `systemctl enable --now` fails;
// install disables the units, puts every file back (units, resolv.conf,
// nsswitch.conf, the drop-ins) and says so, and returns an error.
func TestActivateRollsBackWhenSystemctlFails(t *testing.T) {
	log := fakeSystemctl(t, "enable --now towerd.socket")
	_, before, after, r, err := activateOn(t, nodeDebianResolved, Activation{Timeout: time.Second, Probe: answeringDNS(t)})
	if err == nil || !strings.Contains(err.Error(), "enable --now towerd.socket") || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("install --activate = %v, want the failed step and the rollback", err)
	}
	dnstest.DiffTrees(t, before, after)
	want := append([]string{"systemd-sysusers towerd.conf", "daemon-reload", "restart systemd-resolved.service", "enable --now towerd.socket"}, rollbackCalls...)
	if got := calls(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("systemctl calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := changeFor(r, "systemctl enable --now towerd.socket"); c.Action != "failed" || !strings.Contains(c.Detail, "Job for --now failed") {
		t.Errorf("report of the failed step: %+v", c)
	}
	for _, p := range []string{ResolvConfPath, NsswitchPath} {
		if !hasChange(r, "restored", p) {
			t.Errorf("the report does not say %s was restored: %+v", p, r.Changes)
		}
	}
	if !hasChange(r, "removed", systemd.UnitDir+"/"+systemd.SocketUnitName) {
		t.Errorf("the report does not say the socket unit was removed")
	}
}

// TestActivateRollsBackWhenTowerdNeverAnswers: systemctl succeeds, but
// nothing answers on the probe address within the timeout.
func TestActivateRollsBackWhenTowerdNeverAnswers(t *testing.T) {
	log := fakeSystemctl(t, "")
	probe := silentUDP(t)
	_, before, after, r, err := activateOn(t, nodeDhclient, Activation{Timeout: 300 * time.Millisecond, Probe: probe})
	if err == nil || !strings.Contains(err.Error(), "did not answer on "+probe) {
		t.Fatalf("install --activate = %v, want towerd not answering", err)
	}
	dnstest.DiffTrees(t, before, after)
	want := []string{"systemd-sysusers towerd.conf", "daemon-reload", "enable --now towerd.socket", "disable --now towerd.socket towerd.service", "daemon-reload"}
	if got := calls(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("systemctl calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := changeFor(r, "towerd on "+probe); c.Action != "failed" {
		t.Errorf("report: %+v", c)
	}
	if !hasChange(r, "removed", DhclientHook) || !hasChange(r, "removed", DhclientResolvConf) {
		t.Errorf("the dhclient hook and its file are not reported removed: %+v", r.Changes)
	}
}

// TestActivateSucceeds: towerd answers; the files stay, the steps are in
// the report, and the next steps no longer say to enable the socket.
func TestActivateSucceeds(t *testing.T) {
	log := fakeSystemctl(t, "")
	root, _, after, r, err := activateOn(t, nodeDebianResolved, Activation{Timeout: 5 * time.Second, Probe: answeringDNS(t)})
	if err != nil {
		t.Fatalf("install --activate: %v", err)
	}
	// The user first: towerd.service runs as it (217/USER without it).
	want := []string{"systemd-sysusers towerd.conf", "daemon-reload", "restart systemd-resolved.service", "enable --now towerd.socket"}
	if got := calls(t, log); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("systemctl calls %q, want %q", got, want)
	}
	if after["etc/resolv.conf"].Kind != "file" || !strings.Contains(after["etc/resolv.conf"].Data, "nameserver 127.0.0.1") {
		t.Errorf("resolv.conf after activation: %+v", after["etc/resolv.conf"])
	}
	if strings.Contains(strings.Join(r.Next, "\n"), "enable") {
		t.Errorf("next steps after activation: %q", r.Next)
	}
	if c := changeFor(r, "systemctl enable --now towerd.socket"); c.Action != "ran" {
		t.Errorf("report: %+v", c)
	}
	mustUninstall(t, rootOf(t, root))
}

// TestActivateRefusals: --activate is refused before anything changes when
// dnsmasq holds port 53, or with --root; install never runs systemctl
// without --activate.
func TestActivateRefusals(t *testing.T) {
	log := fakeSystemctl(t, "")
	root, before, after, _, err := activateOn(t, nodeConsulDnsmasq, Activation{Timeout: time.Second, Probe: answeringDNS(t)})
	if err == nil || !strings.Contains(err.Error(), "systemctl disable --now dnsmasq.service") {
		t.Errorf("install --activate with dnsmasq enabled = %v", err)
	}
	dnstest.DiffTrees(t, before, after)
	if _, err := Install(InstallOptions{Root: root, Binary: fakeBinary(t), Activate: &Activation{}}); err == nil ||
		!strings.Contains(err.Error(), "--root") {
		t.Errorf("install --activate --root = %v", err)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
	mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	if got := calls(t, log); len(got) != 0 {
		t.Errorf("systemctl ran: %q", got)
	}
}

func hasChange(r *Report, action, name string) bool {
	for _, c := range r.Changes {
		if c.Action == action && c.Path == name {
			return true
		}
	}
	return false
}
