package dnsmasqimport

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Directive is one "option" or "option=value" line of a dnsmasq
// configuration, with where it came from for the report.
type Directive struct {
	File  string // the file it was read from
	Line  int    // its line in File, from 1
	Name  string // the option, e.g. "server"
	Value string // after "=", unquoted; "" without one
	Has   bool   // "=" was present (use-stale-cache vs use-stale-cache=0)
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

// Read reads a dnsmasq configuration file and, in place, every file
// its conf-file= and conf-dir= directives name, in the order dnsmasq reads
// them. The conf-file/conf-dir lines themselves are kept too, so the report
// can show where included directives came from.
func Read(path string) ([]Directive, error) {
	var out []Directive
	rd := reader{files: hostFiles{}, reading: map[string]bool{}}
	err := rd.readFile(path, 0, &out)
	return out, err
}

// ReadUnder reads, like Read, each of paths (or, for a directory, its files
// as conf-dir would) with what they include, as a node whose "/" is root
// sees them: absolute paths in conf-file= and conf-dir= are taken under
// root, and no path leads out of it (os.Root). A file already read, say
// one of dnsmasq.conf's includes that is also listed, is read once.
// `towerd install --from-dnsmasq` reads a node's configuration this way.
func ReadUnder(root string, paths []string) ([]Directive, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rd := reader{files: rootFiles{r}, reading: map[string]bool{}, seen: map[string]bool{}}
	var out []Directive
	for _, p := range paths {
		p = filepath.Clean("/" + p)
		info, err := r.Stat(rootRel(p))
		if err != nil {
			return out, err
		}
		if !info.IsDir() {
			if err := rd.readFile(p, 0, &out); err != nil {
				return out, err
			}
			continue
		}
		files, err := rd.confDir(p)
		if err != nil {
			return out, err
		}
		for _, f := range files {
			if err := rd.readFile(f, 0, &out); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// files is where a reader reads: the host's file system, or a root.
type files interface {
	Open(name string) (io.ReadCloser, error)
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
}

type hostFiles struct{}

func (hostFiles) Open(name string) (io.ReadCloser, error)    { return os.Open(name) }
func (hostFiles) ReadDir(name string) ([]os.DirEntry, error) { return os.ReadDir(name) }
func (hostFiles) Stat(name string) (os.FileInfo, error)      { return os.Stat(name) }

// rootFiles reads absolute paths under an os.Root.
type rootFiles struct{ r *os.Root }

func rootRel(name string) string {
	rel := strings.TrimPrefix(filepath.Clean("/"+name), "/")
	if rel == "" {
		return "."
	}
	return rel
}

func (f rootFiles) Open(name string) (io.ReadCloser, error) { return f.r.Open(rootRel(name)) }
func (f rootFiles) Stat(name string) (os.FileInfo, error)   { return f.r.Stat(rootRel(name)) }
func (f rootFiles) ReadDir(name string) ([]os.DirEntry, error) {
	d, err := f.r.Open(rootRel(name))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

// reader reads dnsmasq files through files.
type reader struct {
	files   files
	reading map[string]bool // the include chain, for loops
	seen    map[string]bool // files read already; nil = read every time
}

func (rd reader) readFile(path string, depth int, out *[]Directive) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("%s: conf-file/conf-dir nested more than %d deep", path, maxIncludeDepth)
	}
	abs, _ := filepath.Abs(path)
	if rd.reading[abs] {
		return fmt.Errorf("%s includes itself", path)
	}
	if rd.seen != nil {
		if rd.seen[abs] {
			return nil
		}
		rd.seen[abs] = true
	}
	rd.reading[abs] = true
	defer delete(rd.reading, abs)

	f, err := rd.files.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		d, ok := parseLine(scanner.Text())
		if !ok {
			continue
		}
		d.File, d.Line = path, n
		*out = append(*out, d)
		switch d.Name {
		case "conf-file", "servers-file":
			if err := rd.readFile(d.Value, depth+1, out); err != nil {
				return fmt.Errorf("%s: %w", d.where(), err)
			}
		case "conf-dir":
			files, err := rd.confDir(d.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", d.where(), err)
			}
			for _, name := range files {
				if err := rd.readFile(name, depth+1, out); err != nil {
					return err
				}
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
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
func (rd reader) confDir(value string) ([]string, error) {
	parts := strings.Split(value, ",")
	dir := strings.TrimSpace(parts[0])
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
		full := filepath.Join(dir, name)
		if info, err := rd.files.Stat(full); err != nil || !info.Mode().IsRegular() {
			continue // dnsmasq reads regular files (and links to them) only
		}
		files = append(files, full)
	}
	slices.Sort(files)
	return files, nil
}
