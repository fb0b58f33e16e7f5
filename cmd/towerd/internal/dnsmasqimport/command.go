package dnsmasqimport

// The subcommand `towerd import-dnsmasq`.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/base"
	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// Run is `towerd import-dnsmasq [--root DIR] [FILE|DIR ...]`: the TOML goes
// to stdout, so it can be redirected into /etc/towerd/towerd.toml; every
// file read, and every directive not carried over with its file and line,
// goes to stderr.
func Run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("towerd import-dnsmasq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "/", "the node's \"/\": a copied node's files, the paths in them taken under DIR")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: towerd import-dnsmasq [--root DIR] [FILE|DIR ...] > towerd.toml
  turns the configuration this node's dnsmasq reads into towerd's: Debian's
  /etc/default/dnsmasq (its CONFIG_DIR and options, which dnsmasq reads first),
  then /etc/dnsmasq.conf, with every file they include. FILE or DIR reads those
  instead (a DIR as conf-dir reads it), as the node sees them. Every file read
  and every directive not carried over is listed on stderr; the exit status is 1
  when a directive dropped changes answers.
`)
		fs.PrintDefaults()
	}
	var paths []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return base.ExitOK
			}
			return base.ExitConfig
		}
		if fs.NArg() == 0 {
			break
		}
		// Flags may follow the paths too.
		paths, rest = append(paths, fs.Arg(0)), fs.Args()[1:]
	}
	rootDir, paths, err := nodePaths(*root, paths)
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %v\n", err)
		return base.ExitConfig
	}
	files, err := nodefs.Open(rootDir)
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: --root: %v\n", err)
		return base.ExitConfig
	}
	defer files.Close()
	var read Reading
	if len(paths) > 0 {
		read, err = Read(files, paths)
	} else {
		read, err = ReadNode(files)
	}
	under := ""
	if rootDir != "/" {
		under = " under " + rootDir
	}
	for _, f := range read.Files {
		fmt.Fprintf(stderr, "read %s%s: %s\n", f.Path, under, f.Why)
	}
	if err != nil {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %v%s\n", err, under)
		if errors.Is(err, ErrNoConfig) {
			fmt.Fprintln(stderr, "  name the configuration: towerd import-dnsmasq FILE (or a directory)")
			return base.ExitConfig
		}
		return base.ExitFail
	}
	if len(paths) > 0 {
		warnNamed(stderr, files, paths, read, rootDir != "/", under)
	}
	source := strings.Join(read.Paths(), ", ") + under
	dirs := read.Directives
	im := Import(source, dirs)
	out := im.File.Render()
	// The result must be a config towerd starts with; a failure here is a
	// value dnsmasq took that towerd does not, and it is named.
	var cfg = config.DefaultConfig()
	if err := config.Decode(out, "(imported)", &cfg); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprint(stdout, string(out))
		fmt.Fprintf(stderr, "towerd import-dnsmasq: the imported configuration is not valid: %v\n", err)
		return base.ExitFail
	}
	fmt.Fprint(stdout, string(out))
	for _, n := range im.Notes {
		fmt.Fprintln(stderr, n)
	}
	if len(im.Notes) > 0 {
		fmt.Fprintf(stderr, "%d directive(s) not carried over, or only partly: see above\n", len(im.Notes))
	}
	// Dropping what only changes caching, logging or where towerd runs is
	// fine; dropping what changes an answer is not, and a script that
	// imports and installs must stop (issue 15).
	var changes []string
	for _, n := range im.Notes {
		if n.ChangesAnswers() {
			changes = append(changes, "  "+n.String())
		}
	}
	if len(changes) > 0 {
		fmt.Fprintf(stderr, "towerd import-dnsmasq: %d directive(s) dropped that change answers; towerd would answer differently from dnsmasq:\n%s\n",
			len(changes), strings.Join(changes, "\n"))
		return base.ExitFail
	}
	return base.ExitOK
}

// nodePaths checks --root and the paths named: with a root of its own, a
// path is one the node sees (absolute); on this machine a relative one is
// taken from the working directory.
func nodePaths(root string, paths []string) (string, []string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", nil, fmt.Errorf("--root: %w", err)
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		switch {
		case filepath.IsAbs(p):
			out[i] = p
		case abs != "/":
			return "", nil, fmt.Errorf("%s: with --root, name a path as the node sees it (absolute, under %s)", p, abs)
		default:
			if out[i], err = filepath.Abs(p); err != nil {
				return "", nil, err
			}
		}
	}
	return abs, out, nil
}

// warnNamed says what an import of named paths may have got wrong. When
// what it read is this node's own dnsmasq configuration, which files
// dnsmasq also reads there that were left out (Debian's CONFIG_DIR, most
// often: an import of /etc/dnsmasq.conf alone misses /etc/dnsmasq.d). When
// it is not, and there is no --root, which files its includes took from
// this machine outside the directories named: a configuration copied from
// another node names that node's paths (conf-dir=/etc/dnsmasq.d).
func warnNamed(stderr io.Writer, files Files, named []string, read Reading, ownRoot bool, under string) {
	node, err := ReadNode(files)
	if err != nil {
		node = Reading{}
	}
	own := true
	for _, f := range read.Files {
		own = own && slices.Contains(node.Paths(), f.Path)
	}
	switch {
	case own:
		for _, f := range node.Files {
			if !slices.Contains(read.Paths(), f.Path) {
				fmt.Fprintf(stderr, "warning: dnsmasq on this node also reads %s%s (%s), which was not named: "+
					"run towerd import-dnsmasq without a FILE to import everything it reads\n", f.Path, under, f.Why)
			}
		}
	case !ownRoot:
		for _, f := range read.Files {
			if !strings.HasPrefix(f.Why, "named") && !inAny(files, f.Path, named) {
				fmt.Fprintf(stderr, "warning: %s was read from this machine (%s): if the configuration comes from "+
					"another node, import a copy of that node's root with --root\n", f.Path, f.Why)
			}
		}
	}
}

// inAny reports whether file is in one of the directories of paths (a
// file's own directory, or a directory named), at any depth.
func inAny(files Files, file string, paths []string) bool {
	for _, p := range paths {
		dir := p
		if !strings.HasSuffix(p, "/") {
			if info, err := files.Stat(p); err != nil || !info.IsDir() {
				dir = filepath.Dir(p)
			}
		}
		if rel, err := filepath.Rel(dir, file); err == nil && !strings.HasPrefix(rel, "..") {
			return true
		}
	}
	return false
}
