// Package nodefs is the one way towerd's node tools reach a node's files:
// `towerd install` and `uninstall` (their writes and their detectors), and
// whatever else reads a node as it stands under a root directory, a copied
// one included. A Root never reaches outside its root directory, whatever
// links were planted in it (Root's doc says how).
package nodefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// Root is a node's file system under a root directory ("/" for the live
// system). Install runs as root and writes where other users may have planted
// symlinks (issue 13: a link at the temp name made it overwrite a file
// outside the root; a symlinked /etc/systemd/system put the units outside
// it), so nothing is ever reached outside the root:
//
//   - every access goes through an os.Root opened on the root directory,
//     which walks a path one element at a time and refuses any step out of
//     it (an absolute symlink, or ".." above the root), whatever the
//     kernel: no openat2 needed;
//   - reads (ReadFile, ReadDir, Stat) follow symlinks the way the node itself
//     would, an absolute target taken from the root and ".." stopping there
//     (resolve, as openat2's RESOLVE_IN_ROOT or chroot(2) would), so
//     /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf is read
//     under the root, never on the machine running the tests; ReadFile
//     reads only a regular file;
//   - everything else acts on a path's last element itself, never on what
//     a symlink there points at, in a directory whose path may follow a
//     relative link that stays inside (/bin -> usr/bin on merged-/usr
//     systems) but not one that leads out of the root: that is refused, and
//     the error says so (ErrEscapesRoot), as openat2's RESOLVE_BENEATH would;
//   - files are created O_CREAT|O_EXCL under a random name (TempName),
//     written ones opened O_NOFOLLOW, and modes set with fchmod on the open
//     file, so the installing shell's umask decides nothing.
//
// Names are absolute, as the node sees them ("/etc/resolv.conf"). A
// Root is safe for use by one goroutine at a time; Close it when done.
type Root struct {
	root *os.Root
	// readLimit bounds ReadFile (MaxNodeFile unless SetReadLimit).
	readLimit int64
}

// Open opens dir as a node's root ("" is "/"). The root itself is
// the operator's choice and may be reached through a link.
func Open(dir string) (*Root, error) {
	if dir == "" {
		dir = "/"
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening root %s: %w", dir, err)
	}
	return &Root{root: r, readLimit: MaxNodeFile}, nil
}

// Close releases the root directory.
func (n *Root) Close() error { return n.root.Close() }

// ErrEscapesRoot is wrapped when a path leads out of the root.
var ErrEscapesRoot = errors.New("a symlinked directory on the path leads out of the root; refusing to follow it")

// maxLinks is how many symlinks one path may pass through, as on Linux.
const maxLinks = 40

// rel is the node path name relative to the root, "." for the root itself.
func rel(name string) string {
	if r := strings.TrimPrefix(path.Clean("/"+name), "/"); r != "" {
		return r
	}
	return "."
}

// resolve follows the symlinks in name element by element and returns the
// path of what it names, with no link left on it. With inRoot, a link is
// taken as the node would take it: an absolute target starts again at the
// root, and ".." at the root stays there. Without, a link that leads out of
// the root (an absolute one, or one with enough "..") is refused with
// ErrEscapesRoot. A missing element ends the walk: the rest is appended as
// it is, so the operation that follows reports fs.ErrNotExist.
func (n *Root) resolve(name string, inRoot bool) (string, error) {
	todo := strings.Split(rel(name), "/")
	done := "/"
	for links := 0; len(todo) > 0; {
		elem := todo[0]
		todo = todo[1:]
		switch {
		case elem == "" || elem == ".":
			continue
		case elem == ".." && done == "/" && !inRoot:
			return "", ErrEscapesRoot
		case elem == "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, elem)
		info, err := n.root.Lstat(rel(next))
		if err != nil {
			return path.Join(append([]string{next}, todo...)...), nil
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", syscall.ELOOP
		}
		target, err := n.root.Readlink(rel(next))
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			if !inRoot {
				return "", ErrEscapesRoot
			}
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// entry is name relative to the root with its directory resolved (not
// inRoot): the path the operations on the last element act on.
func (n *Root) entry(name string) (string, error) {
	clean := path.Clean("/" + name)
	if clean == "/" {
		return ".", nil
	}
	dir, err := n.resolve(path.Dir(clean), false)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: path.Dir(clean), Err: err}
	}
	return rel(path.Join(dir, path.Base(clean))), nil
}

// named puts the node's name for a path in err, which os.Root gives
// relative to the root.
func named(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		pe.Path = name
	}
	return err
}

// Lstat describes name itself, not what a symlink there points at.
func (n *Root) Lstat(name string) (fs.FileInfo, error) {
	p, err := n.entry(name)
	if err != nil {
		return nil, err
	}
	info, err := n.root.Lstat(p)
	return info, named(err, name)
}

// Readlink returns the target of the symlink name, as written.
func (n *Root) Readlink(name string) (string, error) {
	p, err := n.entry(name)
	if err != nil {
		return "", err
	}
	target, err := n.root.Readlink(p)
	return target, named(err, name)
}

// MaxNodeFile bounds every file ReadFile reads, unless SetReadLimit sets
// another bound: install compares the towerd program it replaces (tens
// of MB) before it writes; a file larger than that under a root is
// planted or broken, and a copied node's cannot make a reader hold
// gigabytes.
const MaxNodeFile = 256 << 20

// ErrNotRegular and ErrTooLarge are wrapped by ReadFile for what it
// refuses to read.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("larger than the bound on a node file")
)

// SetReadLimit sets the bound of ReadFile, for a reader that needs only a
// node's configuration files (towerd doctor: 4 MiB).
func (n *Root) SetReadLimit(max int64) { n.readLimit = max }

// ReadFile reads the regular file name, following symlinks inside the
// root, up to the read limit (MaxNodeFile).
func (n *Root) ReadFile(name string) ([]byte, error) { return n.ReadFileMax(name, n.readLimit) }

// ReadFileMax reads name as ReadFile does, refusing more than max bytes.
// Only a regular file is read, and it is opened without blocking: a FIFO
// or device planted at the name (/dev/zero at /etc/resolv.conf) neither
// hangs the reader nor feeds it without end, and a sparse file of many
// GiB is refused by its size. /proc's files say they are regular and of
// size 0: they are read up to the bound.
func (n *Root) ReadFileMax(name string, max int64) ([]byte, error) {
	p, err := n.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := n.root.OpenFile(rel(p), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, named(err, name)
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return nil, named(err, name)
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("%s: %w (%v)", name, ErrNotRegular, info.Mode().Type())
	case info.Size() > max:
		return nil, fmt.Errorf("%s: %d bytes: %w (%d)", name, info.Size(), ErrTooLarge, max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %w (%d)", name, ErrTooLarge, max)
	}
	return data, named(err, name)
}

// Stat describes what name names, following symlinks inside the root as
// ReadFile does.
func (n *Root) Stat(name string) (fs.FileInfo, error) {
	p, err := n.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	info, err := n.root.Lstat(rel(p))
	return info, named(err, name)
}

// ReadDir lists the directory name, following symlinks inside the root,
// sorted by entry name.
func (n *Root) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := n.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := n.root.Open(rel(p))
	if err != nil {
		return nil, named(err, name)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, named(err, name)
}
