// Package install is `towerd install` and `towerd uninstall`: it makes
// towerd the node's resolver, and undoes that, by editing files under a root
// directory ("/" for the live system). It finds what maintains resolv.conf
// (systemd-resolved, NetworkManager, resolvconf, dhclient, or nothing: a
// static file) and keeps it from taking /etc/resolv.conf back while towerd
// follows the servers it learns; takes nss-resolve out of nsswitch.conf;
// detects Docker and dnsmasq; uses towerd's Debian package where the node has
// it; writes the program, the units (package systemd), towerd.toml and the
// drop-ins; and with --activate starts towerd and rolls everything back when
// it does not answer. Every decision is one line of a Report; every change is
// recorded before it is made, so uninstall undoes exactly that.
//
// The detectors (DetectResolvConfManager, DetectDnsmasq, PlanDocker) only
// read, through the node's files opened with OpenNodeRoot, and serve tools
// that inspect a node without changing it.
package install

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/towerd/towerd/systemd"
	"github.com/towerd/towerd/upstream"
)

// InstallOptions say where and what to install.
type InstallOptions struct {
	// Root is the directory that stands for "/"; "" or "/" is this machine.
	Root string
	// Binary is the towerd executable copied to /usr/local/bin/towerd,
	// unless the root has towerd's Debian package, whose program and units
	// are then used as they are.
	Binary string
	// Upstreams, when set, become zone "."'s servers (pinned) instead of
	// zone "." following the file the node's DHCP client maintains.
	Upstreams []string
	// Docker: also send the containers on Docker's default bridge to
	// towerd (--docker): "dns" in daemon.json, a socket drop-in for
	// docker0's address, and the bridge in allow. Without it, a Docker
	// that is present only gets a warning.
	Docker bool
	// Imported, when set, says RenderConfig writes a configuration imported
	// from elsewhere (--from-dnsmasq) rather than install's own.
	Imported *ImportedConfig
	// Activate, when set, runs systemctl once the files are in place and
	// rolls everything back when towerd does not answer (--activate).
	// Only on the live system: Install refuses it with a Root other than
	// "/", where systemctl would start this machine's units, not the root's.
	Activate *Activation
	// DryRun reports the plan and changes nothing.
	DryRun bool
	// RenderConfig writes the towerd.toml install puts in place when there
	// is none. Required: the config file's syntax belongs to towerd's
	// config package, and the caller renders it.
	RenderConfig func(InstallConfig) []byte
}

// ImportedConfig describes the configuration RenderConfig imports.
type ImportedConfig struct {
	// Source names it for the report, e.g. "dnsmasq's /etc/dnsmasq.conf".
	Source string
	// RootServers: it names servers for zone "." itself, so install needs
	// to find none.
	RootServers bool
}

// InstallConfig is what install decided for the towerd.toml it writes.
type InstallConfig struct {
	// Listen is towerd's listen address (ip:port), the one resolv.conf
	// points at.
	Listen string
	// ExtraListen are further addresses of towerd's (docker0's), which
	// the socket units bind; listed so towerd never forwards to itself.
	ExtraListen []string
	// Allow, when set, replaces the default allow list (it then names the
	// loopback networks itself).
	Allow []string
	// ResolvConf, when set, is the file zone "." follows (resolv_conf):
	// the one the node's DHCP client or network manager keeps current.
	// Servers is then empty.
	ResolvConf string
	// Servers are zone "."'s upstreams, host:port, when they are pinned
	// (--upstream) or copied from a static resolv.conf.
	Servers []string
	// Source names where Servers came from: a file, or "--upstream".
	Source string
	// DropIn: the file goes to ConfigDropIn, over a towerd.toml that sets
	// nothing (the package's sample), not to towerd.toml itself.
	DropIn bool
}

// Install makes towerd the node's resolver under opts.Root: it copies the
// binary, writes towerd.socket and towerd.service (unless towerd's Debian
// package provides them: packaged.go), writes a config (towerd.toml, or its
// drop-in over the package's sample) whose
// zone "." follows the file the node's DHCP client or network manager
// keeps current (or forwards to the servers of a static resolv.conf, or to
// --upstream), keeps that manager from taking /etc/resolv.conf back (its
// drop-in or hook), turns off resolved's stub listener with a drop-in,
// takes nss-resolve out of nsswitch.conf's hosts: line, and points
// /etc/resolv.conf at 127.0.0.1, keeping the old files as backups. With
// Docker it warns, or with opts.Docker sends containers to towerd; a Consul
// token file gets its LoadCredential= drop-in. Every step compares before
// it writes, so a second run changes nothing. It never starts or stops
// anything: Report.Next says what to run (Activate runs it).
//
// Every path is resolved inside opts.Root without following a link out of
// it (NodeRoot), and every change is recorded in install-state.json before it
// is made, so an install killed at any point is finished by the next
// Install or undone by Uninstall.
func Install(opts InstallOptions) (*Report, error) {
	if opts.Activate != nil && opts.Root != "" && opts.Root != "/" {
		return &Report{DryRun: opts.DryRun}, fmt.Errorf("--activate runs this machine's systemctl: it cannot start the units of --root %s; "+
			"install there without --activate and start towerd inside that system", opts.Root)
	}
	n, err := OpenNodeRoot(opts.Root)
	if err != nil {
		return &Report{DryRun: opts.DryRun}, err
	}
	defer n.Close()
	return install(n, opts)
}

