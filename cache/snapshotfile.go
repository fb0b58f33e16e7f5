package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
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
	*os.File
	path string
}

// OpenSnapshot opens the snapshot at path for Load if it may be trusted: a
// regular file (not a symlink, FIFO, device or directory), owned by this
// process's effective user or by root, and writable by nobody else
// (group or others): Dump's files are 0600, so a group-writable one was not
// written by towerd, and a group is one more party who could have. The open
// itself neither follows a symlink nor blocks (O_NOFOLLOW|O_NONBLOCK), and
// the checks are made on the opened file (fstat), so the file cannot be
// swapped between check and read.
//
// A missing file is an error wrapping fs.ErrNotExist. Any other refusal
// renames the file to path+RejectedSuffix and returns an error wrapping
// ErrBadSnapshot that says why and where the file went.
func OpenSnapshot(path string) (*SnapshotFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	case errors.Is(err, unix.ELOOP):
		return nil, setAside(path, "it is a symlink")
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if why := untrusted(st, os.Geteuid()); why != "" {
		unix.Close(fd)
		return nil, setAside(path, why)
	}
	// Reads of a regular file never block anyway; clearing the flag keeps
	// the os.File an ordinary blocking one.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return &SnapshotFile{File: os.NewFile(uintptr(fd), path), path: path}, nil
}

// untrusted says why a file with status st must not be loaded by a process
// with effective user euid, or "".
func untrusted(st unix.Stat_t, euid int) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFIFO:
		return "it is a FIFO, not a regular file"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "it is a device, not a regular file"
	case unix.S_IFDIR:
		return "it is a directory, not a regular file"
	default:
		return fmt.Sprintf("it is not a regular file (type %#o)", st.Mode&unix.S_IFMT)
	}
	if int(st.Uid) != euid && st.Uid != 0 {
		return fmt.Sprintf("it is owned by uid %d, neither towerd's user (uid %d) nor root", st.Uid, euid)
	}
	if perm := st.Mode & 0o7777; perm&0o022 != 0 {
		return fmt.Sprintf("it is writable by group or others (mode %04o)", perm)
	}
	return ""
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
