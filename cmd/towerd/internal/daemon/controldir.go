package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// Where the control socket may live (issue 35). Whoever may write the
// socket's directory may rename towerd's socket aside and serve the path
// with a program of their own: root's `towerd flush`, `cache load` (the
// file handed over) and `lookup` then go to them. Whoever may write a
// directory above it may rename the whole directory. ssh-agent and systemd
// make their sockets in a directory only the owner may write; towerd
// refuses any other, and says which directory and how to fix it.

// errUnsafeControlDir wraps every refusal of checkControlDir.
var errUnsafeControlDir = errors.New("unsafe control socket directory")

// checkControlDir refuses dir, the control socket's directory, unless root
// or uid (towerd's user) owns it and every directory above it, dir is
// writable by its owner alone, and each directory above is writable by its
// owner alone or sticky (as /tmp: others may not rename what is not
// theirs). Symbolic links on the way are held to the same owners, and the
// directories they lead to are checked too.
func checkControlDir(dir string, uid uint32) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", abs, err)
	}
	// The path as configured: each component, links included, must be
	// owned by root or towerd (a link's owner may point it elsewhere).
	if err := checkComponents(abs, uid); err != nil {
		return err
	}
	if real != abs {
		if err := checkComponents(real, uid); err != nil {
			return err
		}
	}
	// The socket's own directory: a sticky bit does not help here, since
	// anyone may make a file at a name that is free (while towerd restarts).
	return checkOne(real, uid, false)
}

// checkComponents checks every component of path from / down as a
// directory above the socket's (the caller checks the socket's own more
// strictly).
func checkComponents(path string, uid uint32) error {
	var parts []string
	for p := path; ; p = filepath.Dir(p) {
		parts = append(parts, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		if err := checkOne(parts[i], uid, true); err != nil {
			return err
		}
	}
	return nil
}

// checkOne checks one path component, not following it. above says the
// component is a directory above the socket's, where a sticky bit makes
// others' write permission harmless.
func checkOne(p string, uid uint32, above bool) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fmt.Errorf("checking %s: %w", p, &fs.PathError{Op: "lstat", Path: p, Err: err})
	}
	if st.Uid != 0 && st.Uid != uid {
		return fmt.Errorf("%w: %s belongs to uid %d, not to root or towerd's user (uid %d), so that user may "+
			"replace the control socket; put [control] socket in a directory of root or towerd "+
			"(such as /run/towerd), or chown root %s", errUnsafeControlDir, p, st.Uid, uid, p)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return nil // a link's own mode means nothing; where it leads is checked
	}
	if st.Mode&0o022 == 0 || (above && st.Mode&syscall.S_ISVTX != 0) {
		return nil
	}
	return fmt.Errorf("%w: %s is writable by others than its owner (mode %04o), who may replace the control "+
		"socket with their own; chmod go-w %s, or put [control] socket in a directory only root or towerd may "+
		"write (such as /run/towerd)", errUnsafeControlDir, p, st.Mode&0o7777, p)
}