// installer carries one install's state between its steps.
type installer struct {
	fsys    fileSystem
	m       *manifest
	r       *Report
	planned map[string]bool // directories a dry run would create
	// recorded is set once the record was written and reported.
	recorded bool
	// seed marks the record of the file write is about to write as a
	// seed (PlannedFile.Seed).
	seed bool
}

// nodePlan is everything install detected before it changes anything.
type nodePlan struct {
	manager  ManagerPlan
	docker   DockerPlan
	dnsmasq  DnsmasqState
	token    PlannedFile
	hasToken bool
	// packaged: the root has towerd's Debian package (packagedUnits), whose
	// binary and units install uses instead of copying its own.
	packaged bool
	// configPath is where install's configuration goes: towerd.toml, or
	// ConfigDropIn over the package's sample (configTarget).
	configPath string
	// keepConfig: a config at configPath that is not install's own (or
	// changed since) is there, and wins.
	keepConfig bool
	found      discovered
}

func install(fsys fileSystem, opts InstallOptions) (*Report, error) {
	in := &installer{fsys: fsys, r: &Report{DryRun: opts.DryRun}, planned: map[string]bool{}}
	var err error
	if in.m, err = loadManifest(fsys); err != nil {
		return in.r, err
	}
	if in.m == nil {
		in.m = &manifest{}
	}
	if opts.RenderConfig == nil {
		return in.r, errors.New("InstallOptions.RenderConfig is not set")
	}
	p, err := in.detect(opts)
	if err != nil {
		return in.r, err
	}
	var binary []byte
	if !p.packaged {
		if binary, err = os.ReadFile(opts.Binary); err != nil {
			return in.r, fmt.Errorf("reading the towerd binary to install: %w", err)
		}
	}
	var act *activator
	if opts.Activate != nil && !opts.DryRun {
		if act, err = in.preflightActivate(p); err != nil {
			return in.r, err
		}
	}
	units, err := systemd.Units(systemd.DefaultBinaryPath)
	if err != nil {
		return in.r, err
	}
	// Nothing above changed anything. From here on every change is
	// recorded before it is made (record, ensureDir), so an install killed
	// at any point is finished by the next install or undone by uninstall.
	if err := sweepTemps(fsys, in.r); err != nil {
		return in.r, err
	}
	if err := in.saveManifest(); err != nil {
		return in.r, err
	}

	if err := in.writeProgram(opts, p, binary, units); err != nil {
		return in.r, err
	}
	if p.hasToken {
		if err := in.writePlanned(p.token); err != nil {
			return in.r, err
		}
	} else {
		in.r.same("skipped", systemd.ConsulTokenDropIn, "no "+systemd.ConsulTokenPath+": towerd asks Consul without an ACL token")
	}
	if opts.Docker {
		if err := in.writePlanned(p.docker.SocketDropIn); err != nil {
			return in.r, err
		}
	}
	if err := in.writeConfig(opts, p); err != nil {
		return in.r, err
	}
	resolved := resolvedPresent(fsys)
	if resolved {
		if err := in.writeOwned(ResolvedDropIn, renderDropIn(), 0o644, "DNSStubListener=no"); err != nil {
			return in.r, err
		}
	} else {
		in.r.same("skipped", ResolvedDropIn, "systemd-resolved is not installed")
	}
	in.r.same("found", string(p.manager.Manager), p.manager.Reason)
	for _, w := range p.manager.Warnings {
		in.r.warn("%s", w)
	}
	for _, f := range p.manager.Files {
		if err := in.writePlanned(f); err != nil {
			return in.r, err
		}
	}
	if err := in.writeDocker(opts, p.docker); err != nil {
		return in.r, err
	}
	for _, e := range p.dnsmasq.Evidence {
		in.r.same("found", "dnsmasq", e)
	}
	// resolv.conf and nsswitch.conf last: lookups switch to towerd only
	// once everything towerd needs is in place.
	if err := in.writeResolvConf(); err != nil {
		return in.r, err
	}
	if err := in.writeNsswitch(); err != nil {
		return in.r, err
	}
	if act != nil {
		return in.r, in.activate(act, *opts.Activate, p)
	}
	in.r.Next = append(in.r.Next, "systemctl daemon-reload")
	if resolved {
		in.r.Next = append(in.r.Next, "systemctl restart systemd-resolved   # stub listener off")
	}
	if in.m.file(NMDropIn) != nil {
		in.r.Next = append(in.r.Next, "systemctl reload NetworkManager   # rc-manager=unmanaged")
	}
	in.r.Next = append(in.r.Next, p.dnsmasq.StopCommands...)
	if !p.packaged {
		in.r.Next = append(in.r.Next, sysusersNext)
	}
	in.r.Next = append(in.r.Next, "systemctl enable --now "+systemd.SocketUnitName)
	if opts.Docker && p.docker.Next != "" {
		in.r.Next = append(in.r.Next, p.docker.Next)
	}
	return in.r, nil
}

