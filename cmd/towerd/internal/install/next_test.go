package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/test/dnstest"
)

// Issue 25 items 1 and 7: what install prints after its changes says how
// to undo them and how DNS fares until towerd runs.

func TestInstallSaysHowToUndoAndWhenDNSIsDown(t *testing.T) {
	t.Parallel()
	root := resolvedRoot(t)
	fsys := rootOf(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	undo := strings.Join(r.Undo, "\n")
	for _, want := range []string{
		"systemctl disable --now towerd.socket towerd.service",
		"towerd uninstall   # puts back /etc/resolv.conf (from /etc/resolv.pre-towerd-backup.conf) and removes the 6 other files install wrote",
	} {
		if !strings.Contains(undo, want) {
			t.Errorf("undo lacks %q:\n%s", want, undo)
		}
	}
	if !strings.Contains(r.Outage, "DNS on this node is down from now until `systemctl enable --now towerd.socket`") ||
		!strings.Contains(r.Outage, "--activate") {
		t.Errorf("outage: %q", r.Outage)
	}
	var out, errOut bytes.Buffer
	r.Print(&out, &errOut, false)
	if !strings.Contains(out.String(), "\nundo:\n  systemctl disable") || !strings.Contains(out.String(), "\nmeanwhile: DNS on this node is down") {
		t.Errorf("printed:\n%s", out.String())
	}
	// A second run points nothing new at towerd: no outage to speak of.
	if again := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)}); again.Outage != "" || len(again.Undo) == 0 {
		t.Errorf("second run: outage %q, undo %q", again.Outage, again.Undo)
	}
}

func TestInstallOnADnsmasqNodeSaysDnsmasqAnswersMeanwhile(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
	r := mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	if !strings.Contains(r.Outage, "go to dnsmasq on 127.0.0.1 until it stops") {
		t.Errorf("outage: %q", r.Outage)
	}
	if undo := strings.Join(r.Undo, "\n"); !strings.HasSuffix(undo, "systemctl enable --now dnsmasq.service") {
		t.Errorf("undo does not give dnsmasq its port back:\n%s", undo)
	}
}

// TestInstallKeepsADHCPServingDnsmasq: issue 25 item 7. dnsmasq also
// serves DHCP: install turns its DNS off instead of stopping it.
func TestInstallKeepsADHCPServingDnsmasq(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
	dnstest.WriteTree(t, root, map[string]string{"etc/dnsmasq.d/30-dhcp": "dhcp-range=192.168.7.50,192.168.7.150,12h\n"})
	r := mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	next := strings.Join(r.Next, "\n")
	if strings.Contains(next, "disable --now dnsmasq") || !strings.Contains(next, "echo port=0 >> /etc/dnsmasq.conf && systemctl restart dnsmasq.service") {
		t.Errorf("next:\n%s", next)
	}
	if i, j := strings.Index(next, "port=0"), strings.Index(next, "enable --now towerd.socket"); i < 0 || i > j {
		t.Errorf("dnsmasq must give up port 53 before towerd.socket takes it:\n%s", next)
	}
	if undo := strings.Join(r.Undo, "\n"); !strings.Contains(undo, "remove the port=0 line from /etc/dnsmasq.conf") {
		t.Errorf("undo:\n%s", undo)
	}
}

// TestPinnedInstallOnADhclientNode: issue 25 item 7. With zone "." pinned
// nothing reads the lease's servers: the hook only keeps resolv.conf, and
// no file is seeded for towerd to follow.
func TestPinnedInstallOnADhclientNode(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeDhclient})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Upstreams: []string{"192.0.2.7"}})
	hook := read(t, root, DhclientHook)
	if !strings.Contains(hook, "make_resolv_conf() {\n\t:\n}") || strings.Contains(hook, DhclientResolvDir) {
		t.Errorf("the pinned hook writes more than nothing:\n%s", hook)
	}
	if _, err := os.Lstat(filepath.Join(root, DhclientResolvConf)); !os.IsNotExist(err) {
		t.Errorf("%s seeded for a pinned zone \".\": %v", DhclientResolvConf, err)
	}
	if cfg := read(t, root, "etc/towerd/towerd.toml"); strings.Contains(cfg, "resolv_conf") || !strings.Contains(cfg, `servers = ["192.0.2.7:53"]`) {
		t.Errorf("config:\n%s", cfg)
	}
	// Following the lease again brings the full hook back.
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if hook := read(t, root, DhclientHook); !strings.Contains(hook, DhclientResolvDir) {
		t.Errorf("the following hook is not back:\n%s", hook)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestUninstallRefusingSaysNoMoreThanWhy: issue 25 item 7. Uninstall
// while towerd is enabled refuses, without "nothing to change" first.
func TestUninstallRefusingSaysNoMoreThanWhy(t *testing.T) {
	t.Parallel()
	root := resolvedRoot(t)
	mustInstall(t, rootOf(t, root), InstallOptions{Binary: fakeBinary(t)})
	dnstest.WriteTree(t, root, map[string]string{"etc/systemd/system/sockets.target.wants/towerd.socket": "->/etc/systemd/system/towerd.socket"})
	var out, errOut bytes.Buffer
	code := RunUninstall([]string{"--root", root}, &out, &errOut)
	if code != base.ExitFail || strings.Contains(out.String(), "nothing to change") || !strings.Contains(errOut.String(), "systemctl disable --now towerd.socket") {
		t.Errorf("status %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}
