package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestGetentThroughTowerdWithTheInstalledFiles: issue 14's "nothing
// bypasses towerd" as glibc sees it. `towerd install` runs on a Debian 12
// node with systemd-resolved and nss-resolve (hosts: files resolve
// [!UNAVAIL=return] dns). Then, in a private mount and network namespace
// (unshare -mn: a fresh loopback where 127.0.0.1:53 is free, and no route
// to any real resolver), the installed etc/resolv.conf and
// etc/nsswitch.conf are bind-mounted over /etc's, towerd runs on
// 127.0.0.1:53 with the installed towerd.toml (zone "." following the
// node's resolved file, which names 127.0.0.2), dnsmasq on 127.0.0.2:53
// answers the test name, and glibc's `getent hosts` must print that answer.
// The only DNS server at 127.0.0.1 in there is towerd.
func TestGetentThroughTowerdWithTheInstalledFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare -mn, bind mounts, port 53")
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "getent", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dnsmasq := dnsmasqPath(t)

	root := resolvedNode(t)
	nsswitch := "passwd:         files systemd\ngroup:          files systemd\n\n" +
		"hosts:          files resolve [!UNAVAIL=return] dns\nnetworks:       files\n"
	writeNode(t, root, map[string]string{
		"etc/nsswitch.conf":               nsswitch,
		"run/systemd/resolve/resolv.conf": "# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).\nnameserver 127.0.0.2\nsearch corp.example\n",
	})
	if code, out, errOut := runToExit(t, "install", "--root", root); code != 0 {
		t.Fatalf("install: status %d\n%s%s", code, out, errOut)
	}
	installedNss, err := os.ReadFile(filepath.Join(root, "etc/nsswitch.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^hosts:\s+files dns$`).Match(installedNss) {
		t.Fatalf("installed nsswitch.conf:\n%s", installedNss)
	}

	// The namespace: its own loopback, the installed files over /etc's.
	ns := newNamespace(t, true, filepath.Join(root, "etc/resolv.conf"), filepath.Join(root, "etc/nsswitch.conf"))
	inNS := ns.command

	// The upstream: dnsmasq on 127.0.0.2:53 answers the test name.
	conf := filepath.Join(t.TempDir(), "upstream.conf")
	if err := os.WriteFile(conf, []byte("listen-address=127.0.0.2\nbind-interfaces\nport=53\nno-resolv\nno-hosts\n"+
		"address=/getent-test.example/192.0.2.77\nuser=root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := startProcess(t, inNS(dnsmasq, "--keep-in-foreground", "--conf-file="+conf, "--log-facility=-",
		"--pid-file="+filepath.Join(t.TempDir(), "dnsmasq.pid")))
	t.Cleanup(func() {
		if up.running() {
			up.signal(t, syscall.SIGTERM)
			up.waitExit(t, stopTimeout)
		}
	})
	if _, err := up.stderr.waitFor(regexp.MustCompile(`started, version`), readyTimeout, up.exited); err != nil {
		t.Fatalf("dnsmasq did not start: %v\n%s", err, up.stderr)
	}

	// towerd with the installed towerd.toml; its resolv_conf is the node's
	// file, taken under the root.
	cfg, err := os.ReadFile(filepath.Join(root, "etc/towerd/towerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), `resolv_conf = "/run/systemd/resolve/resolv.conf"`) {
		t.Fatalf("installed towerd.toml:\n%s", cfg)
	}
	cfgPath := filepath.Join(t.TempDir(), "towerd.toml")
	body := strings.ReplaceAll(string(cfg), `resolv_conf = "/`, `resolv_conf = "`+root+`/`)
	if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tw := startProcess(t, inNS(towerdBin, "-config", cfgPath, "-log-level", "debug", "-admin", "127.0.0.1:0",
		"-control", "", "-consul-http", "off", "-state-dir", ""))
	t.Cleanup(func() {
		if tw.running() {
			tw.signal(t, syscall.SIGTERM)
		}
		if code := tw.waitExit(t, stopTimeout); code != 0 {
			t.Errorf("towerd exited %d", code)
		}
		if t.Failed() {
			t.Logf("towerd stderr:\n%s", lastLines(tw.stderr.String(), 100))
		}
	})
	if _, err := tw.stderr.waitFor(servingLine, readyTimeout, tw.exited); err != nil {
		t.Fatalf("towerd did not start: %v\n%s", err, tw.stderr)
	}
	if !strings.Contains(tw.stderr.String(), "udp/127.0.0.1:53") {
		t.Fatalf("towerd does not serve 127.0.0.1:53:\n%s", tw.stderr)
	}

	out, err := inNS("getent", "hosts", "getent-test.example").CombinedOutput()
	if err != nil {
		t.Fatalf("getent hosts getent-test.example: %v\n%s", err, out)
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[0] != "192.0.2.77" || f[1] != "getent-test.example" {
		t.Errorf("getent hosts printed %q, want 192.0.2.77 getent-test.example", out)
	}
	// The search list kept from resolved's stub file applies too.
	out, err = inNS("getent", "hosts", "nosuch-name").CombinedOutput()
	if err == nil {
		t.Errorf("getent found a name nobody serves: %s", out)
	}
	// towerd logs through a buffer of its own (logsink) and the line
	// crosses a pipe: it may come after the answer.
	if _, err := tw.stderr.waitFor(regexp.MustCompile(`getent-test\.example`), readyTimeout, tw.exited); err != nil {
		t.Errorf("towerd's log does not show the query it answered: %v", err)
	}
}
