package install

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"syscall"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/systemd"
)

// UninstallOptions say where to uninstall from.
type UninstallOptions struct {
	// Root is the directory that stands for "/"; "" or "/" is this machine.
	Root string
	// DryRun reports the plan and changes nothing.
	DryRun bool
}

// enableLinks are where `systemctl enable` puts towerd's units (from their
// [Install] sections). While one exists towerd may be running, and
// uninstall refuses rather than pull the files from under it.
var enableLinks = []string{
	path.Join(systemd.UnitDir, "sockets.target.wants", systemd.SocketUnitName),
	path.Join(systemd.UnitDir, "multi-user.target.wants", systemd.ServiceUnitName),
}

// Uninstall undoes what Install recorded: each file it wrote is removed, or
// replaced by the backup of what was there before, but only while it is
// still byte for byte what install wrote; a file changed since is left
// alone with a warning (for resolv.conf: someone else manages it now, and
// their version wins). Then the directories install created are removed if
// empty. A second run finds nothing to do.
func Uninstall(opts UninstallOptions) (*Report, error) {
	n, err := nodefs.Open(opts.Root)
	if err != nil {
		return &Report{DryRun: opts.DryRun}, err
	}
	defer n.Close()
	return uninstall(n, opts)
}

func uninstall(fsys fileSystem, opts UninstallOptions) (*Report, error) {
	r := &Report{DryRun: opts.DryRun}
	for _, link := range enableLinks {
		if _, err := fsys.Lstat(link); err == nil {
			return r, fmt.Errorf("%s exists: towerd is enabled and may be running; "+
				"first run: systemctl disable --now %s %s", link, systemd.SocketUnitName, systemd.ServiceUnitName)
		}
	}
	m, err := loadManifest(fsys)
	if err != nil {
		return r, err
	}
	if err := sweepTemps(fsys, r); err != nil {
		return r, err
	}
	if m == nil {
		r.same("skipped", manifestPath, "no record of an install here: nothing to undo")
		if cur, err := look(fsys, ResolvConfPath); err == nil && !cur.isLink() && ownsResolvConf(cur.data) {
			r.warn("%s carries towerd's marker but no install is recorded; put the previous file back by hand (towerd kept it as %s)",
				ResolvConfPath, ResolvConfBackup)
		}
		return r, nil
	}
	droppedIn, nmDropIn := false, false
	// Newest first: resolv.conf goes back before towerd's files go. The
	// record loses each file once it is undone, so an uninstall killed
	// midway is finished by the next one.
	save := func() error {
		if r.DryRun {
			return nil
		}
		if _, err := writeFileAtomic(fsys, manifestPath, m.encode(), 0o644); err != nil {
			return fmt.Errorf("updating %s: %w", manifestPath, err)
		}
		return nil
	}
	for _, rec := range slices.Backward(m.Files) {
		// Pending again while it changes: killed after the file went back
		// but before the record lost it, the next run must not take the
		// restored file for one someone changed since install.
		if !rec.Pending {
			inTransition := rec
			inTransition.Pending = true
			m.setFile(inTransition)
			if err := save(); err != nil {
				return r, err
			}
		}
		if err := undoFile(fsys, r, rec); err != nil {
			return r, err
		}
		droppedIn = droppedIn || rec.Path == ResolvedDropIn
		nmDropIn = nmDropIn || rec.Path == NMDropIn
		m.removeFile(rec.Path)
		if err := save(); err != nil {
			return r, err
		}
	}
	recordDir := path.Dir(manifestPath)
	for _, dir := range slices.Backward(m.Dirs) {
		if dir != recordDir {
			removeDirIfEmpty(fsys, r, dir)
		}
	}
	if err := removeRecord(fsys, r, slices.Contains(m.Dirs, recordDir)); err != nil {
		return r, err
	}
	sayWhatStays(fsys, r)
	r.Next = append(r.Next, "systemctl daemon-reload")
	if droppedIn {
		r.Next = append(r.Next, "systemctl restart systemd-resolved   # stub listener back on")
	}
	if nmDropIn {
		r.Next = append(r.Next, "systemctl reload NetworkManager   # it manages /etc/resolv.conf again")
	}
	return r, nil
}

// removeRecord removes the record last. When install created its directory
// and the record is all that is left in it, the directory goes with it in
// one rename to a temp name (swept by the next run if this one is killed
// before it removes that), so there is never an empty /etc/towerd that no
// record accounts for.
func removeRecord(fsys fileSystem, r *Report, ownDir bool) error {
	dir := path.Dir(manifestPath)
	if ownDir && !r.DryRun {
		entries, err := fsys.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(entries) == 1 && entries[0].Name() == path.Base(manifestPath) {
			tmp := nodefs.TempName(dir)
			if err := fsys.Rename(dir, tmp); err != nil {
				return fmt.Errorf("removing %s: %w", dir, err)
			}
			for _, p := range []string{path.Join(tmp, path.Base(manifestPath)), tmp} {
				if err := fsys.Remove(p); err != nil {
					return fmt.Errorf("removing %s: %w", p, err)
				}
			}
			r.did("remove", manifestPath, "")
			r.did("remove", dir+"/", "")
			return nil
		}
	}
	if !r.DryRun {
		if err := fsys.Remove(manifestPath); err != nil {
			return fmt.Errorf("removing %s: %w", manifestPath, err)
		}
	}
	r.did("remove", manifestPath, "")
	if ownDir {
		removeDirIfEmpty(fsys, r, dir)
	}
	return nil
}

