package doctor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

// The four kinds of node install knows (systemd's nodes_test.go, issue
// 14), trimmed to what their detection reads, each with and without
// Docker: doctor before towerd is installed, then after a real install
// under the same root (and `systemctl enable towerd.socket`, which
// install leaves to the operator). What is left after install is what
// install cannot settle alone.

func nodeKind(kind string, docker bool) fixture {
	f := fixture{files: map[string]string{}, links: map[string]string{}, modes: map[string]os.FileMode{}}
	// resolved's stub in resolv.conf, its uplink file with the DHCP servers.
	resolved := func(search, servers string) {
		f.links["/etc/resolv.conf"] = "../run/systemd/resolve/stub-resolv.conf"
		f.files["/run/systemd/resolve/stub-resolv.conf"] = "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch " + search + "\n"
		f.files["/run/systemd/resolve/resolv.conf"] = servers + "search " + search + "\n"
		f.files["/lib/systemd/system/systemd-resolved.service"] = "[Unit]\n"
	}
	// dhclient with Debian's dhclient-script.
	dhclient := func(conf string) {
		f.files["/etc/dhcp/dhclient.conf"] = conf
		f.files["/sbin/dhclient-script"] = "#!/bin/sh\n"
		f.files["/etc/dhcp/dhclient-enter-hooks.d/debug"] = "RUN=\"no\"\n"
	}
	switch kind {
	case "debian12-resolved":
		resolved("corp.example", "nameserver 10.0.0.2\nnameserver 10.0.0.3\n")
		f.files["/etc/systemd/resolved.conf"] = "[Resolve]\n#DNS=\n#DNSStubListener=yes\n"
		f.links["/etc/systemd/system/sysinit.target.wants/systemd-resolved.service"] = "/lib/systemd/system/systemd-resolved.service"
		f.files["/etc/nsswitch.conf"] = "passwd: files systemd\nhosts:          files resolve [!UNAVAIL=return] dns myhostname\n"
	case "ubuntu-networkmgr":
		resolved("lan", "nameserver 192.168.1.1\n")
		f.files["/etc/systemd/resolved.conf"] = "[Resolve]\n"
		f.files["/etc/NetworkManager/NetworkManager.conf"] = "[main]\nplugins=ifupdown,keyfile\n"
		f.files["/run/NetworkManager/no-stub-resolv.conf"] = "search lan\nnameserver 192.168.1.1\n"
		f.files["/lib/systemd/system/NetworkManager.service"] = "[Unit]\n"
		f.links["/etc/systemd/system/multi-user.target.wants/NetworkManager.service"] = "/lib/systemd/system/NetworkManager.service"
		f.files["/etc/nsswitch.conf"] = "hosts:          files mdns4_minimal [NOTFOUND=return] dns\n"
	case "dhclient-plain":
		f.files["/etc/resolv.conf"] = "domain corp.example\nsearch corp.example lab.corp.example\nnameserver 10.1.0.2\nnameserver 10.1.0.3\n"
		dhclient("request domain-name-servers, domain-search;\n")
		f.files["/var/lib/dhcp/dhclient.eth0.leases"] = "lease {}\n"
		f.files["/etc/nsswitch.conf"] = "hosts:          files dns\n"
	case "consul-dnsmasq":
		f.files["/etc/resolv.conf"] = "domain ec2.internal\nsearch ec2.internal\nnameserver 127.0.0.1\nnameserver 10.2.0.2\n"
		dhclient("prepend domain-name-servers 127.0.0.1;\n")
		f.files["/etc/network/interfaces"] = "auto eth0\niface eth0 inet dhcp\n"
		f.files["/etc/dnsmasq.conf"] = "#port=5353\n"
		f.files["/etc/dnsmasq.d/10-consul"] = "server=/consul/127.0.0.1#8600\n"
		f.files["/usr/sbin/dnsmasq"] = ""
		f.files["/lib/systemd/system/dnsmasq.service"] = "[Unit]\n"
		f.links["/etc/systemd/system/multi-user.target.wants/dnsmasq.service"] = "/lib/systemd/system/dnsmasq.service"
		f.files["/etc/nsswitch.conf"] = "hosts:          files dns\n"
	default:
		panic(kind)
	}
	if docker {
		f.files[install.DockerDaemonJSON] = "{\n  \"live-restore\": true\n}\n"
		f.files["/usr/bin/dockerd"] = ""
	}
	f.files["/etc/hosts"] = "127.0.0.1 localhost\n"
	return f
}

// installOn runs towerd install under root, as `towerd install [--docker]`
// does, then enables the socket as systemctl would.
func installOn(t *testing.T, root string, docker bool) {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "towerd")
	if err := os.WriteFile(binary, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := install.Install(install.InstallOptions{Root: root, Binary: binary, Docker: docker})
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	wants := filepath.Join(root, socketWants)
	if err := os.MkdirAll(filepath.Dir(wants), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/systemd/system/towerd.socket", wants); err != nil {
		t.Fatal(err)
	}
}

func TestNodeKindsBeforeAndAfterInstall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind          string
		docker        bool
		before, after []string
	}{
		{"debian12-resolved", false,
			[]string{"towerd-not-installed:problem", "search-list-cost:info"},
			[]string{"search-list-cost:info"}},
		{"ubuntu-networkmgr", false,
			[]string{"towerd-not-installed:problem", "search-list-cost:info"},
			[]string{"search-list-cost:info"}},
		{"dhclient-plain", false,
			[]string{"towerd-not-installed:problem", "search-list-cost:info", "resolver-timeout-long:warning"},
			[]string{"search-list-cost:info"}},
		// install leaves stopping dnsmasq to the operator (it prints the
		// command): doctor says so until it is done.
		{"consul-dnsmasq", false,
			[]string{"towerd-not-installed:problem", "search-list-cost:info"},
			[]string{"search-list-cost:info", "dnsmasq-serves-dns:problem"}},
		{"dhclient-plain", true,
			[]string{"towerd-not-installed:problem", "search-list-cost:info", "resolver-timeout-long:warning"},
			[]string{"search-list-cost:info"}},
		{"debian12-resolved", true,
			[]string{"towerd-not-installed:problem", "search-list-cost:info"},
			[]string{"search-list-cost:info"}},
	}
	for _, c := range cases {
		name := c.kind
		if c.docker {
			name += "+docker"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := nodeKind(c.kind, c.docker).write(t)
			expectFindings(t, diagnose(t, root, Options{}), c.before...)
			installOn(t, root, c.docker)
			expectFindings(t, diagnose(t, root, Options{}), c.after...)
		})
	}
	// Installed without --docker, Docker's containers are left out, and
	// doctor says so.
	t.Run("dhclient-plain+docker, install without --docker", func(t *testing.T) {
		t.Parallel()
		root := nodeKind("dhclient-plain", true).write(t)
		installOn(t, root, false)
		expectFindings(t, diagnose(t, root, Options{}), "search-list-cost:info", "docker-bypasses-towerd:warning")
	})
}
