package install

// The one way install changes a file: compare, back up what is someone
// else's, write atomically, and record each change in install-state.json
// before it is made (writeOwned, write, backUp, record, saveManifest).

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// writeOwned puts data at name unless it is there already. A file towerd
// did not write is kept at name+".pre-towerd" first, so uninstall can put it
// back: one with no record, or one that is not what the record says while
// no backup exists (an install stopped before it made the backup).
func (in *installer) writeOwned(name string, data []byte, mode fs.FileMode, detail string) error {
	return in.write(name, data, mode, detail, name+".pre-towerd", func(cur snapshot, rec *fileRecord, backup snapshot) bool {
		return rec == nil || (cur.sum() != rec.Sum && !backup.exists)
	})
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
			done.Pending, done.Config = false, in.config
			if err := in.record(done); err != nil {
				return err
			}
			in.r.same("unchanged", name, "written by an install that did not finish")
		default:
			if !reflect.DeepEqual(rec.Config, in.config) {
				// The same bytes, from a record that did not say what
				// they hold (an older towerd's): it says so now.
				upd := *rec
				upd.Config = in.config
				if err := in.record(upd); err != nil {
					return err
				}
			}
			in.r.same("unchanged", name, in.unchanged)
		}
		return nil
	}
	newRec := fileRecord{Path: name, Sum: sha256Hex(data), Pending: true}
	if rec != nil {
		newRec.Backup = rec.Backup
	}
	newRec.Seed = in.seed
	newRec.Config = in.config
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
	tmp := nodefs.TempName(dir)
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