// undoFile removes or restores one file install wrote.
func undoFile(fsys fileSystem, r *Report, rec fileRecord) error {
	cur, err := look(fsys, rec.Path)
	if err != nil {
		return err
	}
	var backup snapshot
	if rec.Backup != "" {
		if backup, err = look(fsys, rec.Backup); err != nil {
			return err
		}
	}
	ours := cur.exists && cur.sum() == rec.Sum
	if rec.Path == ResolvConfPath {
		ours = ours && !cur.isLink() && ownsResolvConf(cur.data)
	}
	if rec.Seed {
		ours = cur.exists && !cur.isLink()
	}
	switch {
	case !ours && cur.exists && backup.exists && backup.sum() == cur.sum():
		// The backup is a copy of what is still there: an install stopped
		// between making it and replacing the file.
		if !r.DryRun {
			if err := fsys.Remove(rec.Backup); err != nil {
				return fmt.Errorf("removing %s: %w", rec.Backup, err)
			}
		}
		r.did("remove", rec.Backup, fmt.Sprintf("a copy of %s made by an install that stopped before replacing it", rec.Path))
	case !ours && rec.Pending:
		r.same("skipped", rec.Path, "not towerd's: an install stopped before it wrote it, or an uninstall after it put it back")
	case cur.exists && !ours:
		msg := fmt.Sprintf("left %s alone: it changed since towerd install wrote it, so someone else manages it now", rec.Path)
		if rec.Backup != "" && backup.exists {
			msg += fmt.Sprintf("; the file it replaced is still in %s", rec.Backup)
		}
		r.warn("%s", msg)
		r.same("kept", rec.Path, "changed since install")
	case rec.Backup != "" && !backup.exists:
		r.warn("the backup %s of %s is gone; %s is left as it is", rec.Backup, rec.Path, rec.Path)
	case rec.Backup != "":
		if !r.DryRun {
			if err := restoreSnapshot(fsys, rec.Path, backup); err != nil {
				return fmt.Errorf("restoring %s from %s: %w", rec.Path, rec.Backup, err)
			}
			if err := fsys.Remove(rec.Backup); err != nil {
				return fmt.Errorf("removing %s: %w", rec.Backup, err)
			}
		}
		what := "the file"
		if backup.isLink() {
			what = "the symlink to " + backup.link
		}
		r.did("restore", rec.Path, fmt.Sprintf("%s that was there before, from %s", what, rec.Backup))
	case cur.exists:
		if !r.DryRun {
			if err := fsys.Remove(rec.Path); err != nil {
				return fmt.Errorf("removing %s: %w", rec.Path, err)
			}
		}
		r.did("remove", rec.Path, "")
	default:
		r.same("skipped", rec.Path, "already gone")
	}
	return nil
}

// removeDirIfEmpty removes a directory install created, unless something
// else has been put in it since.
func removeDirIfEmpty(fsys fileSystem, r *Report, dir string) {
	if r.DryRun {
		r.did("remove", dir+"/", "if empty by then")
		return
	}
	err := fsys.Remove(dir)
	switch {
	case err == nil:
		r.did("remove", dir+"/", "")
	case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
		r.same("kept", dir+"/", "not empty")
	case errors.Is(err, syscall.ENOENT):
		r.same("skipped", dir+"/", "already gone")
	default:
		r.warn("could not remove %s: %v", dir, err)
	}
}

// stateDirs are where towerd.service's StateDirectory= keeps the saved
// cache and Consul watch set: /var/lib/towerd, and where a DynamicUser=
// unit of an older towerd kept it.
var stateDirs = []string{"/var/lib/towerd", "/var/lib/private/towerd"}

// sayWhatStays reports what uninstall leaves on purpose: the saved cache
// (systemd made it, not install; a reinstall starts warm with it), and on a
// node without the package, user and group towerd, which Debian's own
// packages leave too (a uid given back could be reused by a new account
// that would then own towerd's leftover files). With the package, apt
// purge removes the state and the package's sysusers.d file.
func sayWhatStays(fsys fileSystem, r *Report) {
	packaged := packagedUnits(fsys)
	for _, dir := range stateDirs {
		if info, err := fsys.Lstat(dir); err != nil || !info.IsDir() {
			continue
		}
		how := "rm -r " + dir + " forgets it"
		if packaged {
			how = "apt purge towerd removes it"
		}
		r.same("kept", dir+"/", "towerd's saved cache and Consul watch set, for a reinstall to start warm: "+how)
	}
	passwd, _ := fsys.ReadFile("/etc/passwd")
	if !packaged && (bytes.HasPrefix(passwd, []byte("towerd:")) || bytes.Contains(passwd, []byte("\ntowerd:"))) {
		r.same("kept", "user and group towerd", "as Debian's packages keep their system users; userdel towerd removes both once nothing runs as towerd")
	}
}
