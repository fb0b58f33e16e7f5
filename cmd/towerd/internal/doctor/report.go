package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/admin"
)

// textWidth is where the text report wraps.
const textWidth = 100

// writeText prints the report for people: the findings worst first
// (each with what doctor saw, why it matters and the fix), what was not
// looked at, and a last line with the counts and the exit status.
func (r Report) writeText(out io.Writer) {
	// Findings quote others' text (the agent's errors and check outputs,
	// files' lines): the report goes out with control characters escaped.
	var b strings.Builder
	defer func() { _, _ = io.WriteString(out, admin.PrintableLines(b.String())) }()
	w := &b
	header := "towerd doctor"
	if r.Root != "/" {
		header += " under " + r.Root
	}
	fmt.Fprintln(w, header)
	for _, sev := range []Severity{Problem, Warning, Info} {
		for _, f := range r.Findings {
			if f.Severity == sev {
				fmt.Fprintln(w)
				writeFinding(w, f)
			}
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "not looked at:")
		for _, s := range r.Skipped {
			writeWrapped(w, "  "+s.Area+": ", "    ", s.Reason)
		}
	}
	s := r.Summary
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%s, %s, %s: exit %d\n", plural(s.Problems, "problem"), plural(s.Warnings, "warning"), plural(s.Info, "note"), s.Exit)
}

func writeFinding(w io.Writer, f Finding) {
	label := map[Severity]string{Problem: "PROBLEM", Warning: "WARNING", Info: "note"}[f.Severity]
	fmt.Fprintf(w, "%-7s  %s: %s\n", label, f.ID, f.Title)
	const indent = "         "
	writeWrapped(w, indent+"saw: ", indent+"     ", f.Saw)
	for _, it := range f.Items {
		line := it.Subject
		if it.Detail != "" {
			line += ": " + it.Detail
		}
		writeWrapped(w, indent+"  - ", indent+"    ", line)
	}
	writeWrapped(w, indent+"why: ", indent+"     ", f.Why)
	writeWrapped(w, indent+"fix: ", indent+"     ", f.Fix)
}

// writeWrapped prints text after first, wrapping at textWidth with the
// following lines after rest.
func writeWrapped(w io.Writer, first, rest, text string) {
	line := first
	empty := true
	// Line breaks and tabs are where words part, as they always were;
	// every other control character is shown escaped.
	for _, word := range strings.Fields(admin.Printable(wordBreaks.Replace(text))) {
		if !empty && len(line)+1+len(word) > textWidth {
			fmt.Fprintln(w, line)
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	fmt.Fprintln(w, line)
}

// wordBreaks turns the whitespace that Printable would escape into spaces.
var wordBreaks = strings.NewReplacer("\n", " ", "\t", " ", "\r\n", " ")

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// writeCatalog prints every finding doctor knows (`towerd doctor -list`).
func writeCatalog(w io.Writer, asJSON bool) error {
	if asJSON {
		type entry struct {
			ID    string `json:"id"`
			Area  string `json:"area"`
			Title string `json:"title"`
			Why   string `json:"why"`
			Fix   string `json:"fix"`
		}
		entries := make([]entry, 0, len(catalog))
		for _, s := range catalog {
			entries = append(entries, entry(s))
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Schema   string  `json:"schema"`
			Findings []entry `json:"findings"`
		}{Schema, entries})
	}
	area := ""
	for _, s := range catalog {
		if s.Area != area {
			area = s.Area
			fmt.Fprintf(w, "\n%s\n", area)
		}
		fmt.Fprintf(w, "  %s: %s\n", s.ID, s.Title)
	}
	return nil
}
