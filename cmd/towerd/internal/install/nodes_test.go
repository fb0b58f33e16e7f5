package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// Scratch roots built like the four kinds of node that run Consul today
// (issue 14), each with and without Docker. File contents are what the
// distributions and tools ship, trimmed of comment blocks that change
// nothing.

type nodeKind string

const (
	nodeDebianResolved nodeKind = "debian12-resolved" // (a) systemd-resolved + nss-resolve
	nodeUbuntuNM       nodeKind = "ubuntu-networkmgr" // (b) NetworkManager pushing to resolved
	nodeDhclient       nodeKind = "dhclient-plain"    // (c) ifupdown + dhclient, plain resolv.conf
	nodeConsulDnsmasq  nodeKind = "consul-dnsmasq"    // (d) HashiCorp's dnsmasq recipe
)

var nodeKinds = []nodeKind{nodeDebianResolved, nodeUbuntuNM, nodeDhclient, nodeConsulDnsmasq}

// nodeCase is one of the eight fixtures.
type nodeCase struct {
	kind   nodeKind
	docker bool
}

func (c nodeCase) String() string {
	if c.docker {
		return string(c.kind) + "+docker"
	}
	return string(c.kind)
}

func allNodeCases() []nodeCase {
	var cs []nodeCase
	for _, k := range nodeKinds {
		cs = append(cs, nodeCase{k, false}, nodeCase{k, true})
	}
	return cs
}

// nodeTree is a root: regular files and symlinks by node path.
type nodeTree struct {
	files map[string]string
	links map[string]string
	modes map[string]os.FileMode
}

