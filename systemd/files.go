package systemd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// fileSystem is every file operation install and uninstall make, on paths
// as the target system sees them ("/etc/resolv.conf"). rootFS maps them
// under a root directory; tests wrap it to make a rename fail the way a
// bind-mounted /etc/resolv.conf does.
type fileSystem interface {
	Lstat(name string) (fs.FileInfo, error)
	// ReadFile follows symlinks, resolving them inside the root.
	ReadFile(name string) ([]byte, error)
	Readlink(name string) (string, error)
	Symlink(target, name string) error
	// WriteFile creates or truncates name in place and syncs it.
	WriteFile(name string, data []byte, perm fs.FileMode) error
	Chmod(name string, perm fs.FileMode) error
	Rename(oldName, newName string) error
	Remove(name string) error
	Mkdir(name string, perm fs.FileMode) error
}

// rootFS is the real file system under Root ("/" for the live system).
type rootFS struct{ Root string }

var _ fileSystem = rootFS{}

func (r rootFS) real(name string) string {
	if r.Root == "" || r.Root == "/" {
		return filepath.Clean(name)
	}
	return filepath.Join(r.Root, filepath.Clean("/"+name))
}

func (r rootFS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(r.real(name)) }
func (r rootFS) Readlink(name string) (string, error)   { return os.Readlink(r.real(name)) }
func (r rootFS) Symlink(target, name string) error      { return os.Symlink(target, r.real(name)) }
func (r rootFS) Chmod(name string, perm fs.FileMode) error {
	return os.Chmod(r.real(name), perm)
}
func (r rootFS) Rename(oldName, newName string) error {
	return os.Rename(r.real(oldName), r.real(newName))
}
func (r rootFS) Remove(name string) error                  { return os.Remove(r.real(name)) }
func (r rootFS) Mkdir(name string, perm fs.FileMode) error { return os.Mkdir(r.real(name), perm) }

// ReadFile resolves symlinks of the last path element itself, so that an
// absolute link such as /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf
// is read inside the root and not on the machine running the tests.
func (r rootFS) ReadFile(name string) ([]byte, error) {
	resolved, err := resolveLinks(r, name)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(r.real(resolved))
}

func (r rootFS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(r.real(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// resolveLinks follows name while it is a symlink, the way the kernel would
// within the root (40 hops, like Linux's limit).
func resolveLinks(fsys fileSystem, name string) (string, error) {
	for range 40 {
		info, err := fsys.Lstat(name)
		if err != nil || info.Mode()&fs.ModeSymlink == 0 {
			return name, nil // a missing file is reported by the read itself
		}
		target, err := fsys.Readlink(name)
		if err != nil {
			return "", err
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(name), target)
		}
		name = target
	}
	return "", fmt.Errorf("%s: %w", name, syscall.ELOOP)
}

// writeFileAtomic replaces name with data and mode perm: a temp file beside
// it, an explicit chmod (the installing shell's umask must not decide the
// mode of a file every process reads), then a rename over name, so a reader
// sees the old file or the new one, never half of one. When the rename is
// refused, as it is for a bind-mounted file (EBUSY: Docker and Kubernetes
// mount /etc/resolv.conf that way) or across mounts (EXDEV), it writes name
// in place instead; copied then reports that.
func writeFileAtomic(fsys fileSystem, name string, data []byte, perm fs.FileMode) (copied bool, err error) {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".towerd-new")
	if err := fsys.WriteFile(tmp, data, perm); err != nil {
		return false, fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := fsys.Chmod(tmp, perm); err != nil {
		_ = fsys.Remove(tmp)
		return false, fmt.Errorf("setting the mode of %s: %w", tmp, err)
	}
	err = fsys.Rename(tmp, name)
	if err == nil {
		return false, nil
	}
	_ = fsys.Remove(tmp)
	if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EXDEV) {
		return false, fmt.Errorf("replacing %s: %w", name, err)
	}
	if info, lerr := fsys.Lstat(name); lerr == nil && info.Mode()&fs.ModeSymlink != 0 {
		// Writing in place would write through the link into its target.
		return false, fmt.Errorf("replacing %s: %w (and it is a symlink, so it is not written through)", name, err)
	}
	if err := fsys.WriteFile(name, data, perm); err != nil {
		return false, fmt.Errorf("writing %s in place after rename failed: %w", name, err)
	}
	if err := fsys.Chmod(name, perm); err != nil {
		return true, fmt.Errorf("setting the mode of %s: %w", name, err)
	}
	return true, nil
}

// snapshot is what a path holds: nothing, a symlink, or a regular file.
type snapshot struct {
	exists bool
	link   string // symlink target; "" for a regular file
	data   []byte // a regular file's content
	mode   fs.FileMode
}

func (s snapshot) isLink() bool { return s.exists && s.link != "" }

// sum identifies the content, for "is it still what install wrote?".
func (s snapshot) sum() string {
	if !s.exists {
		return ""
	}
	if s.isLink() {
		return "symlink:" + s.link
	}
	return sha256Hex(s.data)
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// look reads what name holds without following a symlink at name itself.
func look(fsys fileSystem, name string) (snapshot, error) {
	info, err := fsys.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return snapshot{}, nil
	}
	if err != nil {
		return snapshot{}, err
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := fsys.Readlink(name)
		if err != nil {
			return snapshot{}, err
		}
		return snapshot{exists: true, link: target, mode: info.Mode()}, nil
	case info.Mode().IsRegular():
		data, err := fsys.ReadFile(name)
		if err != nil {
			return snapshot{}, err
		}
		return snapshot{exists: true, data: data, mode: info.Mode().Perm()}, nil
	}
	return snapshot{}, fmt.Errorf("%s is neither a regular file nor a symlink (%v)", name, info.Mode().Type())
}

// restoreSnapshot puts s back at name: a symlink as a symlink, a file with
// its mode, through writeFileAtomic.
func restoreSnapshot(fsys fileSystem, name string, s snapshot) error {
	if !s.isLink() {
		_, err := writeFileAtomic(fsys, name, s.data, s.mode)
		return err
	}
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".towerd-link")
	_ = fsys.Remove(tmp)
	if err := fsys.Symlink(s.link, tmp); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, name); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("putting back symlink %s -> %s: %w", name, s.link, err)
	}
	return nil
}
