package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// nodeFiles is what the detectors (resolv.conf managers, Docker, dnsmasq)
// need from a node's file system. Names are absolute as the node sees them.
type nodeFiles interface {
	Lstat(name string) (fs.FileInfo, error)
	// ReadFile follows symlinks, absolute ones taken inside the root.
	ReadFile(name string) ([]byte, error)
	Readlink(name string) (string, error)
	// ReadDir lists a directory sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
}

// NodeRoot reads a node's files under a root directory ("/" for the live
// system) and never outside it: symlinks are resolved by hand, an absolute
// target taken relative to the root, and every access goes through os.Root,
// which refuses to leave it.
type NodeRoot struct {
	root *os.Root
}

var _ nodeFiles = (*NodeRoot)(nil)

// OpenNodeRoot opens dir as a node's root. Close it when done.
func OpenNodeRoot(dir string) (*NodeRoot, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening root %s: %w", dir, err)
	}
	return &NodeRoot{root: r}, nil
}

// Close releases the root directory.
func (n *NodeRoot) Close() error { return n.root.Close() }

// nodeRel turns a node path into one relative to the root.
func nodeRel(name string) string {
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "" {
		return "."
	}
	return p
}

// Lstat describes name itself, not what a symlink points at.
func (n *NodeRoot) Lstat(name string) (fs.FileInfo, error) { return n.root.Lstat(nodeRel(name)) }

// Readlink returns a symlink's target as written.
func (n *NodeRoot) Readlink(name string) (string, error) { return n.root.Readlink(nodeRel(name)) }

// ReadFile reads name after resolving every symlink on its way.
func (n *NodeRoot) ReadFile(name string) ([]byte, error) {
	real, err := resolveInRoot(n, name)
	if err != nil {
		return nil, err
	}
	return n.root.ReadFile(nodeRel(real))
}

// ReadDir lists name (symlinks resolved) sorted by entry name.
func (n *NodeRoot) ReadDir(name string) ([]fs.DirEntry, error) {
	real, err := resolveInRoot(n, name)
	if err != nil {
		return nil, err
	}
	f, err := n.root.Open(nodeRel(real))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// errTooManyLinks is returned for a symlink loop.
var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolveInRoot follows the symlinks in name component by component, as
// the kernel would with the root as "/", and returns the path of what it
// names. A missing component ends the walk: the rest is appended as is, so
// the caller's read reports fs.ErrNotExist.
func resolveInRoot(files nodeFiles, name string) (string, error) {
	todo := strings.Split(strings.TrimPrefix(path.Clean("/"+name), "/"), "/")
	done := "/"
	for hops := 0; len(todo) > 0; {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		fi, err := files.Lstat(next)
		if err != nil {
			return path.Join(append([]string{next}, todo...)...), nil
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("resolving %s: %w", name, errTooManyLinks)
		}
		target, err := files.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
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
