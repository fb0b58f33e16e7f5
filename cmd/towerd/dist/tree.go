package main

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/towerd/towerd/systemd"
)

// tree is the package's files before they are written: paths as installed
// ("/usr/bin/towerd"), and the DEBIAN control files apart.
type tree struct {
	root    string
	files   []treeFile
	control []treeFile
}

type treeFile struct {
	path string
	data []byte
	mode os.FileMode
}

func (t *tree) add(p string, data []byte, mode os.FileMode) {
	t.files = append(t.files, treeFile{p, data, mode})
}

func (t *tree) addControl(name string, data []byte, mode os.FileMode) {
	t.control = append(t.control, treeFile{"/DEBIAN/" + name, data, mode})
}

// addUnits renders the units with systemd.Units, the function `towerd
// install` writes them with, so the package's units are the repository's
// with ExecStart naming the packaged binary.
func addUnits(t *tree) error {
	units, err := systemd.Units(binaryPath)
	if err != nil {
		return err
	}
	for _, u := range units {
		if u.Name == systemd.ServiceUnitName && !strings.Contains(u.Content, "ExecStart="+binaryPath+" ") {
			return fmt.Errorf("%s: ExecStart does not name %s", u.Name, binaryPath)
		}
		t.add(unitDir+"/"+u.Name, []byte(u.Content), 0o644)
	}
	return nil
}

// md5sums is dpkg's DEBIAN/md5sums: every file but the conffiles, which
// dpkg tracks by their own checksums.
func (t *tree) md5sums() []byte {
	var b bytes.Buffer
	for _, f := range t.sorted() {
		if f.path == configPath {
			continue
		}
		fmt.Fprintf(&b, "%x  %s\n", md5.Sum(f.data), strings.TrimPrefix(f.path, "/"))
	}
	return b.Bytes()
}

// installedSizeKiB estimates the disk use as dpkg-gencontrol does: each
// file rounded up to whole KiB, plus one KiB per directory.
func (t *tree) installedSizeKiB() int64 {
	var kib int64
	for _, f := range t.files {
		kib += (int64(len(f.data)) + 1023) / 1024
	}
	return kib + int64(len(t.dirs()))
}

func (t *tree) sorted() []treeFile {
	files := append([]treeFile(nil), t.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files
}

// dirs lists every directory the package's files need.
func (t *tree) dirs() []string {
	seen := map[string]bool{}
	for _, f := range t.files {
		for d := path.Dir(f.path); d != "/" && !seen[d]; d = path.Dir(d) {
			seen[d] = true
		}
	}
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// write puts the tree on disk with the modes dpkg-deb packs (directories
// 0755) and every time stamp at stamp, so one commit builds one package.
func (t *tree) write(stamp time.Time) error {
	dirs := append(t.dirs(), "/DEBIAN")
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(t.root, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range append(t.sorted(), t.control...) {
		p := filepath.Join(t.root, f.path)
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			return err
		}
		if err := os.Chtimes(p, stamp, stamp); err != nil {
			return err
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range append(dirs, "/") {
		p := filepath.Join(t.root, d)
		if err := os.Chmod(p, 0o755); err != nil {
			return err
		}
		if err := os.Chtimes(p, stamp, stamp); err != nil {
			return err
		}
	}
	return nil
}

// gz compresses as `gzip -9n` does: best compression, no name, no time.
func gz(data []byte) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	w.OS = 3 // Unix, as gzip writes it
	_, _ = w.Write(data)
	_ = w.Close()
	return b.Bytes()
}

func control(o options, installedKiB int64) string {
	return fmt.Sprintf(`Package: towerd
Version: %s
Architecture: %s
Maintainer: %s
Installed-Size: %d
Section: net
Priority: optional
Homepage: https://github.com/towerd/towerd
Description: per-node caching DNS resolver with serve-stale and split forwarding
 towerd runs on 127.0.0.1:53 of every node of a service-discovery fleet and
 absorbs the jitter of the shared resolver behind it: answers come from an
 LRU cache, stale answers are served when the upstream times out or fails
 (RFC 8767), consul. goes to the local Consul agent and everything else to
 the site's resolvers, and NXDOMAIN is never cached. Healthy Consul
 services are answered from memory, pushed by blocking queries to the
 local agent.
 .
 The package installs the program, its systemd units (socket-activated,
 without privileges) and a commented configuration; it starts nothing.
 "towerd install" makes towerd the node's resolver.
`, o.version, o.arch, o.maintainer, installedKiB)
}

// changelog is the package's changelog: one entry for the version
// built, dated by the commit. The project's history is its git log.
func changelog(version, maintainer string, stamp time.Time) string {
	return fmt.Sprintf(`towerd (%s) unstable; urgency=medium

  * Built from the towerd repository at %s.
    The changes are in its git log: https://github.com/towerd/towerd

 -- %s  %s
`, version, "v"+version, maintainer, stamp.Format("Mon, 02 Jan 2006 15:04:05 -0700"))
}
