package systemd

import (
	"bytes"
	_ "embed" // the unit files ship inside the binary, for `towerd install`
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/towerd/towerd/upstream/resolvconf"
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
	// is none. Required: the config file's syntax belongs to towerd's own
	// config package, which this package cannot import (issue 16).
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
// it (rootFS), and every change is recorded in install-state.json before it
// is made, so an install killed at any point is finished by the next
// Install or undone by Uninstall.
func Install(opts InstallOptions) (*Report, error) {
	if opts.Activate != nil && opts.Root != "" && opts.Root != "/" {
		return &Report{DryRun: opts.DryRun}, fmt.Errorf("--activate runs this machine's systemctl: it cannot start the units of --root %s; "+
			"install there without --activate and start towerd inside that system", opts.Root)
	}
	return install(rootFS{Root: opts.Root}, opts)
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
	units, err := Units(DefaultBinaryPath)
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
		in.r.same("skipped", ConsulTokenDropIn, "no "+ConsulTokenPath+": towerd asks Consul without an ACL token")
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
	in.r.Next = append(in.r.Next, "systemctl enable --now "+SocketUnitName)
	if opts.Docker && p.docker.Next != "" {
		in.r.Next = append(in.r.Next, p.docker.Next)
	}
	return in.r, nil
}

// preflightActivate checks, before anything changes, that --activate can
// do its part: systemctl is on PATH, and no dnsmasq holds port 53.
func (in *installer) preflightActivate(p nodePlan) (*activator, error) {
	systemctl, err := exec.LookPath("systemctl")
	if err != nil {
		return nil, fmt.Errorf("--activate: %w", err)
	}
	if p.dnsmasq.ServesDNS && (p.dnsmasq.Enabled || nodeHas(nodeView{in.fsys}, dnsmasqPIDFile)) {
		return nil, fmt.Errorf("--activate: dnsmasq holds port 53, which towerd.socket needs; stop it first (%s), then run install --activate again",
			strings.Join(p.dnsmasq.StopCommands, "; "))
	}
	return &activator{systemctl: systemctl, r: in.r}, nil
}

// activate starts towerd (activator.activate) and, when it does not
// answer, rolls back: the units are disabled and every file install wrote
// is put back, so the node keeps the resolver it had.
func (in *installer) activate(act *activator, opts Activation, p nodePlan) error {
	err := act.activate(opts, in.m.file(ResolvedDropIn) != nil)
	if err == nil {
		if in.m.file(NMDropIn) != nil {
			in.r.Next = append(in.r.Next, "systemctl reload NetworkManager   # rc-manager=unmanaged")
		}
		if p.docker.Next != "" && in.m.file(DockerSocketDropIn) != nil {
			in.r.Next = append(in.r.Next, p.docker.Next)
		}
		return nil
	}
	in.r.warn("activation failed (%v): rolling back everything install did", err)
	if rbErr := act.rollback(in.fsys); rbErr != nil {
		return fmt.Errorf("%w; the rollback did not finish either: %v (see the lines above; towerd uninstall finishes it)", err, rbErr)
	}
	return fmt.Errorf("%w; rolled back: the units are disabled and the files are as they were before install", err)
}

// detect reads the node: what maintains resolv.conf, Docker, dnsmasq, a
// Consul token, whether a towerd.toml wins, and zone "."'s upstreams. It
// refuses, before anything is written, a flag that could not take effect.
func (in *installer) detect(opts InstallOptions) (nodePlan, error) {
	var p nodePlan
	view := nodeView{in.fsys}
	var err error
	if p.manager, err = DetectResolvConfManager(view); err != nil {
		return p, err
	}
	if p.docker, err = PlanDocker(view, opts.Docker); err != nil {
		return p, err
	}
	if opts.Docker && !p.docker.Present {
		return p, errors.New("--docker: Docker is not installed here (no " + DockerDaemonJSON + ", dockerd or docker.service)")
	}
	p.dnsmasq = DetectDnsmasq(view)
	p.token, p.hasToken = PlanConsulToken(view)
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
			n, err := resolvconf.NormalizeAddress(s)
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

// writeOwned puts data at name unless it is there already. A file towerd
// did not write is kept at name+".pre-towerd" first, so uninstall can put it
// back: one with no record, or one that is not what the record says while
// no backup exists (an install stopped before it made the backup).
func (in *installer) writeOwned(name string, data []byte, mode fs.FileMode, detail string) error {
	return in.write(name, data, mode, detail, name+".pre-towerd", func(cur snapshot, rec *fileRecord, backup snapshot) bool {
		return rec == nil || (cur.sum() != rec.Sum && !backup.exists)
	})
}

// writeResolvConf points resolv.conf at towerd. The file counts as someone
// else's unless it carries towerd's marker; someone else's is backed up
// (replacing an older backup) before towerd's is written, never after, so
// the backup is never a copy of towerd's own file.
func (in *installer) writeResolvConf() error {
	prev, source, err := previousResolvConf(in.fsys)
	if err != nil {
		return err
	}
	data := renderResolvConf(prev)
	detail := fmt.Sprintf("nameserver %s; domain, search and options kept from %s", towerdListenAddress, source)
	return in.write(ResolvConfPath, data, 0o644, detail, ResolvConfBackup, func(cur snapshot, _ *fileRecord, _ snapshot) bool {
		return cur.isLink() || !ownsResolvConf(cur.data)
	})
}

// writeConfig writes towerd.toml only where there is none or where it is
// still the one install wrote: an operator's config always wins.
func (in *installer) writeConfig(opts InstallOptions, p nodePlan) error {
	if p.keepConfig {
		msg := "an existing config wins"
		if rec := in.m.file(p.configPath); rec != nil {
			msg = "changed since towerd install wrote it"
		}
		switch {
		case p.manager.Follow != "":
			msg += "; zone \".\" should follow " + p.manager.Follow + " (resolv_conf)"
		}
		if opts.Docker {
			msg += "; add " + p.docker.Allow + " to allow there for Docker's containers"
			in.r.warn("%s is kept: add %q to its allow list (with the loopback networks), or towerd refuses Docker's containers", p.configPath, p.docker.Allow)
		}
		in.r.same("kept", p.configPath, msg)
		return nil
	}
	c := InstallConfig{Listen: towerdListenAddress + ":53", Servers: p.found.servers, Source: p.found.source, ResolvConf: p.found.follow,
		DropIn: p.configPath == ConfigDropIn}
	var detail string
	switch {
	case opts.Imported != nil:
		detail = "imported from " + opts.Imported.Source
		if !opts.Imported.RootServers {
			if c.ResolvConf != "" {
				detail += "; zone \".\" follows " + c.ResolvConf
			} else {
				detail += "; zone \".\" -> " + strings.Join(c.Servers, ", ") + " (from " + c.Source + ")"
			}
		}
	case c.ResolvConf != "":
		detail = "zone \".\" follows " + c.ResolvConf + " (resolv_conf), which " + string(p.manager.Manager) + " keeps current"
	default:
		detail = "zone \".\" -> " + strings.Join(c.Servers, ", ") + " (from " + c.Source + ")"
	}
	if opts.Docker {
		c.ExtraListen = []string{p.docker.Listen}
		c.Allow = []string{"127.0.0.0/8", "::1/128", p.docker.Allow}
		detail += "; listen adds " + p.docker.Listen + ", allow adds " + p.docker.Allow
	}
	if c.DropIn {
		detail += "; over " + ConfigPath + ", which sets nothing (the package's sample) and stays dpkg's"
		for _, o := range operatorDropIns(in.fsys) {
			in.r.same("found", o, "read after "+ConfigDropIn+": what it sets wins")
		}
	}
	return in.write(p.configPath, opts.RenderConfig(c), 0o644, detail, "", nil)
}

// writeProgram copies the binary and writes the units, unless towerd's
// Debian package provides them: then copies from an earlier install, which
// would override the package's units and drift from them at its next
// upgrade, are undone instead.
func (in *installer) writeProgram(opts InstallOptions, p nodePlan, binary []byte, units []Unit) error {
	if !p.packaged {
		if err := in.writeOwned(DefaultBinaryPath, binary, 0o755, "copy of "+opts.Binary); err != nil {
			return err
		}
		for _, u := range units {
			if err := in.writeOwned(path.Join(UnitDir, u.Name), []byte(u.Content), 0o644, ""); err != nil {
				return err
			}
		}
		return nil
	}
	detail := "towerd's Debian package: its program and its units in " + PackagedUnitDir + " are used as they are, nothing is copied"
	root := opts.Root
	if root == "" {
		root = "/"
	}
	if filepath.Join(root, PackagedBinaryPath) != opts.Binary {
		detail += " (the units run " + PackagedBinaryPath + ", not this program, " + opts.Binary + ")"
	}
	in.r.same("found", PackagedBinaryPath, detail)
	for _, name := range []string{DefaultBinaryPath, path.Join(UnitDir, SocketUnitName), path.Join(UnitDir, ServiceUnitName)} {
		if in.m.file(name) == nil {
			if _, err := in.fsys.Lstat(name); err == nil && name != DefaultBinaryPath {
				in.r.warn("%s is not towerd install's and overrides the package's unit in %s: remove it (systemctl daemon-reload after) unless you mean it to",
					name, PackagedUnitDir)
			}
			continue
		}
		if err := in.retire(name, "an earlier install's copy, which would override the package's"); err != nil {
			return err
		}
	}
	return nil
}

// writePlanned writes a file a detector planned (a manager's drop-in or
// hook, the Consul token's or Docker's socket drop-in). A seed is written
// only where there is none yet.
func (in *installer) writePlanned(f PlannedFile) error {
	reason := strings.TrimPrefix(f.Reason, f.Path+": ")
	if !f.Seed {
		return in.writeOwned(f.Path, f.Data, f.Mode, reason)
	}
	cur, err := look(in.fsys, f.Path)
	if err != nil {
		return err
	}
	rec := in.m.file(f.Path)
	switch {
	case cur.exists && rec == nil:
		in.r.same("kept", f.Path, "exists already (towerd's hook wrote it?): left as it is, not towerd's to remove")
		return nil
	case cur.exists && !rec.Pending:
		in.r.same("unchanged", f.Path, "seeded by an earlier install; the hook keeps it current")
		return nil
	}
	in.seed = true
	defer func() { in.seed = false }()
	return in.write(f.Path, f.Data, f.Mode, reason, "", nil)
}

// writeDocker edits daemon.json when asked to (--docker), and otherwise
// says what Docker's containers will do.
func (in *installer) writeDocker(opts InstallOptions, p DockerPlan) error {
	if !p.Present {
		return nil
	}
	if !opts.Docker {
		in.r.same("skipped", DockerDaemonJSON, "Docker is installed, --docker not given: its containers do not use towerd (see the warning)")
		in.r.warn("%s", p.Warning)
		return nil
	}
	mode := fs.FileMode(0o644)
	if cur, err := look(in.fsys, DockerDaemonJSON); err != nil {
		return err
	} else if cur.exists && !cur.isLink() {
		mode = cur.mode
	}
	detail := ""
	if p.DaemonJSONChanged {
		detail = strings.TrimPrefix(p.Reasons[0], DockerDaemonJSON+": ")
	}
	if !p.DaemonJSONChanged && in.m.file(DockerDaemonJSON) == nil {
		in.r.same("unchanged", DockerDaemonJSON, "\"dns\" names towerd on docker0 already")
		return nil
	}
	return in.writeOwned(DockerDaemonJSON, p.DaemonJSON, mode, detail)
}

// writeNsswitch takes nss-resolve out of nsswitch.conf's hosts: line
// (RewriteNsswitch says why), backing the file up so uninstall puts it
// back while it is still what install wrote. A nsswitch.conf that is a
// symlink (Fedora's authselect links it to a file it regenerates) is not
// written, neither through the link nor over it: the tool that owns the
// target would undo the edit, or lose its link; install says so instead.
func (in *installer) writeNsswitch() error {
	cur, err := look(in.fsys, NsswitchPath)
	if err != nil {
		return err
	}
	rec := in.m.file(NsswitchPath)
	switch {
	case !cur.exists && rec == nil:
		in.r.same("skipped", NsswitchPath, "none: glibc's default hosts: order (files dns) asks resolv.conf")
		return nil
	case cur.isLink() && rec == nil:
		data, err := in.fsys.ReadFile(NsswitchPath)
		if err != nil {
			in.r.same("skipped", NsswitchPath, "a symlink to "+cur.link+" that does not resolve inside the root: not read, not written")
			return nil
		}
		if !RewriteNsswitch(data).Changed {
			in.r.same("unchanged", NsswitchPath, "a symlink to "+cur.link+"; hosts: does not use nss-resolve")
			return nil
		}
		in.r.same("skipped", NsswitchPath, "a symlink to "+cur.link+": not rewritten behind the tool that owns it")
		in.r.warn("%s is a symlink to %s (authselect?) and its hosts: line names nss-resolve: glibc lookups go to systemd-resolved, around towerd; "+
			"remove \"resolve\" from hosts: with the tool that owns the file (authselect: a custom profile without it)", NsswitchPath, cur.link)
		return nil
	}
	edit := RewriteNsswitch(cur.data)
	detail := strings.TrimPrefix(edit.Reason, NsswitchPath+": ")
	if !edit.Changed && rec == nil {
		in.r.same("unchanged", NsswitchPath, detail)
		return nil
	}
	if !edit.Changed {
		detail = ""
	}
	mode := cur.mode
	if !cur.exists || cur.isLink() {
		mode = 0o644
	}
	return in.writeOwned(NsswitchPath, edit.Data, mode, detail)
}

// write is the one way install changes a file: compare, back up what is
// someone else's, create missing directories, write atomically. The record
// says what is about to happen before it happens (Pending) and is updated
// once it has.
func (in *installer) write(name string, data []byte, mode fs.FileMode, detail, backup string,
	theirs func(cur snapshot, rec *fileRecord, backup snapshot) bool) error {
	cur, err := look(in.fsys, name)
	if err != nil {
		return err
	}
	rec := in.m.file(name)
	if cur.exists && !cur.isLink() && bytes.Equal(cur.data, data) && cur.mode == mode {
		switch {
		case rec == nil:
			// Identical, but not ours: leave it unrecorded, so uninstall
			// leaves it too.
			in.r.same("unchanged", name, "already there; not towerd's, so uninstall keeps it")
		case rec.Pending:
			// Written by an install killed before it said so.
			done := *rec
			done.Pending = false
			if err := in.record(done); err != nil {
				return err
			}
			in.r.same("unchanged", name, "written by an install that did not finish")
		default:
			in.r.same("unchanged", name, "")
		}
		return nil
	}
	newRec := fileRecord{Path: name, Sum: sha256Hex(data), Pending: true}
	if rec != nil {
		newRec.Backup = rec.Backup
	}
	newRec.Seed = in.seed
	var old snapshot
	if backup != "" {
		if old, err = look(in.fsys, backup); err != nil {
			return err
		}
	}
	switch {
	case cur.exists && theirs != nil && theirs(cur, rec, old):
		newRec.Backup = backup
		if old.exists && old.sum() == cur.sum() {
			// Copied already by an install that stopped before it
			// replaced the file.
			break
		}
		if err := in.record(newRec); err != nil {
			return err
		}
		if err := in.backUp(name, cur, backup); err != nil {
			return err
		}
	case rec == nil && backup != "" && old.exists:
		// Ours without a record (an install of an older towerd interrupted
		// before it saved the record): the backup from then is still the
		// original.
		newRec.Backup = backup
	}
	if err := ensureDir(in.fsys, in.m, in.r, in.planned, path.Dir(name), in.saveManifest); err != nil {
		return err
	}
	if err := in.record(newRec); err != nil {
		return err
	}
	if !in.r.DryRun {
		copied, err := writeFileAtomic(in.fsys, name, data, mode)
		if err != nil {
			return err
		}
		if copied {
			detail = strings.TrimPrefix(detail+"; written in place: the rename was refused (a bind mount?)", "; ")
		}
	}
	newRec.Pending = false
	if err := in.record(newRec); err != nil {
		return err
	}
	in.r.did("write", name, detail)
	return nil
}

func (in *installer) backUp(name string, cur snapshot, backup string) error {
	what := "a file"
	if cur.isLink() {
		what = "a symlink to " + cur.link
	}
	if !in.r.DryRun {
		if err := restoreSnapshot(in.fsys, backup, cur); err != nil {
			return fmt.Errorf("backing up %s to %s: %w", name, backup, err)
		}
	}
	in.r.did("back up", name, fmt.Sprintf("%s, kept as %s", what, backup))
	return nil
}

// record puts rec in the record and saves it.
func (in *installer) record(rec fileRecord) error {
	in.m.setFile(rec)
	return in.saveManifest()
}

// saveManifest writes the record when it changed; a dry run writes nothing.
// The record's directory is made under a temp name with the record already
// in it and then renamed into place, so there is never a /etc/towerd that
// no record accounts for.
func (in *installer) saveManifest() error {
	if in.r.DryRun {
		return nil
	}
	data := in.m.encode()
	cur, err := look(in.fsys, manifestPath)
	if err != nil {
		return err
	}
	if cur.isLink() {
		return fmt.Errorf("%s is a symlink (to %s): refusing to write the install record through it; remove it", manifestPath, cur.link)
	}
	if cur.exists && bytes.Equal(cur.data, data) {
		return nil
	}
	defer func() {
		if !in.recorded {
			in.recorded = true
			in.r.did("write", manifestPath, "what towerd uninstall undoes")
		}
	}()
	dir := path.Dir(manifestPath)
	if _, err := in.fsys.Lstat(dir); err == nil {
		_, err := writeFileAtomic(in.fsys, manifestPath, data, 0o644)
		return err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// The parents (/etc) exist on any system; were one missing, it is
	// created before the record can say so.
	if err := ensureDir(in.fsys, in.m, in.r, in.planned, path.Dir(dir), nil); err != nil {
		return err
	}
	if !slices.Contains(in.m.Dirs, dir) {
		in.m.Dirs = append(in.m.Dirs, dir)
	}
	tmp := tempName(dir)
	if err := in.fsys.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	if _, err := writeFileAtomic(in.fsys, path.Join(tmp, path.Base(manifestPath)), in.m.encode(), 0o644); err != nil {
		return err
	}
	if err := in.fsys.Rename(tmp, dir); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	in.r.did("create", dir+"/", "")
	return nil
}

// The unit files as kept in the repository; towerd install writes them.
var (
	//go:embed towerd.socket
	socketUnit string
	//go:embed towerd.service
	serviceUnit string
)

// Where install puts things, relative to the root. Units go to
// /etc/systemd/system, the directory for units the administrator (not a
// package) installs; the binary to /usr/local/bin for the same reason.
const (
	DefaultBinaryPath = "/usr/local/bin/towerd"
	UnitDir           = "/etc/systemd/system"
	SocketUnitName    = "towerd.socket"
	ServiceUnitName   = "towerd.service"
	// unitBinaryPath is the binary the units in the repository name.
	unitBinaryPath = DefaultBinaryPath
)

// Unit is one rendered unit file.
type Unit struct {
	Name    string // "towerd.socket", "towerd.service"
	Content string
}

// Units returns towerd.socket and towerd.service with ExecStart naming
// binary (an absolute path). Tests render them with the binary they built so
// that `systemd-analyze verify` finds the program the unit runs.
func Units(binary string) ([]Unit, error) {
	if !strings.HasPrefix(binary, "/") {
		return nil, fmt.Errorf("binary path %q is not absolute (systemd wants ExecStart= absolute)", binary)
	}
	if strings.ContainsAny(binary, " \t\n\"'\\%$") {
		// ExecStart= would split or expand such a path; quoting it is not
		// worth the risk for an install path.
		return nil, fmt.Errorf("binary path %q has characters systemd would interpret", binary)
	}
	service := strings.ReplaceAll(serviceUnit, "ExecStart="+unitBinaryPath+" ", "ExecStart="+binary+" ")
	if !strings.Contains(service, "ExecStart="+binary+" ") {
		return nil, fmt.Errorf("BUG: towerd.service has no ExecStart=%s line to rewrite", unitBinaryPath)
	}
	return []Unit{
		{Name: SocketUnitName, Content: socketUnit},
		{Name: ServiceUnitName, Content: service},
	}, nil
}
