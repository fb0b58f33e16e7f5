package install

import (
	"io/fs"
	"path"
	"slices"
)

// nodeView lets the detectors (which read through nodeFiles) look at the
// root through the same fileSystem install writes with, so what they see
// is what install changes, kills and planted links included.
type nodeView struct{ fsys fileSystem }

var _ nodeFiles = nodeView{}

func (v nodeView) Lstat(name string) (fs.FileInfo, error) { return v.fsys.Lstat(name) }
func (v nodeView) ReadFile(name string) ([]byte, error)   { return v.fsys.ReadFile(name) }
func (v nodeView) Readlink(name string) (string, error)   { return v.fsys.Readlink(name) }

// ReadDir lists name, symlinks on its way resolved inside the root, sorted
// by entry name.
func (v nodeView) ReadDir(name string) ([]fs.DirEntry, error) {
	real, err := resolveInRoot(v, name)
	if err != nil {
		return nil, err
	}
	names, err := v.fsys.ReadDir(real)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	entries := make([]fs.DirEntry, 0, len(names))
	for _, n := range names {
		info, err := v.fsys.Lstat(path.Join(real, n))
		if err != nil {
			continue // gone since the listing
		}
		entries = append(entries, fs.FileInfoToDirEntry(info))
	}
	return entries, nil
}
