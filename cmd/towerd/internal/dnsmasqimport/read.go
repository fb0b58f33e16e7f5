package dnsmasqimport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Directive is one "option" or "option=value" line of a dnsmasq
// configuration, with where it came from for the report. install keeps
// an import's directives in its record, as JSON.
type Directive struct {
	File  string `json:"file"`            // the file it was read from
	Line  int    `json:"line"`            // its line in File, from 1
	Name  string `json:"name"`            // the option, e.g. "server"
	Value string `json:"value,omitempty"` // after "=", unquoted; "" without one
	Has   bool   `json:"has,omitempty"`   // "=" was present (use-stale-cache vs use-stale-cache=0)
}

// String is the directive as written, "name" or "name=value".
func (d Directive) String() string {
	if d.Has {
		return d.Name + "=" + d.Value
	}
	return d.Name
}

func (d Directive) where() string { return fmt.Sprintf("%s:%d", d.File, d.Line) }

// maxIncludeDepth bounds conf-file/conf-dir nesting; dnsmasq has no limit,
// but a file including itself must not hang the import.
const maxIncludeDepth = 10

// Files is what the import reads through: a node's files as the node sees
// them, every name absolute (nodefs.Root, for "/" or a copied node's root).
type Files interface {
	ReadFile(name string) ([]byte, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
}

// Reading is what an import read: the directives, in the order dnsmasq
// reads them, and every file they came from.
type Reading struct {
	Directives []Directive
	// Files are the files read, in order, each once.
	Files []FileRead
	// Debian holds the variables Debian's /etc/default/dnsmasq sets
	// (ENABLED, CONFIG_DIR, ...); nil when ReadNode found no such file.
	Debian map[string]string
}

// FileRead is one file read, and why.
type FileRead struct {
	Path string
	// Why names what made dnsmasq read it: "the configuration file",
	// "conf-dir=/etc/dnsmasq.d at /etc/default/dnsmasq:29", ...
	Why string
}

// Paths are the files read, in order.
func (r Reading) Paths() []string {
	out := make([]string, len(r.Files))
	for i, f := range r.Files {
		out[i] = f.Path
	}
	return out
}

// Read reads each of paths as the node under files sees it (a file, or a
// directory) and, in place, every file its conf-file=, conf-dir= and
// servers-file= directives name. A directory the node's dnsmasq reads as a
// conf-dir is read as it does (Debian's CONFIG_DIR leaves out .dpkg-old
// files, say); any other as conf-dir=DIR. A file reached twice is read
// once: dnsmasq would read it again, which adds nothing but duplicates.
func Read(files Files, paths []string) (Reading, error) {
	rd := &reader{files: files, reading: map[string]bool{}, seen: map[string]bool{}}
	for _, p := range paths {
		p = path.Clean("/" + p)
		info, err := files.Stat(p)
		if err != nil {
			return rd.out, err
		}
		if !info.IsDir() {
			if err := rd.readFile(p, "named", 0); err != nil {
				return rd.out, err
			}
			continue
		}
		spec, why := nodeConfDir(files, p)
		if err := rd.readDir(spec, why, 0); err != nil {
			return rd.out, err
		}
	}
	return rd.out, nil
}

// nodeConfDir is how the node's dnsmasq reads the directory dir: the value
// of its conf-dir= for dir, with its extensions, and why; "dir" itself when
// it reads none.
func nodeConfDir(files Files, dir string) (spec, why string) {
	node, _ := ReadNode(files)
	for _, d := range node.Directives {
		if d.Name == "conf-dir" && path.Clean("/"+strings.TrimSpace(strings.Split(d.Value, ",")[0])) == dir {
			return d.Value, "named, read as the node's dnsmasq reads it (" + d.String() + " at " + d.where() + ")"
		}
	}
	return dir, "named, a directory read as conf-dir=" + dir
}

// reader reads dnsmasq files through files.
type reader struct {
	files   Files
	reading map[string]bool // the include chain, for loops
	seen    map[string]bool // files read already
	out     Reading
}

func (rd *reader) readFile(name, why string, depth int) error {
	name = path.Clean("/" + name) // dnsmasq runs in "/": a relative name is from there
	if depth > maxIncludeDepth {
		return fmt.Errorf("%s: conf-file/conf-dir nested more than %d deep", name, maxIncludeDepth)
	}
	if rd.reading[name] {
		return fmt.Errorf("%s includes itself", name)
	}
	if rd.seen[name] {
		return nil
	}
	rd.seen[name] = true
	rd.reading[name] = true
	defer delete(rd.reading, name)

	data, err := rd.files.ReadFile(name)
	if err != nil {
		return err
	}
	rd.out.Files = append(rd.out.Files, FileRead{Path: name, Why: why})
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; scanner.Scan(); n++ {
		d, ok := parseLine(scanner.Text())
		if !ok {
			continue
		}
		d.File, d.Line = name, n
		if err := rd.directive(d, depth); err != nil {
			return err
		}
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	return nil
}

// directive adds d and reads in place what it includes.
func (rd *reader) directive(d Directive, depth int) error {
	rd.out.Directives = append(rd.out.Directives, d)
	why := d.String() + " at " + d.where()
	switch d.Name {
	case "conf-file", "servers-file":
		if err := rd.readFile(d.Value, why, depth+1); err != nil {
			return fmt.Errorf("%s: %w", d.where(), err)
		}
	case "conf-dir":
		if err := rd.readDir(d.Value, why, depth+1); err != nil {
			return fmt.Errorf("%s: %w", d.where(), err)
		}
	}
	return nil
}

func (rd *reader) readDir(value, why string, depth int) error {
	names, err := rd.confDir(value)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := rd.readFile(name, why, depth); err != nil {
			return err
		}
	}
	return nil
}

// parseLine splits one line. As in dnsmasq, "#" starts a comment
// only at the start of the line or after white space, because it also
// separates a server's address from its port (server=/consul/127.0.0.1#8600).
func parseLine(line string) (Directive, bool) {
	white := true
	for i, r := range line {
		if white && r == '#' {
			line = line[:i]
			break
		}
		white = r == ' ' || r == '\t'
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return Directive{}, false
	}
	name, value, has := strings.Cut(line, "=")
	return Directive{
		Name:  strings.TrimSpace(name),
		Value: strings.Trim(strings.TrimSpace(value), `"`),
		Has:   has,
	}, true
}

// confDir lists the files conf-dir=DIR[,ext...] reads, sorted as
// dnsmasq (2.80+) sorts them. Extensions starting with "*" select files
// ("conf-dir=/etc/dnsmasq.d/,*.conf"); the others exclude them
// ("conf-dir=/etc/dnsmasq.d,.dpkg-dist,.bak"). Like dnsmasq it skips dot
// files, editor backups ("~") and emacs autosaves ("#name#").
func (rd *reader) confDir(value string) ([]string, error) {
	parts := strings.Split(value, ",")
	dir := path.Clean("/" + strings.TrimSpace(parts[0]))
	var include, exclude []string
	for _, p := range parts[1:] {
		p = strings.TrimSpace(p)
		switch {
		case strings.HasPrefix(p, "*"):
			include = append(include, strings.TrimPrefix(p, "*"))
		case p != "":
			exclude = append(exclude, p)
		}
	}
	entries, err := rd.files.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") ||
			(strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#")) {
			continue
		}
		if slices.ContainsFunc(exclude, func(ext string) bool { return strings.HasSuffix(name, ext) }) {
			continue
		}
		if len(include) > 0 && !slices.ContainsFunc(include, func(ext string) bool { return strings.HasSuffix(name, ext) }) {
			continue
		}
		full := path.Join(dir, name)
		if info, err := rd.files.Stat(full); err != nil || !info.Mode().IsRegular() {
			continue // dnsmasq reads regular files (and links to them) only
		}
		files = append(files, full)
	}
	slices.Sort(files)
	return files, nil
}

// ErrNoConfig says a node has no dnsmasq configuration: neither
// ConfFile nor DebianDefaults.
var ErrNoConfig = errors.New("no dnsmasq configuration found (" + ConfFile + ", " + DebianDefaults + ")")
