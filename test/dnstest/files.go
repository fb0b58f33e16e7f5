package dnstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Files for tests that read configuration, hosts files or a whole node's
// root: one way to write them, one way to compare a tree before and after.

// WriteFile writes body to path with mode 0644, creating its directories,
// and returns path. A path without a directory ("t.toml") is put in a new
// t.TempDir().
func WriteFile(t testing.TB, path, body string) string {
	t.Helper()
	if !strings.Contains(path, "/") {
		path = filepath.Join(t.TempDir(), path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteTree creates files under root, each name relative to it: a value
// starting with "->" is a symlink to the rest, a name ending in "/" a
// directory, anything else a file (WriteFile).
func WriteTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		full := filepath.Join(root, name)
		switch target, link := strings.CutPrefix(content, "->"); {
		case strings.HasSuffix(name, "/"):
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		case link:
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
		default:
			WriteFile(t, full, content)
		}
	}
}

// Node is one path of a tree as Tree sees it.
type Node struct {
	Kind string      // "dir", "file", "link"
	Mode fs.FileMode // permission bits; 0 for a link
	Data string      // a file's content, a link's target
}

// Tree is every path under root (relative to it, root itself as "."),
// for comparing a tree byte for byte with DiffTrees.
func Tree(t testing.TB, root string) map[string]Node {
	t.Helper()
	out := map[string]Node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			out[rel] = Node{Kind: "dir", Mode: info.Mode().Perm()}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = Node{Kind: "link", Data: target}
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = Node{Kind: "file", Mode: info.Mode().Perm(), Data: string(data)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// DiffTrees reports every path that is gone, new or changed in got.
func DiffTrees(t testing.TB, want, got map[string]Node) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s is gone (was %s)", p, w.Kind)
		case g != w:
			t.Errorf("%s changed:\n was %+v\n now %+v", p, w, g)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s is new (%s)", p, g.Kind)
		}
	}
}
