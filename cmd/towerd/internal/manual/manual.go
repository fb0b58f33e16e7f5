// Package manual reads towerd's manual, README.md and docs/*.md, as the
// tests that hold it to the code need it: the tables (config keys,
// metrics, flags), the fenced blocks, the headings and their anchors, and
// the links. It is not linked into the binary; its users are the tests of
// this package (every intra-repository link resolves; every subcommand and
// flag of the built binary is documented, and nothing else is; every
// config key, with its default) and of the daemon (every metric its
// registry holds; what a reload applies).
//
// The manual is plain GitHub markdown. The parser reads only what those
// tests need: ATX headings, fenced blocks, pipe tables and inline links,
// never HTML.
package manual

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Manual is the text of README.md and docs/*.md, by path relative to the
// repository root ("README.md", "docs/configuration.md").
type Manual struct {
	Root  string
	Files map[string]string
}

// Load reads README.md and every docs/*.md under root, the repository.
func Load(root string) (*Manual, error) {
	m := &Manual{Root: root, Files: map[string]string{}}
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, err
		}
		m.Files[filepath.ToSlash(rel)] = string(b)
	}
	if len(m.Files) < 2 {
		return nil, fmt.Errorf("manual: no docs/*.md under %s", root)
	}
	return m, nil
}

// Names returns the files' paths, sorted.
func (m *Manual) Names() []string {
	names := make([]string, 0, len(m.Files))
	for name := range m.Files {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Block is a stretch of a file: a table or a fenced block, with the
// headings it sits under.
type Block struct {
	File string
	Line int // 1-based, of the block's first line
	// Headings are the texts of the headings above the block, outermost
	// first: the file's title, then each level down to the nearest.
	Headings []string
}

// Where names the block for a test's message: "docs/operating.md:42".
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Table is a pipe table: its header cells and its rows' cells, trimmed.
type Table struct {
	Block
	Header []string
	Rows   []Row
}

// Row is one table row and its line.
type Row struct {
	Line  int
	Cells []string
}

// Column returns the index of the header cell named name (case-insensitive),
// or -1.
func (t Table) Column(name string) int {
	for i, h := range t.Header {
		if strings.EqualFold(h, name) {
			return i
		}
	}
	return -1
}

// Fence is a fenced block: its info string ("toml", "sh", "") and lines.
type Fence struct {
	Block
	Info  string
	Lines []string
}

// Heading is an ATX heading and its level (1 for "#").
type Heading struct {
	Line  int
	Level int
	Text  string
}

// Doc is one file, parsed.
type Doc struct {
	Headings []Heading
	Tables   []Table
	Fences   []Fence
}

var headingLine = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// Parse reads one file's headings, tables and fenced blocks.
func Parse(file, text string) Doc {
	var d Doc
	var stack []Heading // the headings in force, outermost first
	under := func() []string {
		out := make([]string, len(stack))
		for i, h := range stack {
			out[i] = h.Text
		}
		return out
	}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if info, ok := strings.CutPrefix(line, "```"); ok {
			f := Fence{Block: Block{File: file, Line: i + 1, Headings: under()}, Info: strings.TrimSpace(info)}
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				f.Lines = append(f.Lines, lines[i])
			}
			d.Fences = append(d.Fences, f)
			continue
		}
		if m := headingLine.FindStringSubmatch(line); m != nil {
			h := Heading{Line: i + 1, Level: len(m[1]), Text: m[2]}
			for len(stack) > 0 && stack[len(stack)-1].Level >= h.Level {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, h)
			d.Headings = append(d.Headings, h)
			continue
		}
		if strings.HasPrefix(line, "|") && i+1 < len(lines) && isDelimiterRow(lines[i+1]) {
			t := Table{Block: Block{File: file, Line: i + 1, Headings: under()}, Header: cells(line)}
			for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
				t.Rows = append(t.Rows, Row{Line: i + 1, Cells: cells(lines[i])})
			}
			i--
			d.Tables = append(d.Tables, t)
		}
	}
	return d
}

var delimiterCell = regexp.MustCompile(`^\s*:?-+:?\s*$`)

func isDelimiterRow(line string) bool {
	cs := cells(line)
	for _, c := range cs {
		if !delimiterCell.MatchString(c) {
			return false
		}
	}
	return len(cs) > 0
}

// cells splits a table row on the pipes that are not escaped ("\|" is a
// pipe inside a cell, as in `on\|off`).
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// Docs parses every file, by name.
func (m *Manual) Docs() map[string]Doc {
	out := make(map[string]Doc, len(m.Files))
	for name, text := range m.Files {
		out[name] = Parse(name, text)
	}
	return out
}

// Tables returns every table of every file whose header's first cell is
// first ("key", "metric", "flag"), in file order.
func (m *Manual) Tables(first string) []Table {
	var out []Table
	docs := m.Docs()
	for _, name := range m.Names() {
		for _, t := range docs[name].Tables {
			if len(t.Header) > 0 && strings.EqualFold(t.Header[0], first) {
				out = append(out, t)
			}
		}
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// CodeSpans returns the text of each `code span` in s, in order.
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}
