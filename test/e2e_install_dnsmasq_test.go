package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/test/dnstest"
)

// writeNode lays out files under root: a value starting with "->" is a
// symlink target; paths under sbin/ and usr/sbin/ are executable.
func writeNode(t *testing.T, root string, files map[string]string) {
	t.Helper()
	dnstest.WriteTree(t, root, files)
	for name, content := range files {
		if !strings.HasPrefix(content, "->") && (strings.HasPrefix(name, "sbin/") || strings.HasPrefix(name, "usr/sbin/")) {
			if err := os.Chmod(filepath.Join(root, name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// consulDnsmasqNode is issue 14's node (d), as cmd/towerd/internal/install/nodes_test.go builds
// it: dhclient with HashiCorp's prepend line, resolv.conf naming dnsmasq
// (127.0.0.1) first, and dnsmasq forwarding consul. to the agent
// (server=/consul/127.0.0.1#8600) from /etc/dnsmasq.d, which Debian's unit
// reads through CONFIG_DIR.
func consulDnsmasqNode(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeNode(t, root, map[string]string{
		"etc/resolv.conf":                       "domain ec2.internal\nsearch ec2.internal\nnameserver 127.0.0.1\nnameserver 10.2.0.2\n",
		"etc/dhcp/dhclient.conf":                "request subnet-mask, routers, domain-name, domain-name-servers;\nprepend domain-name-servers 127.0.0.1;\n",
		"sbin/dhclient":                         "",
		"sbin/dhclient-script":                  "#!/bin/sh\nrun_hookdir /etc/dhcp/dhclient-enter-hooks.d\n",
		"etc/dhcp/dhclient-enter-hooks.d/debug": "RUN=\"no\"\n",
		"etc/network/interfaces":                "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n",
		"etc/dnsmasq.conf":                      "# Configuration file for dnsmasq.\n#port=5353\n#no-resolv\n",
		"etc/dnsmasq.d/10-consul":               "# Enable forward lookup of the 'consul' domain:\nserver=/consul/127.0.0.1#8600\n",
		"etc/dnsmasq.d/README":                  "# All files in this directory will be read by dnsmasq as\n# configuration files, except if their names end in\n# \".dpkg-dist\",\".dpkg-old\" or \".dpkg-new\"\n",
		"etc/default/dnsmasq":                   "ENABLED=1\nCONFIG_DIR=/etc/dnsmasq.d,.dpkg-dist,.dpkg-old,.dpkg-new\n",
		"usr/sbin/dnsmasq":                      "",
		"lib/systemd/system/dnsmasq.service":    "[Unit]\nDescription=dnsmasq\n",
		"etc/nsswitch.conf":                     "hosts:          files dns\nnetworks:       files\n",
		"etc/systemd/system/multi-user.target.wants/dnsmasq.service": "->/lib/systemd/system/dnsmasq.service",
	})
	return root
}

// TestInstallFromDnsmasq: issue 14 item 3 with the built binary. On the
// Consul node running dnsmasq, `towerd install --from-dnsmasq` imports
// dnsmasq's files (found by itself) as towerd.toml, zone "." following the
// dhclient hook's file; the commands that stop dnsmasq come before
// towerd's; a second run changes nothing; uninstall is byte exact. With an
// operator's towerd.toml the flag is refused, and a plain install keeps
// that file without asking for --upstream.
func TestInstallFromDnsmasq(t *testing.T) {
	t.Parallel()
	root := consulDnsmasqNode(t)
	before := treeState(t, root)

	code, out, errOut := runToExit(t, "install", "--root", root, "--from-dnsmasq")
	if code != 0 {
		t.Fatalf("install --from-dnsmasq: status %d\n%s%s", code, out, errOut)
	}
	stop := strings.Index(out, "systemctl disable --now dnsmasq.service")
	start := strings.Index(out, "systemctl enable --now towerd.socket")
	if stop < 0 || start < 0 || stop > start {
		t.Errorf("dnsmasq's stop command must be printed before towerd's start:\n%s", out)
	}
	// dnsmasq's order: Debian's command line (CONFIG_DIR) before its file.
	for _, want := range []string{"found           dnsmasq: dnsmasq configuration: /etc/default/dnsmasq, /etc/dnsmasq.d/10-consul, /etc/dnsmasq.d/README, /etc/dnsmasq.conf",
		"imported from dnsmasq's /etc/default/dnsmasq, /etc/dnsmasq.d/10-consul, /etc/dnsmasq.d/README, /etc/dnsmasq.conf",
		"wrote           /etc/dhcp/dhclient-enter-hooks.d/towerd"} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	installed := treeState(t, root)
	cfg := installed["etc/towerd/towerd.toml"].data
	for _, want := range []string{"by `towerd install --from-dnsmasq`", `resolv_conf = "/run/towerd-dhclient/resolv.conf"`,
		"name    = \"consul.\"\nservers = [\"127.0.0.1:8600\"]"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("towerd.toml lacks %q:\n%s", want, cfg)
		}
	}
	// towerd takes it: consul. to the agent, "." to the lease's server
	// (127.0.0.1, dnsmasq's and now towerd's own address, left out).
	code, out, errOut = checkUnderRoot(t, root)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("zone %-20s -> 127.0.0.1:8600\n", "consul.")) ||
		!strings.Contains(out, fmt.Sprintf("zone %-20s -> 10.2.0.2:53\n", ".")) {
		t.Errorf("towerd check on the imported config: status %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = runToExit(t, "install", "--root", root, "--from-dnsmasq")
	if code != 0 || !strings.Contains(out, "nothing to change") {
		t.Errorf("second install: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after installing again", installed, treeState(t, root), true)

	// Issue 25 item 1: a re-run without --from-dnsmasq keeps the import
	// (the config is unchanged, byte for byte, and says why), and
	// --upstream merges into it: zone "." pinned, every imported setting
	// kept.
	code, out, errOut = runToExit(t, "install", "--root", root)
	if code != 0 || !strings.Contains(out, "nothing to change") ||
		!strings.Contains(out, "unchanged       /etc/towerd/towerd.toml: holds what an earlier install imported from dnsmasq's /etc/default/dnsmasq") {
		t.Errorf("plain install on the imported node: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after a plain install on the imported node", installed, treeState(t, root), true)
	code, out, errOut = runToExit(t, "install", "--root", root, "--upstream", "10.0.0.9")
	merged := treeState(t, root)["etc/towerd/towerd.toml"].data
	if code != 0 || !strings.Contains(out, "wrote           /etc/towerd/towerd.toml: merged: what an earlier install imported from dnsmasq's") ||
		!strings.Contains(out, `zone "." -> 10.0.0.9:53 (from --upstream)`) {
		t.Errorf("install --upstream on the imported node: status %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"name    = \".\"\nservers = [\"10.0.0.9:53\"]", "name    = \"consul.\"\nservers = [\"127.0.0.1:8600\"]",
		"by `towerd install --from-dnsmasq`"} {
		if !strings.Contains(merged, want) {
			t.Errorf("the merged towerd.toml lacks %q:\n%s", want, merged)
		}
	}
	if strings.Contains(merged, "resolv_conf") {
		t.Errorf("the merged towerd.toml still follows the dhclient file:\n%s", merged)
	}
	if code, out, errOut = checkUnderRoot(t, root); code != 0 || !strings.Contains(out, fmt.Sprintf("zone %-20s -> 10.0.0.9:53", ".")) ||
		!strings.Contains(out, fmt.Sprintf("zone %-20s -> 127.0.0.1:8600\n", "consul.")) {
		t.Errorf("towerd check on the merged config: status %d\n%s%s", code, out, errOut)
	}
	// Back to following the lease: the same file as the first install.
	if code, out, errOut = runToExit(t, "install", "--root", root); code != 0 || treeState(t, root)["etc/towerd/towerd.toml"].data != cfg {
		t.Errorf("install after --upstream: status %d\n%s%s", code, out, errOut)
	}

	// A conf-dir named alone imports the same zone; the config, still
	// install's own, is rewritten with the header naming its source.
	code, out, errOut = runToExit(t, "install", "--root", root, "--from-dnsmasq", "/etc/dnsmasq.d")
	if cfg := treeState(t, root)["etc/towerd/towerd.toml"].data; code != 0 ||
		!strings.Contains(cfg, "imported from /etc/dnsmasq.d by") || !strings.Contains(cfg, `servers = ["127.0.0.1:8600"]`) {
		t.Fatalf("install --from-dnsmasq DIR: status %d\n%s%s\n%s", code, out, errOut, cfg)
	}

	if code, out, errOut = runToExit(t, "uninstall", "--root", root); code != 0 {
		t.Fatalf("uninstall: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after uninstall", before, treeState(t, root), false)

	// An operator's towerd.toml (imported by hand earlier) wins: a flag
	// that would replace it is an error, and nothing changes.
	mine := "[[zone]]\nname = \"consul.\"\nservers = [\"127.0.0.1:8600\"]\n"
	writeNode(t, root, map[string]string{"etc/towerd/towerd.toml": mine})
	before = treeState(t, root)
	for _, args := range [][]string{{"--from-dnsmasq"}, {"--upstream", "192.0.2.1"}} {
		code, out, errOut = runToExit(t, append([]string{"install", "--root", root}, args...)...)
		if code == 0 || !strings.Contains(errOut, args[0]+" cannot take effect") {
			t.Errorf("install %s over an operator's config: status %d\n%s%s", args[0], code, out, errOut)
		}
		sameTree(t, "after a refused install", before, treeState(t, root), true)
	}
	code, out, errOut = runToExit(t, "install", "--root", root)
	if code != 0 || !strings.Contains(out, "kept            /etc/towerd/towerd.toml") {
		t.Fatalf("install keeping the operator's config: status %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = runToExit(t, "uninstall", "--root", root); code != 0 {
		t.Fatalf("uninstall: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after the last uninstall", before, treeState(t, root), false)
}

// TestInstallActivateRefusedUnderARoot: --activate would run this
// machine's systemctl, which cannot start the units of another root: it
// is refused before anything is read or written.
func TestInstallActivateRefusedUnderARoot(t *testing.T) {
	t.Parallel()
	root := consulDnsmasqNode(t)
	before := treeState(t, root)
	code, out, errOut := runToExit(t, "install", "--root", root, "--activate")
	if code != 2 || !strings.Contains(errOut, "--activate runs this machine's systemctl") {
		t.Errorf("install --activate --root: status %d\n%s%s", code, out, errOut)
	}
	sameTree(t, "after a refused --activate", before, treeState(t, root), true)
}
