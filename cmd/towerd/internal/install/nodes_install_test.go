package install

import (
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/systemd"
	"github.com/towerd/towerd/test/dnstest"
)

// installCase is one fixture installed one way: Docker's flag is tried on
// the fixtures that have Docker, with and without it.
type installCase struct {
	node   nodeCase
	docker bool // --docker
}

func (c installCase) String() string {
	if c.docker {
		return c.node.String() + "/--docker"
	}
	return c.node.String()
}

func allInstallCases() []installCase {
	var cs []installCase
	for _, n := range allNodeCases() {
		cs = append(cs, installCase{node: n})
		if n.docker {
			cs = append(cs, installCase{node: n, docker: true})
		}
	}
	return cs
}

// TestInstallOnTheEightNodes: issue 14's "what it must show" for the
// files. On each fixture, with and without Docker (and --docker), install
// then uninstall leaves the root byte for byte as it was; the report names
// every path install changed; a second install changes nothing; and what
// each kind of node needs is in place.
func TestInstallOnTheEightNodes(t *testing.T) {
	t.Parallel()
	for _, c := range allInstallCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			root, _ := buildNode(t, c.node)
			fsys := rootOf(t, root)
			before := dnstest.Tree(t, root)
			opts := InstallOptions{Binary: fakeBinary(t), Docker: c.docker}

			r := mustInstall(t, fsys, opts)
			installed := dnstest.Tree(t, root)
			reported := map[string]bool{}
			for _, ch := range r.Changes {
				switch ch.Action {
				case "unchanged", "kept", "skipped", "found":
				default:
					reported[strings.TrimSuffix(strings.TrimPrefix(ch.Path, "/"), "/")] = true
					if _, backup, ok := strings.Cut(ch.Detail, "kept as /"); ok && ch.Action == "backed up" {
						reported[backup] = true
					}
				}
			}
			for p, n := range installed {
				if b, ok := before[p]; ok && b == n {
					continue
				}
				if !reported[p] {
					t.Errorf("%s changed (%s) but the report does not name it", p, n.Kind)
				}
			}
			for p := range before {
				if _, ok := installed[p]; !ok && !reported[p] {
					t.Errorf("%s is gone but the report does not name it", p)
				}
			}
			checkNodeInstall(t, c, r, installed)
			// A kill leaves temp files beside what install writes: every
			// directory it writes into is swept.
			m, err := loadManifest(fsys)
			if err != nil || m == nil {
				t.Fatalf("record: %v", err)
			}
			for _, f := range m.Files {
				if !slices.Contains(sweepDirs, pathpkg.Dir(f.Path)) {
					t.Errorf("%s is written in a directory sweepTemps does not look at", f.Path)
				}
			}

			stamps := stampsOf(t, root)
			again := mustInstall(t, fsys, opts)
			if again.Changed() {
				t.Errorf("a second install changes things: %+v", again.Changes)
			}
			dnstest.DiffTrees(t, installed, dnstest.Tree(t, root))
			for p, s := range stampsOf(t, root) {
				if stamps[p] != s {
					t.Errorf("a second install rewrote %s", p)
				}
			}

			u := mustUninstall(t, fsys)
			dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
			if len(u.Warnings) != 0 {
				t.Errorf("uninstall warns: %q", u.Warnings)
			}
			if strings.Join(r.Warnings, "\n") != strings.Join(again.Warnings, "\n") {
				t.Errorf("the second install warns differently:\n%q\n%q", r.Warnings, again.Warnings)
			}
		})
	}
}