// detect reads the node: what maintains resolv.conf, Docker, dnsmasq, a
// Consul token, whether a towerd.toml wins, and zone "."'s upstreams. It
// refuses, before anything is written, a flag that could not take effect.
func (in *installer) detect(opts InstallOptions) (nodePlan, error) {
	var p nodePlan
	var err error
	if p.manager, err = DetectResolvConfManager(in.fsys); err != nil {
		return p, err
	}
	if p.docker, err = PlanDocker(in.fsys, opts.Docker); err != nil {
		return p, err
	}
	if opts.Docker && !p.docker.Present {
		return p, errors.New("--docker: Docker is not installed here (no " + DockerDaemonJSON + ", dockerd or docker.service)")
	}
	p.dnsmasq = DetectDnsmasq(in.fsys)
	p.token, p.hasToken = PlanConsulToken(in.fsys)
	p.packaged = packagedUnits(in.fsys)

	if p.configPath, err = in.configTarget(p.packaged); err != nil {
		return p, err
	}
	cur, err := look(in.fsys, p.configPath)
	if err != nil {
		return p, err
	}
	rec := in.m.file(p.configPath)
	p.keepConfig = cur.exists && (rec == nil || (cur.sum() != rec.Sum && !rec.Pending))
	if p.keepConfig {
		why := p.configPath + " exists and install keeps it (it is not the one install wrote, or it changed since)"
		switch {
		case len(opts.Upstreams) > 0:
			return p, errors.New("--upstream cannot take effect: " + why + "; set zone \".\"'s servers there, or move it away to have install write one")
		case opts.Imported != nil:
			return p, errors.New("--from-dnsmasq cannot take effect: " + why + "; move it away to import " + opts.Imported.Source)
		}
		return p, nil
	}
	if opts.Imported != nil && opts.Imported.RootServers && len(opts.Upstreams) > 0 {
		return p, errors.New("--upstream cannot take effect: the configuration imported from " + opts.Imported.Source +
			" names zone \".\"'s servers itself; change them there, or leave out --upstream")
	}
	p.found, err = in.upstreams(opts, p.manager)
	return p, err
}

// upstreams decides zone "."'s servers before anything is written, so an
// install that could only produce a resolver without upstreams stops early.
func (in *installer) upstreams(opts InstallOptions, plan ManagerPlan) (discovered, error) {
	if len(opts.Upstreams) > 0 {
		d := discovered{source: "--upstream"}
		for _, s := range opts.Upstreams {
			n, err := upstream.NormalizeAddress(s)
			if err != nil {
				return d, fmt.Errorf("--upstream %q: %w", s, err)
			}
			d.servers = append(d.servers, n)
		}
		return d, nil
	}
	if opts.Imported != nil && opts.Imported.RootServers {
		return discovered{source: opts.Imported.Source}, nil
	}
	if plan.Follow != "" {
		seeded := slices.ContainsFunc(plan.Files, func(f PlannedFile) bool { return f.Path == plan.Follow })
		if _, err := in.fsys.Lstat(plan.Follow); err != nil && !seeded {
			return discovered{}, fmt.Errorf("zone \".\" would follow %s (%s), which does not exist yet; start %s first, or name servers with --upstream",
				plan.Follow, plan.Manager, plan.Manager)
		}
		return discovered{follow: plan.Follow, source: plan.Follow}, nil
	}
	d, err := staticUpstreams(in.fsys)
	if err != nil {
		return d, err
	}
	for _, s := range d.skipped {
		in.r.warn("upstream %s from %s left out", s, d.source)
	}
	if len(d.servers) == 0 {
		return d, fmt.Errorf("no upstream DNS server found in %s (only local ones); name them with --upstream", d.source)
	}
	return d, nil
}
