package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/towerd/towerd/resolver/boundedfile"
)

// A snapshot file is read by a daemon that may run as root, from a directory
// an operator may have pointed somewhere shared; whoever can put a file there
// decides what the node's lookups return (issue 13: a planted file with a
// valid checksum served victim.test A 6.6.6.6 for 68 years, and a FIFO named
// cache.bin kept towerd from ever starting). So before a byte is read the
// file itself is checked, and a file that fails is set aside, not deleted:
// the operator gets to see what was there.

// RejectedSuffix is added to the name of a snapshot file that was refused.
// A later rejection replaces an earlier one: only the last is kept.
const RejectedSuffix = ".rejected"

// SnapshotFile is a snapshot opened by OpenSnapshot, for Load.
type SnapshotFile struct {
	*boundedfile.File
	path string
}

// MaxSnapshotSize is the largest snapshot file OpenSnapshot accepts. Dump
// writes less than the cache's bytes (each entry's key and reply, with a
// header smaller than the overhead an entry is counted with), and the
// cache holds at most MaxBytesLimit, so no file Dump wrote is refused.
const MaxSnapshotSize = MaxBytesLimit + 1<<20

// snapshotRule is the state file's rule: towerd writes it itself, 0600, so
// a symlink, or a file someone else owns or could write, was planted.
var snapshotRule = boundedfile.Rule{MaxSize: MaxSnapshotSize, NoFollow: true, Owned: true}

// OpenSnapshot opens the snapshot at path for Load if it may be trusted: a
// regular file (not a symlink, FIFO, device or directory) of at most
// MaxSnapshotSize bytes, owned by this process's effective user or by
// root, and writable by nobody else (group or others). It neither follows
// a symlink nor blocks, and the checks hold for the file that is read
// (boundedfile.Open, the rule every followed file is read by).
//
// A missing file is an error wrapping fs.ErrNotExist. Any other refusal
// renames the file to path+RejectedSuffix and returns an error wrapping
// ErrBadSnapshot that says why and where the file went.
func OpenSnapshot(path string) (*SnapshotFile, error) {
	f, err := boundedfile.Open(path, snapshotRule)
	var refused *boundedfile.RefusedError
	switch {
	case errors.As(err, &refused):
		return nil, setAside(path, refused.Why)
	case err != nil:
		return nil, err
	}
	return &SnapshotFile{File: f, path: path}, nil
}

// setAside renames a refused snapshot out of the way, so the next start does
// not trip over it again and the next save does not have to overwrite it,
// and returns the error that says so. Rename works on the directory entry
// whatever it is (a FIFO, a symlink) and never opens it.
func setAside(path, why string) error {
	to := path + RejectedSuffix
	if err := os.Rename(path, to); err != nil {
		return fmt.Errorf("%w: %s: %s; setting it aside failed: %w", ErrBadSnapshot, path, why, err)
	}
	return fmt.Errorf("%w: %s: %s; set aside as %s", ErrBadSnapshot, path, why, filepath.Base(to))
}

// setAside is Load's way of setting aside a file whose content it refused.
func (f *SnapshotFile) setAside(loadErr error) error {
	to := f.path + RejectedSuffix
	if err := os.Rename(f.path, to); err != nil {
		return fmt.Errorf("%w; setting it aside failed: %w", loadErr, err)
	}
	return fmt.Errorf("%w; set aside as %s", loadErr, filepath.Base(to))
}