// checkNodeInstall asserts what each kind of node needs.
func checkNodeInstall(t *testing.T, c installCase, r *Report, tree map[string]dnstest.Node) {
	t.Helper()
	cfg := tree["etc/towerd/towerd.toml"].Data
	resolv := tree["etc/resolv.conf"].Data
	next := strings.Join(r.Next, "\n")
	wantFollow := map[nodeKind]string{
		nodeDebianResolved: ResolvedUpstreams,
		nodeUbuntuNM:       NMNoStubResolvConf,
		nodeDhclient:       DhclientResolvConf,
		nodeConsulDnsmasq:  DhclientResolvConf,
	}[c.node.kind]
	if !strings.Contains(cfg, `resolv_conf = "`+wantFollow+`"`) || strings.Contains(cfg, "[[zone]]") {
		t.Errorf("towerd.toml does not follow %s:\n%s", wantFollow, cfg)
	}
	if !strings.Contains(resolv, "\nnameserver 127.0.0.1\n") || strings.Count(resolv, "nameserver") != 1 {
		t.Errorf("resolv.conf:\n%s", resolv)
	}
	ns := tree["etc/nsswitch.conf"].Data
	switch c.node.kind {
	case nodeDebianResolved:
		if !strings.Contains(ns, "\nhosts:          files dns myhostname\n") || changeFor(r, NsswitchPath).Action != "wrote" ||
			!strings.Contains(changeFor(r, NsswitchPath).Detail, `"resolve [!UNAVAIL=return]"`) {
			t.Errorf("nsswitch.conf not rewritten (%+v):\n%s", changeFor(r, NsswitchPath), ns)
		}
		if !strings.Contains(resolv, "\nsearch corp.example\noptions edns0 trust-ad\n") {
			t.Errorf("search/options not kept:\n%s", resolv)
		}
	case nodeUbuntuNM:
		if d := tree["etc/NetworkManager/conf.d/99-towerd.conf"]; !strings.Contains(d.Data, "[main]\nrc-manager=unmanaged\n") {
			t.Errorf("NetworkManager drop-in: %+v", d)
		}
		if !strings.Contains(next, "systemctl reload NetworkManager") {
			t.Errorf("next steps lack reloading NetworkManager: %q", r.Next)
		}
	case nodeDhclient, nodeConsulDnsmasq:
		if d := tree["etc/dhcp/dhclient-enter-hooks.d/towerd"]; !strings.Contains(d.Data, "make_resolv_conf()") {
			t.Errorf("dhclient hook: %+v", d)
		}
		seed := tree["run/towerd-dhclient/resolv.conf"]
		if seed.Kind != "file" || !strings.Contains(seed.Data, "nameserver 10.") {
			t.Errorf("followed file not seeded: %+v", seed)
		}
	}
	switch c.node.kind {
	case nodeDhclient:
		// domain before search, as the file had them: the last one wins in
		// glibc, so the order is kept too.
		if !strings.Contains(resolv, "\nnameserver 127.0.0.1\ndomain corp.example\nsearch corp.example lab.corp.example\n") {
			t.Errorf("domain/search not kept:\n%s", resolv)
		}
	case nodeConsulDnsmasq:
		if !strings.Contains(resolv, "\ndomain ec2.internal\nsearch ec2.internal\n") {
			t.Errorf("domain/search not kept:\n%s", resolv)
		}
		stop := strings.Index(next, "systemctl disable --now dnsmasq.service")
		enable := strings.Index(next, "systemctl enable --now towerd.socket")
		if stop < 0 || enable < 0 || stop > enable {
			t.Errorf("dnsmasq's stop must come before towerd's start: %q", r.Next)
		}
		if c := changeFor(r, "dnsmasq"); c.Action != "found" {
			t.Errorf("dnsmasq not reported: %+v", r.Changes)
		}
	}
	daemon := tree["etc/docker/daemon.json"]
	dropIn, hasDropIn := tree["etc/systemd/system/towerd.socket.d/docker0.conf"]
	warned := slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "--docker") })
	switch {
	case c.docker:
		if !strings.Contains(daemon.Data, `"dns": ["172.17.0.1"],`) || !strings.Contains(daemon.Data, `"live-restore": true`) {
			t.Errorf("daemon.json: %s", daemon.Data)
		}
		if !hasDropIn || !strings.Contains(dropIn.Data, "ListenDatagram=172.17.0.1:53\n") {
			t.Errorf("socket drop-in: %+v", dropIn)
		}
		if !strings.Contains(cfg, `allow       = ["127.0.0.0/8", "::1/128", "172.17.0.0/16"]`) || !strings.Contains(cfg, `"172.17.0.1:53"]`) {
			t.Errorf("towerd.toml lacks the bridge:\n%s", cfg)
		}
		if !strings.Contains(next, "systemctl restart docker") || warned {
			t.Errorf("next %q, warnings %q", r.Next, r.Warnings)
		}
	case c.node.docker:
		if daemon.Data != dockerDaemonJSON || hasDropIn || !warned {
			t.Errorf("without --docker Docker must be left alone, with a warning: drop-in %v, warnings %q", hasDropIn, r.Warnings)
		}
	default:
		if hasDropIn || warned {
			t.Errorf("no Docker, yet drop-in %v, warnings %q", hasDropIn, r.Warnings)
		}
	}
}

