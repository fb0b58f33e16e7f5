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
// read, through the node's files opened with nodefs.Open, and serve tools
// that inspect a node without changing it.
package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
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
	// Import, when set, is a dnsmasq configuration (--from-dnsmasq):
	// install writes it as towerd.toml, completed with what it decides.
	Import *Import
	// Activate, when set, runs systemctl once the files are in place and
	// rolls everything back when towerd does not answer (--activate).
	// Only on the live system: Install refuses it with a Root other than
	// "/", where systemctl would start this machine's units, not the root's.
	Activate *Activation
	// DryRun reports the plan and changes nothing.
	DryRun bool
}

// Import is a dnsmasq configuration install carries over as towerd.toml.
type Import struct {
	// Source names what was read, as the node sees it: the path named, or
	// every file dnsmasq reads.
	Source string `json:"source"`
	// Directives are what was read there (dnsmasqimport), in dnsmasq's
	// order: Import maps them again whenever install renders the file.
	Directives []dnsmasqimport.Directive `json:"directives"`
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
// it (nodefs.Root), and every change is recorded in install-state.json
// before it is made, so an install killed at any point is finished by the
// next Install or undone by Uninstall.
func Install(opts InstallOptions) (*Report, error) {
	if opts.Activate != nil && opts.Root != "" && opts.Root != "/" {
		return &Report{DryRun: opts.DryRun}, fmt.Errorf("--activate runs this machine's systemctl: it cannot start the units of --root %s; "+
			"install there without --activate and start towerd inside that system", opts.Root)
	}
	n, err := nodefs.Open(opts.Root)
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
	// config goes into the record of the file write is about to write:
	// towerd.toml's (writeConfig), and unchanged is the report's detail
	// when that file is already what it would write.
	config    *configRecord
	unchanged string
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
	// changed since) is there, and wins; keepWhy says why, for the report.
	keepConfig bool
	keepWhy    string
	// imp is the import the config holds: --from-dnsmasq's, else the one
	// an earlier install imported (its record keeps it), so a re-run
	// renders it again rather than losing it (issue 25 item 1).
	imp   *Import
	found discovered
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
	if a := opts.Activate; a != nil && a.Implied && p.dnsmasq.ServesDNS && (p.dnsmasq.Enabled || nodeHas(in.fsys, dnsmasqPIDFile)) {
		in.r.same("skipped", "starting towerd", "dnsmasq holds port 53: run the next: lines, dnsmasq's stop first (or stop it, then install again)")
		opts.Activate = nil
	}
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
	in.r.Undo = in.undoSteps(p)
	if act != nil {
		return in.r, in.activate(act, *opts.Activate, p)
	}
	in.nextSteps(opts, p, resolved)
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
	p.imp = opts.Import
	switch {
	case p.imp != nil || rec == nil || p.keepConfig:
	case rec.Config != nil:
		p.imp = rec.Config.Import
	case cur.exists && !cur.isLink() && bytes.Contains(cur.data, []byte(importedBy)):
		// An older towerd's import, whose record does not keep what it
		// read: a re-render could only lose it.
		p.keepConfig = true
		p.keepWhy = "imported from dnsmasq by an earlier towerd install, whose record does not keep the import"
	}
	if p.keepConfig {
		why := p.configPath + " exists and install keeps it (it is not the one install wrote, or it changed since)"
		if p.keepWhy != "" {
			why = p.configPath + " was " + p.keepWhy + "; install keeps it"
		}
		switch {
		case len(opts.Upstreams) > 0:
			return p, errors.New("--upstream cannot take effect: " + why + "; set zone \".\"'s servers there, or move it away to have install write one")
		case opts.Import != nil:
			return p, errors.New("--from-dnsmasq cannot take effect: " + why + "; move it away to import dnsmasq's " + opts.Import.Source)
		}
		return p, nil
	}
	if p.imp.namesRootServers() && len(opts.Upstreams) > 0 {
		what := "the configuration imported from dnsmasq's " + p.imp.Source
		if opts.Import == nil {
			what = p.configPath + " holds what an earlier install imported from dnsmasq's " + p.imp.Source + ", which"
		}
		return p, errors.New("--upstream cannot take effect: " + what + " names zone \".\"'s servers itself; change them there, or leave out --upstream")
	}
	if p.found, err = in.upstreams(opts, p); err != nil {
		return p, err
	}
	if p.found.follow == "" {
		// Zone "." has servers of its own: the lease's are not followed,
		// and no file needs writing for towerd to read (issue 25 item 7).
		p.manager = p.manager.pinned()
	}
	return p, nil
}

// upstreams decides zone "."'s servers before anything is written, so an
// install that could only produce a resolver without upstreams stops early.
func (in *installer) upstreams(opts InstallOptions, p nodePlan) (discovered, error) {
	plan := p.manager
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
	if p.imp.namesRootServers() {
		return discovered{source: "dnsmasq's " + p.imp.Source}, nil
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
