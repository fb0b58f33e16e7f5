package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// nodeFiles is what the detectors (resolv.conf managers, Docker, dnsmasq,
// packaged units) read of a node: names are absolute as the node sees them.
// nodefs.Root is the one implementation; tools that only look at a node
// pass one opened with nodefs.Open.
type nodeFiles interface {
	// Lstat describes name itself, not what a symlink there points at.
	Lstat(name string) (fs.FileInfo, error)
	// ReadFile follows symlinks, resolving them inside the root, and reads
	// only a regular file.
	ReadFile(name string) ([]byte, error)
	Readlink(name string) (string, error)
	// ReadDir lists a directory sorted by name, following symlinks inside
	// the root.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat describes what name leads to, following symlinks inside the
	// root.
	Stat(name string) (fs.FileInfo, error)
}

// fileSystem is every file operation install and uninstall make: the reads
// the detectors make, and the changes. nodefs.Root makes them under a
// root directory without ever following a link out of it; tests
// wrap it to make a rename fail the way a bind-mounted /etc/resolv.conf
// does, or to kill an install after any number of steps. There is no chmod
// by name: a mode is set on the open file.
type fileSystem interface {
	nodeFiles
	Symlink(target, name string) error
	// WriteTemp creates a new file with an unpredictable name (nodefs.TempName)
	// beside name, writes data with mode perm, syncs it and returns its name.
	WriteTemp(name string, data []byte, perm fs.FileMode) (string, error)
	// Overwrite writes data into the existing regular file name in place,
	// with mode perm, and syncs it; a symlink at name is refused.
	Overwrite(name string, data []byte, perm fs.FileMode) error
	Rename(oldName, newName string) error
	Remove(name string) error
	// Mkdir creates a directory with exactly perm, whatever the umask.
	Mkdir(name string, perm fs.FileMode) error
}

var _ fileSystem = (*nodefs.Root)(nil)

// writeFileAtomic replaces name with data and mode perm: a new temp file
// beside it under a random name, its mode set on the open file, then a
// rename over name, so a reader sees the old file or the new one, never half
// of one, and a symlink at name is replaced, never written through. When the
// rename is refused, as it is for a bind-mounted file (EBUSY: Docker and
// Kubernetes mount /etc/resolv.conf that way) or across mounts (EXDEV), it
// writes name in place instead; copied then reports that.
func writeFileAtomic(fsys fileSystem, name string, data []byte, perm fs.FileMode) (copied bool, err error) {
	tmp, err := fsys.WriteTemp(name, data, perm)
	if err != nil {
		return false, fmt.Errorf("writing a new %s: %w", name, err)
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
	if err := fsys.Overwrite(name, data, perm); err != nil {
		return false, fmt.Errorf("writing %s in place after rename failed: %w", name, err)
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
	// symlink(2) never follows or replaces what is at its name, and the
	// name is random: a link planted in advance cannot be in the way.
	tmp := nodefs.TempName(name)
	if err := fsys.Symlink(s.link, tmp); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, name); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("putting back symlink %s -> %s: %w", name, s.link, err)
	}
	return nil
}

// linkTarget is where the symlink name points, as a clean absolute path
// inside the root, or "" when name is not a symlink.
func linkTarget(files nodeFiles, name string) string {
	fi, err := files.Lstat(name)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return ""
	}
	target, err := files.Readlink(name)
	if err != nil {
		return ""
	}
	if !strings.HasPrefix(target, "/") {
		target = path.Join(path.Dir(name), target)
	}
	return path.Clean(target)
}

// nodeHas tells whether name exists under the root (a dangling symlink
// counts: something put it there).
func nodeHas(files nodeFiles, name string) bool {
	_, err := files.Lstat(name)
	return err == nil
}
