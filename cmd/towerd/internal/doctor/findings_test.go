package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
)

func TestCleanNodeHasNoFindings(t *testing.T) {
	t.Parallel()
	r := diagnose(t, cleanNode(t).write(t), Options{})
	expectFindings(t, r)
	if r.Summary.Exit != 0 {
		t.Errorf("exit = %d, want 0", r.Summary.Exit)
	}
}

// Each case changes one thing in the clean node and expects exactly the
// findings that change causes, each with its severity; a case without the
// cause (the "-ok" ones) expects none.
func TestEachFindingAppearsExactlyWithItsCause(t *testing.T) {
	t.Parallel()
	const dhclientScript = "#!/bin/sh\nrun_hookdir /etc/dhcp/dhclient-enter-hooks.d\n"
	withConfig := func(toml string) func(*fixture) {
		// Before the [[zone]] table, so that top-level keys stay top-level.
		return func(f *fixture) { f.files["/etc/towerd/towerd.toml"] = toml + f.files["/etc/towerd/towerd.toml"] }
	}
	resolvConf := func(s string) func(*fixture) {
		return func(f *fixture) { f.files["/etc/resolv.conf"] = s }
	}
	hosts := func(line string) func(*fixture) {
		return func(f *fixture) { f.files["/etc/nsswitch.conf"] = "passwd: files\nhosts: " + line + "\n" }
	}
	resolvedRunning := func(f *fixture) {
		f.dirs = append(f.dirs, "/run/systemd/resolve")
		f.files["/etc/systemd/resolved.conf"] = "[Resolve]\n"
	}
	stubOff := func(f *fixture) {
		f.files["/etc/systemd/resolved.conf.d/towerd.conf"] = "[Resolve]\nDNSStubListener=no\n"
	}
	dhclient := func(f *fixture) {
		f.files["/etc/dhcp/dhclient.conf"] = "request domain-name-servers;\n"
		f.files["/sbin/dhclient-script"] = dhclientScript
		f.files["/var/lib/dhcp/dhclient.eth0.leases"] = "lease {}\n"
		f.dirs = append(f.dirs, "/etc/dhcp/dhclient-enter-hooks.d")
	}
	docker := func(daemonJSON string) func(*fixture) {
		return func(f *fixture) {
			f.files["/usr/bin/dockerd"] = ""
			if daemonJSON != "" {
				f.files[install.DockerDaemonJSON] = daemonJSON
			}
		}
	}
	dnsmasq := func(conf string, enabled bool) func(*fixture) {
		return func(f *fixture) {
			f.files["/usr/sbin/dnsmasq"] = ""
			f.files["/etc/dnsmasq.conf"] = conf
			if enabled {
				f.links["/etc/systemd/system/multi-user.target.wants/dnsmasq.service"] = "/lib/systemd/system/dnsmasq.service"
			}
		}
	}
	uninstalled := func(f *fixture) {
		for _, p := range towerdPaths {
			delete(f.files, p)
		}
		delete(f.files, "/etc/towerd/towerd.toml")
		delete(f.files, "/etc/systemd/system/towerd.socket")
	}
	followResolved := func(dns string) func(*fixture) {
		return func(f *fixture) {
			resolvedRunning(f)
			stubOff(f)
			f.files["/etc/towerd/towerd.toml"] = ""
			f.files["/run/systemd/resolve/resolv.conf"] = "nameserver 127.0.0.1\n"
			if dns != "" {
				f.files["/etc/systemd/resolved.conf.d/dns.conf"] = "[Resolve]\nDNS=" + dns + "\n"
			}
		}
	}
	all := func(changes ...func(*fixture)) func(*fixture) {
		return func(f *fixture) {
			for _, c := range changes {
				c(f)
			}
		}
	}
	cases := []struct {
		name   string
		change func(*fixture)
		want   []string
	}{
		// resolv.conf
		{"resolv.conf missing", func(f *fixture) { delete(f.files, "/etc/resolv.conf") },
			[]string{"resolv-conf-unreadable:warning"}},
		{"resolv.conf a dangling link", func(f *fixture) {
			delete(f.files, "/etc/resolv.conf")
			f.links["/etc/resolv.conf"] = "../run/systemd/resolve/stub-resolv.conf"
		}, []string{"resolv-conf-unreadable:warning"}},
		{"resolv.conf names the shared resolver", resolvConf("nameserver 10.0.0.2\n"),
			[]string{"resolv-conf-bypasses-towerd:problem", "resolver-timeout-long:warning"}},
		{"resolv.conf names resolved's stub", resolvConf("nameserver 127.0.0.53\noptions timeout:1\n"),
			[]string{"resolv-conf-bypasses-towerd:problem"}},
		{"resolv.conf without nameservers: glibc asks 127.0.0.1", resolvConf("search corp.example\n"),
			[]string{"search-list-cost:info"}},
		{"servers after towerd", resolvConf(towerdResolvConf + "nameserver 10.0.0.2\n"),
			[]string{"resolv-conf-fallback-servers:warning"}},
		{"rotate", resolvConf(towerdResolvConf + "nameserver 10.0.0.2\noptions rotate\n"),
			[]string{"resolv-conf-fallback-servers:warning", "resolv-conf-rotate:problem"}},
		{"rotate-ok: towerd alone", resolvConf(towerdResolvConf + "options rotate\n"), nil},
		{"clients give up first", resolvConf(towerdResolvConf + "options timeout:1 attempts:1\n"),
			[]string{"resolver-gives-up-before-towerd:problem"}},
		{"clients give up first-ok: 1 s × 2", resolvConf(towerdResolvConf + "options timeout:1 attempts:2\n"), nil},
		{"single-request through towerd", resolvConf(towerdResolvConf + "options single-request\n"),
			[]string{"resolver-single-request:info"}},
		{"single-request to the shared resolver", resolvConf("nameserver 10.0.0.2\noptions single-request-reopen timeout:1\n"),
			[]string{"resolv-conf-bypasses-towerd:problem", "resolver-single-request:warning"}},
		{"search list, ndots:1", resolvConf(towerdResolvConf + "search corp.example ec2.internal\n"),
			[]string{"search-list-cost:info"}},
		{"search list, ndots:5", all(resolvConf(towerdResolvConf+"search corp.example ec2.internal\noptions ndots:5\n"),
			withConfig("[search]\nenabled = false\n")), []string{"search-list-cost:warning"}},
		{"search list, ndots:5, towerd's search-list rules on", resolvConf(towerdResolvConf + "search corp.example ec2.internal\noptions ndots:5\n"),
			[]string{"search-list-cost:info"}},
		{"ndots:5 without a search list", resolvConf(towerdResolvConf + "options ndots:5\n"), nil},

		// nsswitch.conf
		{"nss-resolve first, resolved running", all(hosts("files resolve [!UNAVAIL=return] dns"), resolvedRunning, stubOff),
			[]string{"nsswitch-bypasses-towerd:problem"}},
		{"nss-resolve first-ok: no resolved on the node", hosts("files resolve [!UNAVAIL=return] dns"), nil},
		{"no dns in hosts:", hosts("files myhostname"), []string{"nsswitch-bypasses-towerd:problem"}},
		{"dns before files", hosts("dns files"), []string{"nsswitch-files-after-dns:warning"}},
		{"no files", hosts("dns"), []string{"nsswitch-files-after-dns:warning"}},
		{"mdns falls through", hosts("files mdns4_minimal dns"), []string{"nsswitch-mdns-falls-through:warning"}},
		{"mdns-ok: NOTFOUND=return", hosts("files mdns4_minimal [NOTFOUND=return] dns"), nil},

		// the plumbing
		{"dhclient without towerd's hook", dhclient, []string{"resolv-conf-manager-reclaims:warning"}},
		{"dhclient-ok: with the hook", all(dhclient, func(f *fixture) { f.files[install.DhclientHook] = "make_resolv_conf() { :; }\n" }), nil},
		{"Docker without dns", docker("{}\n"), []string{"docker-bypasses-towerd:warning"}},
		{"Docker without daemon.json", docker(""), []string{"docker-bypasses-towerd:warning"}},
		{"Docker dns on docker0, towerd not there", docker(`{"dns": ["172.17.0.1"]}`), []string{"docker-dns-unanswered:problem"}},
		{"Docker-ok: dns on docker0, towerd there", all(docker(`{"dns": ["172.17.0.1"]}`),
			withConfig("listen = [\"127.0.0.1:53\", \"172.17.0.1:53\"]\nallow = [\"127.0.0.0/8\", \"172.17.0.0/16\"]\n")), nil},
		{"resolved's stub on", resolvedRunning, []string{"resolved-stub-listening:warning"}},
		{"resolved's stub-ok: off", all(resolvedRunning, stubOff), nil},
		{"resolved forwards to towerd, which follows it", followResolved("127.0.0.1"),
			[]string{"resolved-forwards-to-towerd:problem", "towerd-root-zone-empty:problem"}},
		{"resolved forwards-ok: to the shared resolver", all(followResolved("10.0.0.2"), func(f *fixture) {
			f.files["/run/systemd/resolve/resolv.conf"] = "nameserver 10.0.0.2\n"
		}), nil},
		{"dnsmasq enabled", dnsmasq("server=/consul/127.0.0.1#8600\n", true), []string{"dnsmasq-serves-dns:problem"}},
		{"dnsmasq running", all(dnsmasq("", false), func(f *fixture) { f.files["/run/dnsmasq/dnsmasq.pid"] = "99\n" }),
			[]string{"dnsmasq-serves-dns:problem"}},
		{"dnsmasq-ok: installed, not enabled", dnsmasq("", false), nil},
		{"dnsmasq-ok: port=0", dnsmasq("port=0\ndhcp-range=10.0.0.10,10.0.0.99\n", true), nil},

		// towerd itself
		{"towerd not installed", uninstalled, []string{"towerd-not-installed:problem"}},
		{"towerd not installed, resolver direct", all(uninstalled, resolvConf("nameserver 10.0.0.2\n")),
			[]string{"towerd-not-installed:problem", "resolver-timeout-long:warning"}},
		{"config invalid", withConfig("[cache]\nsize = -1\n"), []string{"towerd-config-invalid:problem"}},
		{"config with an unknown key", withConfig("bogus = 1\n"), []string{"towerd-config-invalid:problem"}},
		{"serve-stale off", withConfig("[serve_stale]\nenabled = false\n"), []string{"towerd-serve-stale-off:problem"}},
		{"state_dir empty", withConfig("state_dir = \"\"\n"), []string{"towerd-state-dir:warning"}},
		{"state_dir missing", withConfig("state_dir = \"/srv/towerd\"\n"), []string{"towerd-state-dir:warning"}},
		{"state_dir-ok: there", all(withConfig("state_dir = \"/srv/towerd\"\n"), func(f *fixture) { f.dirs = append(f.dirs, "/srv/towerd") }), nil},
		{"state_dir-ok: systemd's link for a DynamicUser=", func(f *fixture) {
			f.dirs = append(f.dirs, "/var/lib/private/towerd")
			f.links["/var/lib/towerd"] = "private/towerd"
		}, nil},
		{"state_dir a link to a directory without write access", func(f *fixture) {
			f.files["/var/lib/private/towerd/.keep"] = ""
			f.links["/var/lib/towerd"] = "private/towerd"
			f.readOnlyDirs = append(f.readOnlyDirs, "/var/lib/private/towerd")
		}, []string{"towerd-state-dir:warning"}},
		{"state_dir a file", all(withConfig("state_dir = \"/srv/towerd\"\n"), func(f *fixture) { f.files["/srv/towerd"] = "" }),
			[]string{"towerd-state-dir:warning"}},
		{"state_dir-ok: default without the unit's StateDirectory but there", all(func(f *fixture) {
			f.files["/etc/systemd/system/towerd.service"] = strings.ReplaceAll(f.files["/etc/systemd/system/towerd.service"], "StateDirectory=towerd\n", "")
		}, func(f *fixture) { f.dirs = append(f.dirs, "/var/lib/towerd") }), nil},
		{"state_dir default without the unit's StateDirectory", func(f *fixture) {
			f.files["/etc/systemd/system/towerd.service"] = strings.ReplaceAll(f.files["/etc/systemd/system/towerd.service"], "StateDirectory=towerd\n", "")
		}, []string{"towerd-state-dir:warning"}},
		{"socket not enabled", func(f *fixture) { delete(f.links, socketWants) }, []string{"towerd-socket-not-enabled:problem"}},
		{"consul zone off the node", withConfig("[[zone]]\nname = \"consul.\"\nservers = [\"10.0.0.9:8600\"]\n"),
			[]string{"towerd-consul-not-local:warning"}},
		{"consul watch off the node", withConfig("[consul]\naddress = \"10.0.0.9:8500\"\n"), []string{"towerd-consul-not-local:warning"}},
		{"consul-ok: unix socket agent", withConfig("[consul]\naddress = \"unix:///run/consul/http.sock\"\n"), nil},
		{"zone . follows a missing file", func(f *fixture) {
			f.files["/etc/towerd/towerd.toml"] = "resolv_conf = \"/run/towerd-dhclient/resolv.conf\"\n"
		}, []string{"towerd-root-zone-empty:problem"}},
		{"zone . follows towerd's own resolv.conf alone", func(f *fixture) { f.files["/etc/towerd/towerd.toml"] = "" },
			[]string{"towerd-root-zone-empty:problem"}},
		{"zone .-ok: follows the backup install kept", func(f *fixture) {
			f.files["/etc/towerd/towerd.toml"] = ""
			f.files["/etc/resolv.pre-towerd-backup.conf"] = "nameserver 10.0.0.2\n"
		}, nil},
		{"zone . servers only towerd", withConfig("listen = [\"10.0.0.2:53\"]\n"),
			[]string{"towerd-root-zone-empty:problem", "resolv-conf-bypasses-towerd:problem"}},
		{"drop-in over the config", func(f *fixture) {
			f.files["/etc/towerd/towerd.d/50-ops.toml"] = "[serve_stale]\nenabled = false\n"
		}, []string{"towerd-serve-stale-off:problem"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := cleanNode(t)
			c.change(&f)
			r := diagnose(t, f.write(t), Options{})
			expectFindings(t, r, c.want...)
			wantExit := 0
			for _, w := range c.want {
				switch {
				case strings.HasSuffix(w, ":problem"):
					wantExit = 2
				case strings.HasSuffix(w, ":warning") && wantExit == 0:
					wantExit = 1
				}
			}
			if r.Summary.Exit != wantExit {
				t.Errorf("exit = %d, want %d", r.Summary.Exit, wantExit)
			}
		})
	}
}

