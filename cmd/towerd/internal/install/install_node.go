package install

// The node plumbing install changes around towerd: resolv.conf,
// nsswitch.conf, the files a detector planned (the DHCP client's or network
// manager's drop-in or hook, the Consul token's and Docker's socket
// drop-ins) and Docker's daemon.json.

import (
	"fmt"
	"io/fs"
	"strings"
)

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
