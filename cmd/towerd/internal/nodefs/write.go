package nodefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// The operations that change a node's files, each on a path's last element
// itself (Root's rules).

// Symlink creates name as a symlink to target; symlink(2) never follows or
// replaces what is at name.
func (n *Root) Symlink(target, name string) error {
	p, err := n.entry(name)
	if err != nil {
		return err
	}
	if err := n.root.Symlink(target, p); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: name, Err: errors.Unwrap(err)}
	}
	return nil
}

// Rename renames the entry oldName to newName, replacing what newName
// names, a symlink included, never what it points at.
func (n *Root) Rename(oldName, newName string) error {
	oldP, err := n.entry(oldName)
	if err != nil {
		return err
	}
	newP, err := n.entry(newName)
	if err != nil {
		return err
	}
	if err := n.root.Rename(oldP, newP); err != nil {
		return &os.LinkError{Op: "rename", Old: oldName, New: newName, Err: errors.Unwrap(err)}
	}
	return nil
}

// Remove removes a file, link or empty directory, as os.Remove does.
func (n *Root) Remove(name string) error {
	p, err := n.entry(name)
	if err != nil {
		return err
	}
	return named(n.root.Remove(p), name)
}

// Mkdir creates name with exactly perm, whatever the umask: the mode is
// set on the new directory opened without following a link.
func (n *Root) Mkdir(name string, perm fs.FileMode) error {
	p, err := n.entry(name)
	if err != nil {
		return err
	}
	if err := n.root.Mkdir(p, perm.Perm()); err != nil {
		return named(err, name)
	}
	f, err := n.openEntry(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(perm.Perm()); err != nil {
		return named(err, name)
	}
	return nil
}

// WriteTemp creates a new file beside name under an unpredictable name
// (TempName), never following or reusing anything there (O_CREAT|O_EXCL|
// O_NOFOLLOW), writes data, sets perm on the open file and syncs it.
func (n *Root) WriteTemp(name string, data []byte, perm fs.FileMode) (string, error) {
	var tmp string
	var f *os.File
	var err error
	for range 8 { // a collision of 64 random bits is someone guessing
		tmp = TempName(name)
		f, err = n.openEntry(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	if err := writeSynced(f, data, perm); err != nil {
		_ = n.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// Overwrite writes data into the regular file name in place, with mode
// perm: for a file that cannot be replaced by a rename (a bind mount). A
// symlink at name is refused, not written through.
func (n *Root) Overwrite(name string, data []byte, perm fs.FileMode) error {
	f, err := n.openEntry(name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("%s is not a regular file: not written in place", name)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return named(err, name)
	}
	return writeSynced(f, data, perm)
}

// openEntry opens name itself with flags, O_NOFOLLOW added: its directory
// through the root, then the last element relative to that directory, so a
// symlink there fails the open (ELOOP) instead of being followed.
func (n *Root) openEntry(name string, flags int, perm fs.FileMode) (*os.File, error) {
	p, err := n.entry(name)
	if err != nil {
		return nil, err
	}
	dir, err := n.root.Open(path.Dir(p))
	if err != nil {
		return nil, named(err, path.Dir(path.Clean("/"+name)))
	}
	defer dir.Close()
	raw, err := dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	ctlErr := raw.Control(func(dirFD uintptr) {
		for {
			fd, err = unix.Openat(int(dirFD), path.Base(p), flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	})
	if ctlErr != nil {
		return nil, ctlErr
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// writeSynced writes data to f, sets perm with fchmod (the installing
// shell's umask must not decide the mode of a file every process reads),
// syncs and closes it.
func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm) // fchmod(2) on the open file
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
