package systemd

import (
	"bytes"
	_ "embed" // the unit files ship inside the binary, for `towerd install`
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/towerd/towerd/upstream/resolvconf"
)

// InstallOptions say where and what to install.
type InstallOptions struct {
	// Root is the directory that stands for "/"; "" or "/" is this machine.
	Root string
	// Binary is the towerd executable copied to /usr/local/bin/towerd.
	Binary string
	// Upstreams, when set, become zone "."'s servers instead of the ones
	// found in resolved's or the system's resolv.conf.
	Upstreams []string
	// DryRun reports the plan and changes nothing.
	DryRun bool
	// RenderConfig writes the towerd.toml install puts in place when there
	// is none. Required: the config file's syntax belongs to towerd's own
	// config package, which this package cannot import (issue 16).
	RenderConfig func(InstallConfig) []byte
}

// InstallConfig is what install decided for the towerd.toml it writes.
type InstallConfig struct {
	// Listen is towerd's listen address (ip:port), the one resolv.conf
	// points at.
	Listen string
	// Servers are zone "."'s upstreams, host:port.
	Servers []string
	// Source names where Servers came from: a file, or "--upstream".
	Source string
}

// Install makes towerd the node's resolver under opts.Root: it copies the
// binary, writes towerd.socket and towerd.service, writes a config whose
// zone "." forwards to the upstreams systemd-resolved (or resolv.conf) used,
// turns off resolved's stub listener with a drop-in, and points
// /etc/resolv.conf at 127.0.0.1, keeping the old one as a backup. Every
// step compares before it writes, so a second run changes nothing. It
// never starts or stops anything: Report.Next says what to run.
//
// Every path is resolved inside opts.Root without following a link out of
// it (rootFS), and every change is recorded in install-state.json before it
// is made, so an install killed at any point is finished by the next
// Install or undone by Uninstall.
func Install(opts InstallOptions) (*Report, error) {
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
	// renderConfig is InstallOptions.RenderConfig over what install found.
	renderConfig func(discovered) []byte
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
	in.renderConfig = func(d discovered) []byte {
		return opts.RenderConfig(InstallConfig{Listen: towerdListenAddress + ":53", Servers: d.servers, Source: d.source})
	}
	binary, err := os.ReadFile(opts.Binary)
	if err != nil {
		return in.r, fmt.Errorf("reading the towerd binary to install: %w", err)
	}
	found, err := in.upstreams(opts.Upstreams)
	if err != nil {
		return in.r, err
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

	if err := in.writeOwned(DefaultBinaryPath, binary, 0o755, "copy of "+opts.Binary); err != nil {
		return in.r, err
	}
	for _, u := range units {
		if err := in.writeOwned(path.Join(UnitDir, u.Name), []byte(u.Content), 0o644, ""); err != nil {
			return in.r, err
		}
	}
	if err := in.writeConfig(found); err != nil {
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
	// resolv.conf last: lookups switch to towerd only once everything
	// towerd needs is in place.
	if err := in.writeResolvConf(); err != nil {
		return in.r, err
	}
	in.r.Next = append(in.r.Next, "systemctl daemon-reload")
	if resolved {
		in.r.Next = append(in.r.Next, "systemctl restart systemd-resolved   # stub listener off")
	}
	in.r.Next = append(in.r.Next, "systemctl enable --now "+SocketUnitName)
	return in.r, nil
}

// upstreams decides zone "."'s servers before anything is written, so an
// install that could only produce a resolver without upstreams stops early.
func (in *installer) upstreams(given []string) (discovered, error) {
	if len(given) > 0 {
		d := discovered{source: "--upstream"}
		for _, s := range given {
			n, err := resolvconf.NormalizeAddress(s)
			if err != nil {
				return d, fmt.Errorf("--upstream %q: %w", s, err)
			}
			d.servers = append(d.servers, n)
		}
		return d, nil
	}
	d, err := discoverUpstreams(in.fsys)
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
	data := renderResolvConf(prev.Search, prev.Options)
	detail := fmt.Sprintf("nameserver %s, search and options kept from %s", towerdListenAddress, source)
	return in.write(ResolvConfPath, data, 0o644, detail, ResolvConfBackup, func(cur snapshot, _ *fileRecord, _ snapshot) bool {
		return cur.isLink() || !ownsResolvConf(cur.data)
	})
}

// writeConfig writes towerd.toml only where there is none or where it is
// still the one install wrote: an operator's config always wins.
func (in *installer) writeConfig(found discovered) error {
	cur, err := look(in.fsys, ConfigPath)
	if err != nil {
		return err
	}
	rec := in.m.file(ConfigPath)
	servers := strings.Join(found.servers, ", ")
	switch {
	case cur.exists && rec == nil:
		in.r.same("kept", ConfigPath, "an existing config wins; make sure zone \".\" forwards to "+servers)
		return nil
	case cur.exists && cur.sum() != rec.Sum:
		in.r.same("kept", ConfigPath, "changed since towerd install wrote it")
		return nil
	}
	return in.write(ConfigPath, in.renderConfig(found), 0o644, "zone \".\" -> "+servers+" (from "+found.source+")", "", nil)
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