// TestInstallWithAConsulToken: the LoadCredential= drop-in appears with the
// token file and goes with uninstall; the token itself is never touched.
func TestInstallWithAConsulToken(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeDebianResolved})
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/consul-token": "s3cret\n"})
	if err := os.Chmod(filepath.Join(root, "etc/towerd/consul-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if c := changeFor(r, systemd.ConsulTokenDropIn); c.Action != "wrote" {
		t.Errorf("token drop-in: %+v", c)
	}
	if got := read(t, root, systemd.ConsulTokenDropIn); !strings.Contains(got, "[Service]\nLoadCredential=consul-token:/etc/towerd/consul-token\n") {
		t.Errorf("drop-in:\n%s", got)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestNsswitchSymlinkIsReportedNotWritten: Fedora's authselect links
// nsswitch.conf to a file it regenerates. Install neither writes through
// the link (authselect would undo it) nor replaces it (authselect would
// lose its link): it says so in the report and a warning.
func TestNsswitchSymlinkIsReportedNotWritten(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeDebianResolved})
	if err := os.Remove(filepath.Join(root, "etc/nsswitch.conf")); err != nil {
		t.Fatal(err)
	}
	dnstest.WriteTree(t, root, map[string]string{
		"etc/authselect/nsswitch.conf": debianNsswitchResolve,
		"etc/nsswitch.conf":            "->/etc/authselect/nsswitch.conf",
	})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	after := dnstest.Tree(t, root)
	for _, p := range []string{"etc/nsswitch.conf", "etc/authselect/nsswitch.conf"} {
		if after[p] != before[p] {
			t.Errorf("%s changed: %+v", p, after[p])
		}
	}
	if c := changeFor(r, NsswitchPath); c.Action != "skipped" || !strings.Contains(c.Detail, "symlink to /etc/authselect/nsswitch.conf") {
		t.Errorf("report: %+v", c)
	}
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "authselect") && strings.Contains(w, "resolve") }) {
		t.Errorf("no warning about nss-resolve behind the link: %q", r.Warnings)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestFlagsThatCannotTakeEffect: with an operator's towerd.toml, which
// install keeps, --upstream and an import are refused before anything is
// written; without them the kept file needs no --upstream. --docker
// without Docker is refused too.
func TestFlagsThatCannotTakeEffect(t *testing.T) {
	t.Parallel()
	root, _ := buildNode(t, nodeCase{kind: nodeConsulDnsmasq})
	dnstest.WriteTree(t, root, map[string]string{"etc/towerd/towerd.toml": "[[zone]]\nname = \"consul.\"\nservers = [\"127.0.0.1:8600\"]\n"})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	for name, opts := range map[string]InstallOptions{
		"--upstream":     {Upstreams: []string{"192.0.2.1"}},
		"--from-dnsmasq": {Import: &Import{Source: "dnsmasq"}},
		"--docker":       {Docker: true},
	} {
		opts.Binary = fakeBinary(t)
		if _, err := install(fsys, opts); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("install %s = %v, want a refusal naming the flag", name, err)
		}
		dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
	}
	r := mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t)})
	if c := changeFor(r, ConfigPath); c.Action != "kept" || !strings.Contains(c.Detail, DhclientResolvConf) {
		t.Errorf("config: %+v", c)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}

// TestUpstreamWithAnImport: --upstream pins zone "." under an imported
// configuration that names no servers for it (a static node whose
// resolv.conf names only dnsmasq), and is refused when the import names
// them itself.
func TestUpstreamWithAnImport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dnstest.WriteTree(t, root, map[string]string{"etc/resolv.conf": "nameserver 127.0.0.1\n"})
	fsys := rootOf(t, root)
	before := dnstest.Tree(t, root)
	imported := &Import{Source: "/etc/dnsmasq.conf", Directives: []dnsmasqimport.Directive{
		{File: "/etc/dnsmasq.conf", Line: 1, Name: "server", Value: "/consul/127.0.0.1#8600", Has: true}}}
	namingRoot := &Import{Source: "/etc/dnsmasq.conf", Directives: append(slices.Clone(imported.Directives),
		dnsmasqimport.Directive{File: "/etc/dnsmasq.conf", Line: 2, Name: "server", Value: "192.0.2.9", Has: true})}
	if _, err := install(fsys, InstallOptions{Binary: fakeBinary(t), Import: imported}); err == nil ||
		!strings.Contains(err.Error(), "--upstream") {
		t.Errorf("an import without servers on a node with none = %v, want a hint at --upstream", err)
	}
	if _, err := install(fsys, InstallOptions{Binary: fakeBinary(t), Import: namingRoot, Upstreams: []string{"192.0.2.1"}}); err == nil ||
		!strings.Contains(err.Error(), "--upstream cannot take effect") {
		t.Errorf("--upstream over an import naming \".\" = %v", err)
	}
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
	mustInstall(t, fsys, InstallOptions{Binary: fakeBinary(t), Import: imported, Upstreams: []string{"192.0.2.1"}})
	if cfg := read(t, root, "etc/towerd/towerd.toml"); !strings.Contains(cfg, `servers = ["192.0.2.1:53"]`) || !strings.Contains(cfg, `servers = ["127.0.0.1:8600"]`) {
		t.Errorf("config:\n%s", cfg)
	}
	mustUninstall(t, fsys)
	dnstest.DiffTrees(t, before, dnstest.Tree(t, root))
}