// A FIFO, /dev/zero or an 8 GiB file in place of any file doctor reads:
// doctor finishes, says what it could not read, and reads no more than
// its bound.
func TestHostileFilesUnderTheRoot(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/towerd/towerd.toml",
		"/etc/towerd/towerd.d/10-x.toml", "/etc/systemd/resolved.conf", "/etc/docker/daemon.json", "/etc/hosts"} {
		for _, kind := range []string{"fifo", "zero", "huge"} {
			t.Run(kind+name, func(t *testing.T) {
				t.Parallel()
				f := cleanNode(t)
				delete(f.files, name)
				root := f.write(t)
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				switch kind {
				case "fifo":
					mkfifo(t, p)
				case "zero":
					if err := os.Symlink("/dev/zero", p); err != nil {
						t.Fatal(err)
					}
					mkzero(t, root)
				case "huge":
					if err := os.WriteFile(p, nil, 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(p, 8<<30); err != nil {
						t.Fatal(err)
					}
				}
				r := diagnose(t, root, Options{})
				want := map[string]string{
					"/etc/resolv.conf":               "resolv-conf-unreadable",
					"/etc/towerd/towerd.toml":        "towerd-config-invalid",
					"/etc/towerd/towerd.d/10-x.toml": "towerd-config-invalid",
				}[name]
				if want != "" {
					f := finding(t, r, want)
					if f.Severity != Problem {
						t.Errorf("%s: severity %v, want problem", want, f.Severity)
					}
				}
			})
		}
	}
}
