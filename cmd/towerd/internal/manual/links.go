package manual

import (
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Link is an inline markdown link, [text](target), outside code.
type Link struct {
	File   string
	Line   int
	Target string
}

// Path and Anchor split the target: "install.md#docker" is "install.md"
// and "docker"; "#docker" is "" (this file) and "docker".
func (l Link) Path() string   { p, _, _ := strings.Cut(l.Target, "#"); return p }
func (l Link) Anchor() string { _, a, _ := strings.Cut(l.Target, "#"); return a }

// External reports a link that leaves the repository.
func (l Link) External() bool {
	return strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:")
}

// Resolve returns the link's file as a path from the repository root
// ("docs/install.md" for "install.md" in docs/operating.md).
func (l Link) Resolve() string {
	p := l.Path()
	if p == "" {
		return l.File
	}
	return path.Clean(path.Join(path.Dir(l.File), p))
}

var (
	inlineLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
)

// Links returns every inline link of every file, fenced blocks and code
// spans left out.
func (m *Manual) Links() []Link {
	var out []Link
	for _, name := range m.Names() {
		fenced := false
		for i, line := range strings.Split(m.Files[name], "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			line = inlineCode.ReplaceAllString(line, "``")
			for _, match := range inlineLink.FindAllStringSubmatch(line, -1) {
				out = append(out, Link{File: name, Line: i + 1, Target: match[1]})
			}
		}
	}
	return out
}

// Anchors returns the anchors GitHub gives a file's headings: the slug of
// each heading's text, "-1", "-2" ... after repeats.
func Anchors(d Doc) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range d.Headings {
		slug := Slug(h.Text)
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Slug is GitHub's anchor for a heading: the text as rendered (code spans
// and links reduced to their text), lower-cased, every character but
// letters, digits, spaces, hyphens and underscores dropped, spaces turned
// into hyphens (github-slugger's rule).
func Slug(heading string) string {
	heading = inlineLink.ReplaceAllStringFunc(heading, func(s string) string {
		text, _, _ := strings.Cut(strings.TrimPrefix(s, "["), "](")
		return text
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// HeadingTexts returns the rendered text of every heading of every file
// (code spans without their backticks), for references by name such as
// `see "Cache across restarts"`.
func (m *Manual) HeadingTexts() map[string]bool {
	out := map[string]bool{}
	for _, d := range m.Docs() {
		for _, h := range d.Headings {
			out[strings.ReplaceAll(h.Text, "`", "")] = true
		}
	}
	return out
}
