package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rootFS is the real file system under Root ("/" for the live system).
// Install runs as root and writes where other users may have planted
// symlinks (issue 13: a link at the temp name made it overwrite a file
// outside the root; a symlinked /etc/systemd/system put the units outside
// it), so no path is handed to the kernel as a string from the real "/":
//
//   - the directory of every path is opened from Root with openat2(2) and
//     RESOLVE_BENEATH: a symlinked directory on the way that leads out of
//     the root (an absolute link, or one with enough "..") fails, and the
//     error says so (errEscapesRoot); a relative link that stays inside is
//     followed, as /bin -> usr/bin is on merged-/usr systems;
//   - the last element is then used relative to that directory and never
//     followed: files are created O_CREAT|O_EXCL|O_NOFOLLOW under a random
//     name, written files are opened O_NOFOLLOW, modes are set with fchmod
//     on the open file, and rename, unlink and symlink act on the entry;
//   - only reads follow symlinks, and only inside the root
//     (RESOLVE_IN_ROOT): /etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf
//     is read under the root, never on the machine running the tests.
//
// Kernels without openat2 (before 5.6) get a walk with one openat per
// element, O_NOFOLLOW: every symlinked directory is then refused.
type rootFS struct{ Root string }

var _ fileSystem = rootFS{}

// errEscapesRoot is wrapped when a path leads out of the root.
var errEscapesRoot = errors.New("a symlinked directory on the path leads out of the root; refusing to follow it")

func (r rootFS) rootDir() string {
	if r.Root == "" {
		return "/"
	}
	return r.Root
}

// rel is name relative to the root, "." for the root itself.
func rel(name string) string {
	if r := strings.TrimPrefix(path.Clean("/"+name), "/"); r != "" {
		return r
	}
	return "."
}

// openRoot opens the root directory; the root itself is the operator's
// choice and may be a link.
func (r rootFS) openRoot() (int, error) {
	fd, err := unix.Open(r.rootDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: r.rootDir(), Err: err}
	}
	return fd, nil
}

