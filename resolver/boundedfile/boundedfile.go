// Package boundedfile is the one way towerd reads a file someone else may
// have put in its path: resolv.conf, hosts files, the config file and its
// drop-ins, the Consul token and CA, the saved cache and watch set (issue
// 21). A file is opened without blocking, must be a regular file, and is
// read up to a size its role sets; anything else is refused with an error
// that says why, before a byte is read. Callers keep the last content they
// read that passed, so a refused file never takes away what was good.
//
// Why each rule: a FIFO blocks an open and a read forever (the FIFO planted
// as cache.bin in issue 13 kept towerd from starting; one swapped in for
// resolv.conf wedged the main loop), /dev/zero and /dev/urandom never end
// (1.6 GB in 4 s), and a 100 MB resolv.conf kept 311 MB. A regular file's
// reads neither block on a writer nor go on past its size.
//
// It imports only the standard library and x/sys, so every package that
// reads such a file can use it without an import edge between them (cache
// and upstream know nothing of each other; DESIGN.md). It sits under
// resolver/ beside the other shared leaves (dnswire, dnslisten) because the
// top level of the tree is fixed.
package boundedfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sentinel errors, each wrapped by a *RefusedError that says more.
var (
	// ErrNotRegular: a FIFO, device, socket or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: bigger than its role's Rule.MaxSize.
	ErrTooLarge = errors.New("file too large")
	// ErrSymlink: a symlink where the Rule says NoFollow.
	ErrSymlink = errors.New("file is a symlink")
	// ErrUntrusted: owned by someone else or writable by others, where the
	// Rule says Owned.
	ErrUntrusted = errors.New("file not trusted")
	// ErrChanged: the path was replaced between its check and its open.
	ErrChanged = errors.New("file replaced while being opened")
)

// RefusedError is a file refused before it was read (or, for ErrTooLarge,
// one that grew past its size while read).
type RefusedError struct {
	Path string
	// Why is a sentence fragment for logs: "it is a FIFO, not a regular
	// file".
	Why string
	// Err is one of the sentinels above.
	Err error
}

func (e *RefusedError) Error() string { return e.Path + ": " + e.Why }
func (e *RefusedError) Unwrap() error { return e.Err }

// Rule is how the files of one role are opened. Each role names its own
// next to the code that reads it, with the reason for its size.
type Rule struct {
	// MaxSize is the most bytes such a file may have; a larger one is
	// refused. Must be > 0.
	MaxSize int64
	// NoFollow refuses a symlink as the path's last component: for files
	// towerd writes itself (the saved cache), which are never links, so a
	// link is someone else's. Files others keep (resolv.conf, usually a
	// link into /run/systemd/resolve; hosts files; the config, which
	// configuration managers often link) follow links, and the file at
	// the end of them must pass the rule.
	NoFollow bool
	// Owned refuses a file not owned by root or by this process's
	// effective user, or writable by group or others: for files whose
	// content towerd serves as its own.
	Owned bool
}

// File is an opened file that passed its Rule. Reads stop with
// ErrTooLarge past MaxSize, in case the file grew after its check.
type File struct {
	f    *os.File
	path string
	info fs.FileInfo
	left int64 // bytes Read may still return
}

// Open opens path under r. A missing file is an error wrapping
// fs.ErrNotExist; a refused one a *RefusedError. The type is checked
// before the open, so a device is never opened (opening one can have
// effects of its own), and again on the opened file, which is read.
func Open(path string, r Rule) (*File, error) {
	if r.MaxSize <= 0 {
		return nil, fmt.Errorf("boundedfile: %s: MaxSize must be > 0", path)
	}
	stat := os.Stat
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	if r.NoFollow {
		stat = os.Lstat
		flags |= unix.O_NOFOLLOW
	}
	before, err := stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, before, r); err != nil {
		return nil, err
	}
	fd, err := unix.Open(path, flags, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, flags, 0)
	}
	switch {
	case err == unix.ELOOP && r.NoFollow:
		return nil, refused(path, ErrChanged, "it became a symlink while being opened")
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	// O_NONBLOCK only keeps the open from waiting (a FIFO swapped in after
	// the check); a regular file's reads never block, and clearing it
	// keeps the os.File an ordinary one.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := check(path, info, r); err != nil {
		f.Close()
		return nil, err
	}
	if !os.SameFile(before, info) {
		f.Close()
		return nil, refused(path, ErrChanged, "it was replaced while being opened")
	}
	return &File{f: f, path: path, info: info, left: r.MaxSize}, nil
}

// check applies r to what stat says of path.
func check(path string, info fs.FileInfo, r Rule) error {
	mode := info.Mode()
	switch {
	case mode.IsRegular():
	case mode&fs.ModeSymlink != 0:
		return refused(path, ErrSymlink, "it is a symlink")
	case mode&fs.ModeNamedPipe != 0:
		return refused(path, ErrNotRegular, "it is a FIFO, not a regular file")
	case mode&fs.ModeDevice != 0:
		return refused(path, ErrNotRegular, "it is a device, not a regular file")
	case mode.IsDir():
		return refused(path, ErrNotRegular, "it is a directory, not a regular file")
	default:
		return refused(path, ErrNotRegular, fmt.Sprintf("it is not a regular file (%s)", mode.Type()))
	}
	if info.Size() > r.MaxSize {
		return refused(path, ErrTooLarge, fmt.Sprintf("it has %d bytes, more than the %d this file may have", info.Size(), r.MaxSize))
	}
	if r.Owned {
		if why := untrusted(info); why != "" {
			return refused(path, ErrUntrusted, why)
		}
	}
	return nil
}

// untrusted says why a file towerd would serve as its own is not, or "".
func untrusted(info fs.FileInfo) string {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "its owner cannot be read"
	}
	if euid := os.Geteuid(); int(st.Uid) != euid && st.Uid != 0 {
		return fmt.Sprintf("it is owned by uid %d, neither towerd's user (uid %d) nor root", st.Uid, euid)
	}
	// towerd writes such files 0600: a group-writable one was not written
	// by towerd, and a group is one more party who could have.
	if perm := st.Mode & 0o7777; perm&0o022 != 0 {
		return fmt.Sprintf("it is writable by group or others (mode %04o)", perm)
	}
	return ""
}

func refused(path string, err error, why string) *RefusedError {
	return &RefusedError{Path: path, Why: why, Err: err}
}

// Read reads up to len(p) bytes. Past the Rule's MaxSize it returns a
// *RefusedError wrapping ErrTooLarge: the file grew after it was checked.
func (f *File) Read(p []byte) (int, error) {
	if f.left <= 0 {
		var one [1]byte
		if n, err := f.f.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, refused(f.path, ErrTooLarge, "it grew past the size this file may have while it was read")
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.f.Read(p)
	f.left -= int64(n)
	return n, err
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// ReadFile reads the whole file at path under r.
func ReadFile(path string, r Rule) ([]byte, error) {
	f, err := Open(path, r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// One allocation for the usual case: the size is known and bounded.
	data := make([]byte, 0, f.info.Size()+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)] // it grew since the check; Read bounds it
		}
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		switch {
		case err == io.EOF:
			return data, nil
		case err != nil:
			return nil, err
		}
	}
}
