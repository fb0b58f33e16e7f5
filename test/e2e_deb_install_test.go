package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dhclientNodeFiles is issue 14's node (c): ifupdown with Debian's
// dhclient, a plain /etc/resolv.conf it rewrites at every lease. Zone "."
// must follow the file towerd's hook writes instead; with the package's
// sample towerd.toml kept "as the operator's", it used to follow
// /etc/resolv.conf, towerd's own, and had no server at all.
var dhclientNodeFiles = map[string]string{
	"etc/resolv.conf":                       "domain corp.example\nsearch corp.example\nnameserver 10.1.0.2\nnameserver 10.1.0.3\n",
	"etc/dhcp/dhclient.conf":                "# Configuration file for /sbin/dhclient.\nrequest subnet-mask, broadcast-address, routers,\n\tdomain-name, domain-name-servers, domain-search;\n",
	"sbin/dhclient":                         "",
	"sbin/dhclient-script":                  "#!/bin/sh\nmake_resolv_conf() {\n    :\n}\nrun_hookdir /etc/dhcp/dhclient-enter-hooks.d\n",
	"etc/dhcp/dhclient-enter-hooks.d/debug": "RUN=\"no\"\n",
	"etc/network/interfaces":                "auto lo\niface lo inet loopback\n\nallow-hotplug eth0\niface eth0 inet dhcp\n",
	"var/lib/dhcp/dhclient.eth0.leases":     "lease {\n  interface \"eth0\";\n  option domain-name-servers 10.1.0.2,10.1.0.3;\n}\n",
	"etc/nsswitch.conf":                     "passwd:         files\nhosts:          files dns\nnetworks:       files\n",
}

// debInstallOnANode is `apt install ./towerd_*.deb && towerd install` on a
// dhclient node, in a scratch root: dpkg --root installs the package, the
// packaged /usr/bin/towerd runs install --root there. Nothing is copied
// over the package's program or units (dpkg --verify finds every file of
// the package as shipped, the conffile included), the node's settings are
// in towerd.d/00-install.toml naming dhclient's file, towerd check on the
// result has servers for ".", and uninstall restores the root byte for
// byte.
func debInstallOnANode(t *testing.T, deb string) {
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range dhclientNodeFiles {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "sbin/") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	dpkg := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		args = append([]string{"--root=" + root, "--force-script-chrootless", "--log=/dev/null"}, args...)
		b, err := exec.CommandContext(ctx, "dpkg", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	dpkg("-i", deb)
	before := treeState(t, root)

	towerd := filepath.Join(root, "usr/bin/towerd")
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, towerd, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := run("install", "--root", root)
	if err != nil {
		t.Fatalf("towerd install: %v\n%s%s", err, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^found +/usr/bin/towerd: towerd's Debian package: .*nothing is copied$`),
		regexp.MustCompile(`(?m)^wrote +/etc/towerd/towerd\.d/00-install\.toml: zone "\." follows /run/towerd-dhclient/resolv\.conf`),
		regexp.MustCompile(`(?m)^wrote +/etc/dhcp/dhclient-enter-hooks\.d/towerd: `),
		regexp.MustCompile(`(?m)^wrote +/etc/resolv\.conf: nameserver 127\.0\.0\.1`),
		regexp.MustCompile(`(?m)systemctl enable --now towerd\.socket`),
	} {
		if !want.MatchString(out) {
			t.Errorf("install output does not match %s:\n%s", want, out)
		}
	}
	installed := treeState(t, root)
	for _, p := range []string{"usr/local/bin/towerd", "etc/systemd/system/towerd.service", "etc/systemd/system/towerd.socket"} {
		if _, ok := installed[p]; ok {
			t.Errorf("install wrote %s, which would override the package's", p)
		}
	}
	// Every file of the package is as dpkg put it, towerd.toml included:
	// an upgrade replaces them without a question.
	if v := dpkg("--verify", "towerd"); v != "" {
		t.Errorf("dpkg --verify towerd after towerd install:\n%s", v)
	}
	dropIn := installed["etc/towerd/towerd.d/00-install.toml"].data
	if !strings.Contains(dropIn, `resolv_conf = "/run/towerd-dhclient/resolv.conf"`) {
		// Fatal: towerd check below would read this machine's resolv.conf.
		t.Fatalf("00-install.toml does not follow dhclient's file:\n%s", dropIn)
	}
	if !strings.HasPrefix(installed["etc/resolv.conf"].data, "# Managed by towerd") {
		t.Errorf("resolv.conf is not towerd's: config.SystemResolvConfs and the prerm look for this marker:\n%s", installed["etc/resolv.conf"].data)
	}

	// towerd check on the installed files, as towerd.service reads them
	// (-config /etc/towerd/towerd.toml and its towerd.d), with the paths
	// they name taken under the root: the node's files, not this machine's.
	etc := filepath.Join(t.TempDir(), "towerd")
	if err := os.MkdirAll(filepath.Join(etc, "towerd.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	underRoot := func(s string) string { return strings.ReplaceAll(s, `resolv_conf = "/`, `resolv_conf = "`+root+`/`) }
	for name, data := range map[string]string{
		"towerd.toml":              installed["etc/towerd/towerd.toml"].data,
		"towerd.d/00-install.toml": underRoot(dropIn),
	} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err = run("check", "-config", filepath.Join(etc, "towerd.toml"))
	if err != nil || !regexp.MustCompile(`(?m)^  zone \. +-> 10\.1\.0\.2:53, 10\.1\.0\.3:53$`).MatchString(out) ||
		!strings.Contains(out, "(zone \".\" servers from "+root+"/run/towerd-dhclient/resolv.conf") ||
		!strings.Contains(out, "(read over "+filepath.Join(etc, "towerd.toml")+": "+filepath.Join(etc, "towerd.d/00-install.toml")+")") {
		t.Errorf("towerd check on the installed config: %v\n%s%s", err, out, errOut)
	}

	out, errOut, err = run("install", "--root", root)
	if err != nil || !strings.Contains(out, "nothing to change") {
		t.Errorf("second install: %v\n%s%s", err, out, errOut)
	}
	sameTree(t, "after the second install", installed, treeState(t, root), true)

	out, errOut, err = run("uninstall", "--root", root)
	if err != nil || errOut != "" {
		t.Fatalf("towerd uninstall: %v\n%s%s", err, out, errOut)
	}
	sameTree(t, "after uninstall", before, treeState(t, root), false)
	// The node's resolver is no longer towerd: the package goes.
	dpkg("-r", "towerd")
}