func (tr nodeTree) write(t *testing.T, root string) {
	t.Helper()
	for name, content := range tr.files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if m, ok := tr.modes[name]; ok {
			mode = m
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range tr.links {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}

const resolvedStubHeader = `# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).
# Do not edit.
#
# This file might be symlinked as /etc/resolv.conf. If you're looking at
# /etc/resolv.conf and seeing this text, you have followed the symlink.
#
# This is a dynamic resolv.conf file for connecting local clients to the
# internal DNS stub resolver of systemd-resolved. This file lists all
# configured search domains.
#
# Run "resolvectl status" to see details about the uplink DNS servers
# currently in use.
#
# Third party programs should typically not access this file directly, but only
# through the symlink at /etc/resolv.conf. To manage man:resolv.conf(5) in a
# different way, replace this symlink by a static file or a different symlink.
#
# See man:systemd-resolved.service(8) for details about the supported modes of
# operation for /etc/resolv.conf.

`

const resolvedUplinkHeader = `# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).
# Do not edit.
#
# This file might be symlinked as /etc/resolv.conf. If you're looking at
# /etc/resolv.conf and seeing this text, you have followed the symlink.
#
# This is a dynamic resolv.conf file for connecting local clients directly to
# all known uplink DNS servers. This file lists all configured search domains.
#
# Third party programs should typically not access this file directly, but only
# through the symlink at /etc/resolv.conf. To manage man:resolv.conf(5) in a
# different way, replace this symlink by a static file or a different symlink.
#
# See man:systemd-resolved.service(8) for details about the supported modes of
# operation for /etc/resolv.conf.

`

const debianNsswitchResolve = `# /etc/nsswitch.conf
#
# Example configuration of GNU Name Service Switch functionality.
# If you have the ` + "`glibc-doc-reference' and `info'" + ` packages installed, try:
# ` + "`info libc \"Name Service Switch\"'" + ` for information about this file.

passwd:         files systemd
group:          files systemd
shadow:         files systemd
gshadow:        files systemd

hosts:          files resolve [!UNAVAIL=return] dns myhostname
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
`

const ubuntuNsswitch = `# /etc/nsswitch.conf
#
# Example configuration of GNU Name Service Switch functionality.
# If you have the ` + "`glibc-doc-reference' and `info'" + ` packages installed, try:
# ` + "`info libc \"Name Service Switch\"'" + ` for information about this file.

passwd:         files systemd
group:          files systemd
shadow:         files
gshadow:        files

hosts:          files mdns4_minimal [NOTFOUND=return] dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
`

const plainNsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files

hosts:          files dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
`

const debianDhclientConf = `# Configuration file for /sbin/dhclient.
#
# This is a sample configuration file for dhclient. See dhclient.conf's
#	man page for more information about the syntax of this file
#	and a more comprehensive list of the parameters understood by
#	dhclient.

option rfc3442-classless-static-routes code 121 = array of unsigned integer 8;

send host-name = gethostname();
request subnet-mask, broadcast-address, time-offset, routers,
	domain-name, domain-name-servers, domain-search, host-name,
	dhcp6.name-servers, dhcp6.domain-search, dhcp6.fqdn, dhcp6.sntp-servers,
	netbios-name-servers, netbios-scope, interface-mtu,
	rfc3442-classless-static-routes, ntp-servers;
`

// HashiCorp's "Forward DNS for Consul service discovery" recipe for
// dnsmasq, on a node whose dhclient puts dnsmasq first in resolv.conf.
const consulDnsmasqConf = `# Enable forward lookup of the 'consul' domain:
server=/consul/127.0.0.1#8600

# Uncomment and modify as appropriate to enable reverse DNS lookups for
# common netblocks found in RFC 1918, 5735, and 6598:
#rev-server=0.0.0.0/8,127.0.0.1#8600
#rev-server=10.0.0.0/8,127.0.0.1#8600
#rev-server=100.64.0.0/10,127.0.0.1#8600
#rev-server=127.0.0.1/8,127.0.0.1#8600
#rev-server=169.254.0.0/16,127.0.0.1#8600
#rev-server=172.16.0.0/12,127.0.0.1#8600
#rev-server=192.168.0.0/16,127.0.0.1#8600
#rev-server=224.0.0.0/4,127.0.0.1#8600
#rev-server=240.0.0.0/4,127.0.0.1#8600
`

// The lines of Debian's /sbin/dhclient-script that run the hooks.
const debianDhclientScript = `#!/bin/sh
run_hook() {
    local script="$1"
    if [ -f $script ]; then
        . $script
    fi
}
run_hookdir() {
    local dir="$1"
    if [ -d "$dir" ]; then
        for script in $(run-parts --list $dir); do
            run_hook $script || true
        done
    fi
}
run_hook /etc/dhcp/dhclient-enter-hooks
run_hookdir /etc/dhcp/dhclient-enter-hooks.d
`

const dockerDaemonJSON = `{
  "log-driver": "json-file",
  "log-opts": {
    "max-size": "10m",
    "max-file": "3"
  },
  "live-restore": true
}
`

// nodeTreeFor builds the tree of one fixture.
func nodeTreeFor(c nodeCase) nodeTree {
	tr := nodeTree{files: map[string]string{}, links: map[string]string{}, modes: map[string]os.FileMode{}}
	f, l := tr.files, tr.links
	switch c.kind {
	case nodeDebianResolved:
		l["/etc/resolv.conf"] = "../run/systemd/resolve/stub-resolv.conf"
		f["/run/systemd/resolve/stub-resolv.conf"] = resolvedStubHeader +
			"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.example\n"
		f["/run/systemd/resolve/resolv.conf"] = resolvedUplinkHeader +
			"nameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example\n"
		f["/etc/systemd/resolved.conf"] = "#  This file is part of systemd.\n[Resolve]\n#DNS=\n#FallbackDNS=\n#Domains=\n#DNSStubListener=yes\n"
		f["/lib/systemd/system/systemd-resolved.service"] = "[Unit]\nDescription=Network Name Resolution\n"
		l["/etc/systemd/system/sysinit.target.wants/systemd-resolved.service"] = "/lib/systemd/system/systemd-resolved.service"
		f["/etc/systemd/network/20-wired.network"] = "[Match]\nName=en*\n\n[Network]\nDHCP=yes\n"
		f["/etc/nsswitch.conf"] = debianNsswitchResolve
	case nodeUbuntuNM:
		l["/etc/resolv.conf"] = "../run/systemd/resolve/stub-resolv.conf"
		f["/run/systemd/resolve/stub-resolv.conf"] = resolvedStubHeader +
			"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n"
		f["/run/systemd/resolve/resolv.conf"] = resolvedUplinkHeader +
			"nameserver 192.168.1.1\nnameserver fd00::1\nsearch lan\n"
		f["/etc/systemd/resolved.conf"] = "[Resolve]\n#DNS=\n"
		f["/lib/systemd/system/systemd-resolved.service"] = "[Unit]\nDescription=Network Name Resolution\n"
		f["/etc/NetworkManager/NetworkManager.conf"] = "[main]\nplugins=ifupdown,keyfile\n\n[ifupdown]\nmanaged=false\n\n[device]\nwifi.scan-rand-mac-address=no\n"
		f["/usr/lib/NetworkManager/conf.d/10-globally-managed-devices.conf"] = "[keyfile]\nunmanaged-devices=*,except:type:wifi,except:type:gsm,except:type:cdma\n"
		f["/run/NetworkManager/resolv.conf"] = "# Generated by NetworkManager\nsearch lan\nnameserver 127.0.0.53\noptions edns0 trust-ad\n"
		f["/run/NetworkManager/no-stub-resolv.conf"] = "# Generated by NetworkManager\nsearch lan\nnameserver 192.168.1.1\nnameserver fd00::1\n"
		f["/usr/sbin/NetworkManager"] = ""
		f["/lib/systemd/system/NetworkManager.service"] = "[Unit]\nDescription=Network Manager\n"
		l["/etc/systemd/system/multi-user.target.wants/NetworkManager.service"] = "/lib/systemd/system/NetworkManager.service"
		f["/etc/nsswitch.conf"] = ubuntuNsswitch
	case nodeDhclient:
		f["/etc/resolv.conf"] = "domain corp.example\nsearch corp.example lab.corp.example\nnameserver 10.1.0.2\nnameserver 10.1.0.3\n"
		f["/etc/dhcp/dhclient.conf"] = debianDhclientConf
		f["/sbin/dhclient"] = ""
		f["/sbin/dhclient-script"] = debianDhclientScript
		f["/etc/dhcp/dhclient-enter-hooks.d/debug"] = "RUN=\"no\"\n"
		f["/etc/dhcp/dhclient-exit-hooks.d/rfc3442-classless-routes"] = "# set classless routes\n"
		f["/etc/network/interfaces"] = "source /etc/network/interfaces.d/*\n\nauto lo\niface lo inet loopback\n\nallow-hotplug eth0\niface eth0 inet dhcp\n"
		f["/var/lib/dhcp/dhclient.eth0.leases"] = "lease {\n  interface \"eth0\";\n  option domain-name-servers 10.1.0.2,10.1.0.3;\n}\n"
		f["/etc/nsswitch.conf"] = plainNsswitch
	case nodeConsulDnsmasq:
		f["/etc/resolv.conf"] = "domain ec2.internal\nsearch ec2.internal\nnameserver 127.0.0.1\nnameserver 10.2.0.2\n"
		f["/etc/dhcp/dhclient.conf"] = debianDhclientConf + "prepend domain-name-servers 127.0.0.1;\n"
		f["/sbin/dhclient"] = ""
		f["/sbin/dhclient-script"] = debianDhclientScript
		f["/etc/dhcp/dhclient-enter-hooks.d/debug"] = "RUN=\"no\"\n"
		f["/etc/network/interfaces"] = "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n"
		f["/etc/dnsmasq.conf"] = "# Configuration file for dnsmasq.\n#\n# Format is one option per line, legal options are the same\n# as the long options legal on the command line.\n\n#port=5353\n#no-resolv\n#listen-address=\n"
		f["/etc/dnsmasq.d/10-consul"] = consulDnsmasqConf
		f["/etc/dnsmasq.d/README"] = "# All files in this directory will be read by dnsmasq as\n# configuration files, except if their names end in\n# \".dpkg-dist\",\".dpkg-old\" or \".dpkg-new\"\n"
		f["/etc/default/dnsmasq"] = "# This file has five functions:\nENABLED=1\nCONFIG_DIR=/etc/dnsmasq.d,.dpkg-dist,.dpkg-old,.dpkg-new\n"
		f["/usr/sbin/dnsmasq"] = ""
		f["/lib/systemd/system/dnsmasq.service"] = "[Unit]\nDescription=dnsmasq - A lightweight DHCP and caching DNS server\n"
		l["/etc/systemd/system/multi-user.target.wants/dnsmasq.service"] = "/lib/systemd/system/dnsmasq.service"
		f["/etc/nsswitch.conf"] = plainNsswitch
	default:
		panic(fmt.Sprintf("unknown node kind %q", c.kind))
	}
	if c.docker {
		f["/etc/docker/daemon.json"] = dockerDaemonJSON
		f["/usr/bin/dockerd"] = ""
		f["/lib/systemd/system/docker.service"] = "[Unit]\nDescription=Docker Application Container Engine\n"
		l["/etc/systemd/system/multi-user.target.wants/docker.service"] = "/lib/systemd/system/docker.service"
	}
	for name := range f {
		if strings.HasPrefix(name, "/sbin/") || strings.HasPrefix(name, "/usr/sbin/") || strings.HasPrefix(name, "/usr/bin/") {
			tr.modes[name] = 0o755
		}
	}
	return tr
}

// buildNode writes fixture c under a fresh temporary root and opens it.
func buildNode(t *testing.T, c nodeCase) (string, *nodefs.Root) {
	t.Helper()
	root := t.TempDir()
	nodeTreeFor(c).write(t, root)
	n, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return root, n
}

func TestDetectorsReadLinksInsideTheRoot(t *testing.T) {
	t.Parallel()
	_, n := buildNode(t, nodeCase{kind: nodeDebianResolved})
	data, err := n.ReadFile("/etc/resolv.conf")
	if err != nil || !strings.Contains(string(data), "nameserver 127.0.0.53") {
		t.Fatalf("reading the stub link: %v %q", err, data)
	}
	if got := linkTarget(n, "/etc/resolv.conf"); got != "/run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("linkTarget = %q", got)
	}
	// An absolute link is taken inside the root, never the host's file.
	root := t.TempDir()
	nodeTree{
		files: map[string]string{"/run/x/resolv.conf": "nameserver 10.9.9.9\n"},
		links: map[string]string{"/etc/resolv.conf": "/run/x/resolv.conf", "/etc/loop": "/etc/loop"},
	}.write(t, root)
	m, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if data, err := m.ReadFile("/etc/resolv.conf"); err != nil || string(data) != "nameserver 10.9.9.9\n" {
		t.Errorf("absolute link: %v %q", err, data)
	}
	if _, err := m.ReadFile("/etc/loop"); err == nil {
		t.Error("a symlink loop was read")
	}
	if _, err := m.ReadFile("/etc/../../../etc/hostname-not-here"); err == nil {
		t.Error("read outside the root")
	}
}

// treeSnapshot is every file and link under root with its content or target.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[p] = "-> " + target
			return err
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			out[p] = fi.Mode().String() + " " + string(data)
			return err
		}
		out[p] = fi.Mode().String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDetectorsOnTheEightNodes runs every detector on every fixture: what
// each finds, and that none of them writes anything.
func TestDetectorsOnTheEightNodes(t *testing.T) {
	t.Parallel()
	for _, c := range allNodeCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			root, n := buildNode(t, c)
			before := treeSnapshot(t, root)

			ns, err := n.ReadFile(NsswitchPath)
			if err != nil {
				t.Fatal(err)
			}
			edit := RewriteNsswitch(ns)
			if edit.Changed != (c.kind == nodeDebianResolved) {
				t.Errorf("nsswitch changed = %v: %q", edit.Changed, edit.Removed)
			}
			if _, err := DetectResolvConfManager(n); err != nil {
				t.Error(err)
			}
			if _, err := PlanDocker(n, true); err != nil {
				t.Error(err)
			}
			if d := DetectDnsmasq(n); d.Present != (c.kind == nodeConsulDnsmasq) {
				t.Errorf("dnsmasq present = %v", d.Present)
			}
			if _, ok := PlanConsulToken(n); ok {
				t.Error("token drop-in without a token file")
			}
			after := treeSnapshot(t, root)
			if len(before) != len(after) {
				t.Fatalf("detection changed the root: %d entries before, %d after", len(before), len(after))
			}
			for p, v := range before {
				if after[p] != v {
					t.Errorf("detection changed %s", p)
				}
			}
		})
	}
}

// TestDetectionAfterInstallFindsTheSame installs by hand what the plans
// say (towerd's resolv.conf over the old one, kept as the backup as
// install keeps it; the planned files; the nsswitch edit) and detects
// again: a second install must plan the same, so it changes nothing.
func TestDetectionAfterInstallFindsTheSame(t *testing.T) {
	t.Parallel()
	for _, c := range allNodeCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			root, n := buildNode(t, c)
			first, err := DetectResolvConfManager(n)
			if err != nil {
				t.Fatal(err)
			}
			firstDnsmasq := DetectDnsmasq(n)

			real := func(p string) string { return filepath.Join(root, p) }
			if err := os.Rename(real(ResolvConfPath), real(ResolvConfBackup)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(real(ResolvConfPath), renderResolvConf(keptResolvConf{SearchLines: []string{"search corp.example"}}), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, f := range first.Files {
				if err := os.MkdirAll(filepath.Dir(real(f.Path)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(real(f.Path), f.Data, f.Mode); err != nil {
					t.Fatal(err)
				}
			}
			ns, _ := os.ReadFile(real(NsswitchPath))
			if err := os.WriteFile(real(NsswitchPath), RewriteNsswitch(ns).Data, 0o644); err != nil {
				t.Fatal(err)
			}

			second, err := DetectResolvConfManager(n)
			if err != nil {
				t.Fatal(err)
			}
			if second.Manager != first.Manager || second.Follow != first.Follow || len(second.Files) != len(first.Files) {
				t.Fatalf("after install: %s follow %q files %q; before: %s follow %q files %q",
					second.Manager, second.Follow, planPaths(second), first.Manager, first.Follow, planPaths(first))
			}
			for i := range first.Files {
				if first.Files[i].Path != second.Files[i].Path || string(first.Files[i].Data) != string(second.Files[i].Data) {
					t.Errorf("%s planned differently after install", first.Files[i].Path)
				}
			}
			if d := DetectDnsmasq(n); strings.Join(d.Evidence, "\n") != strings.Join(firstDnsmasq.Evidence, "\n") {
				t.Errorf("dnsmasq evidence after install:\n%s\nbefore:\n%s", strings.Join(d.Evidence, "\n"), strings.Join(firstDnsmasq.Evidence, "\n"))
			}
			ns, _ = os.ReadFile(real(NsswitchPath))
			if RewriteNsswitch(ns).Changed {
				t.Error("nsswitch.conf would be rewritten again")
			}
		})
	}
}