// openDir opens directory dir (a path as the target sees it) beneath the
// root, with flags (O_PATH, or O_RDONLY to list it).
func (r rootFS) openDir(dir string, flags int) (int, error) {
	rootFD, err := r.openRoot()
	if err != nil {
		return -1, err
	}
	defer unix.Close(rootFD)
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_DIRECTORY | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := openat2(rootFD, rel(dir), how)
	if errors.Is(err, unix.ENOSYS) {
		return walkNoFollow(rootFD, rel(dir), flags)
	}
	if errors.Is(err, unix.EXDEV) {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: errEscapesRoot}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// walkNoFollow opens rel below dirFD one element at a time, never
// following a symlink.
func walkNoFollow(dirFD int, rel string, flags int) (int, error) {
	fd, err := unix.Dup(dirFD)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		f := unix.O_PATH
		if i == len(parts)-1 {
			f = flags
		}
		next, err := retryEINTR(func() (int, error) {
			return unix.Openat(fd, p, f|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, &fs.PathError{Op: "open", Path: "/" + rel, Err: errEscapesRoot}
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: "/" + rel, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// inDir runs op on name's last element, relative to its directory opened
// beneath the root.
func (r rootFS) inDir(name string, op func(dirFD int, base string) error) error {
	dirFD, err := r.openDir(path.Dir(path.Clean("/"+name)), unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(dirFD)
	return op(dirFD, path.Base(path.Clean("/"+name)))
}

func (r rootFS) Lstat(name string) (fs.FileInfo, error) {
	var info fs.FileInfo
	err := r.inDir(name, func(dirFD int, base string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(dirFD, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: name, Err: err}
		}
		info = statInfo{name: base, st: st}
		return nil
	})
	return info, err
}

func (r rootFS) Readlink(name string) (string, error) {
	var target string
	err := r.inDir(name, func(dirFD int, base string) error {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirFD, base, buf)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		target = string(buf[:n])
		return nil
	})
	return target, err
}

func (r rootFS) Symlink(target, name string) error {
	return r.inDir(name, func(dirFD int, base string) error {
		if err := unix.Symlinkat(target, dirFD, base); err != nil {
			return &fs.PathError{Op: "symlink", Path: name, Err: err}
		}
		return nil
	})
}

func (r rootFS) Rename(oldName, newName string) error {
	return r.inDir(oldName, func(oldFD int, oldBase string) error {
		return r.inDir(newName, func(newFD int, newBase string) error {
			if err := unix.Renameat(oldFD, oldBase, newFD, newBase); err != nil {
				return &os.LinkError{Op: "rename", Old: oldName, New: newName, Err: err}
			}
			return nil
		})
	})
}

// Remove removes a file, link or empty directory, as os.Remove does.
func (r rootFS) Remove(name string) error {
	return r.inDir(name, func(dirFD int, base string) error {
		err := unix.Unlinkat(dirFD, base, 0)
		if errors.Is(err, unix.EISDIR) {
			err = unix.Unlinkat(dirFD, base, unix.AT_REMOVEDIR)
		}
		if err != nil {
			return &fs.PathError{Op: "remove", Path: name, Err: err}
		}
		return nil
	})
}

// Mkdir creates name with exactly perm, whatever the umask: the mode is
// set on the new directory opened without following a link.
func (r rootFS) Mkdir(name string, perm fs.FileMode) error {
	return r.inDir(name, func(dirFD int, base string) error {
		if err := unix.Mkdirat(dirFD, base, uint32(perm.Perm())); err != nil {
			return &fs.PathError{Op: "mkdir", Path: name, Err: err}
		}
		fd, err := unix.Openat(dirFD, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		defer unix.Close(fd)
		if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
			return &fs.PathError{Op: "fchmod", Path: name, Err: err}
		}
		return nil
	})
}

func (r rootFS) ReadDir(name string) ([]string, error) {
	fd, err := r.openDir(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// ReadFile follows symlinks, but only inside the root, and reads only a
// regular file: a FIFO or device planted at the name neither blocks nor
// feeds install.
func (r rootFS) ReadFile(name string) ([]byte, error) {
	rootFD, err := r.openRoot()
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFD)
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	how := &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := openat2(rootFD, rel(name), how)
	if errors.Is(err, unix.ENOSYS) {
		return r.readFileWalking(name)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return readRegular(fd, name)
}

// readFileWalking is ReadFile without openat2: links are followed by
// resolveLinks, inside the root, and the file is opened O_NOFOLLOW.
func (r rootFS) readFileWalking(name string) ([]byte, error) {
	resolved, err := resolveLinks(r, name)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = r.inDir(resolved, func(dirFD int, base string) error {
		fd, err := unix.Openat(dirFD, base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		data, err = readRegular(fd, name)
		return err
	})
	return data, err
}

func readRegular(fd int, name string) ([]byte, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", name, info.Mode().Type())
	}
	return io.ReadAll(f)
}

// WriteTemp creates a new file beside name under an unpredictable name
// (tempName), never following or reusing anything there (O_CREAT|O_EXCL|
// O_NOFOLLOW), writes data, sets perm on the open file and syncs it.
func (r rootFS) WriteTemp(name string, data []byte, perm fs.FileMode) (string, error) {
	var tmp string
	err := r.inDir(name, func(dirFD int, base string) error {
		var fd int
		var err error
		for range 8 { // a collision of 64 random bits is someone guessing
			tmp = tempName(name)
			fd, err = unix.Openat(dirFD, path.Base(tmp), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if !errors.Is(err, unix.EEXIST) {
				break
			}
		}
		if err != nil {
			return &fs.PathError{Op: "create", Path: tmp, Err: err}
		}
		if err := writeSynced(fd, tmp, data, perm); err != nil {
			_ = unix.Unlinkat(dirFD, path.Base(tmp), 0)
			return err
		}
		return nil
	})
	return tmp, err
}

// Overwrite writes data into the regular file name in place, with mode
// perm: for a file that cannot be replaced by a rename (a bind mount). A
// symlink at name is refused, not written through.
func (r rootFS) Overwrite(name string, data []byte, perm fs.FileMode) error {
	return r.inDir(name, func(dirFD int, base string) error {
		fd, err := unix.Openat(dirFD, base, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return fmt.Errorf("%s is not a regular file: not written in place", name)
		}
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "truncate", Path: name, Err: err}
		}
		return writeSynced(fd, name, data, perm)
	})
}

// writeSynced writes data to fd, sets perm with fchmod (the installing
// shell's umask must not decide the mode of a file every process reads),
// syncs and closes it.
func writeSynced(fd int, name string, data []byte, perm fs.FileMode) error {
	f := os.NewFile(uintptr(fd), name)
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

// openat2 is unix.Openat2 retried as openat2(2) asks: after EINTR, and
// after EAGAIN, which RESOLVE_BENEATH and RESOLVE_IN_ROOT return when a
// rename anywhere on the system raced the lookup (seen under a parallel
// test run). EAGAIN is retried a bounded number of times, so a system busy
// renaming gives an error rather than a spin.
func openat2(dirFD int, path string, how *unix.OpenHow) (int, error) {
	const attempts = 32
	var (
		fd  int
		err error
	)
	for range attempts {
		fd, err = retryEINTR(func() (int, error) { return unix.Openat2(dirFD, path, how) })
		if !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	return fd, err
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// statInfo is fs.FileInfo from fstatat(2).
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return &s.st }

func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
