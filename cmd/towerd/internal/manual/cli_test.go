package manual

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpCommand is one entry of `towerd help -json`, the binary's own table
// of subcommands (the one dispatch, completion and the man page read).
type helpCommand struct {
	Name  string `json:"name"`
	Flags []struct {
		Name string `json:"name"`
	} `json:"flags"`
}

// builtCommands builds towerd as `make build` does and reads its table.
func builtCommands(t *testing.T) []helpCommand {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "towerd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/towerd")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/towerd: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "help", "-json").Output()
	if err != nil {
		t.Fatalf("towerd help -json: %v", err)
	}
	var cmds []helpCommand
	if err := json.Unmarshal(out, &cmds); err != nil {
		t.Fatalf("towerd help -json: %v\n%s", err, out)
	}
	if len(cmds) < 10 {
		t.Fatalf("towerd help -json lists %d subcommands", len(cmds))
	}
	return cmds
}

var subcommandWord = regexp.MustCompile(`^[a-z][a-z-]*$`)

// synopsisName reads the subcommand off one line of the synopsis block,
// whose description starts after a run of spaces: "towerd cache list
// [-zone ZONE]" is "cache list", "towerd [serve] [flags]" is "serve".
func synopsisName(line string) string {
	usage, _, _ := strings.Cut(line, "  ")
	var words []string
	for i, w := range strings.Fields(strings.TrimPrefix(usage, "towerd ")) {
		if i == 0 {
			w = strings.TrimSuffix(strings.TrimPrefix(w, "["), "]")
		}
		if !subcommandWord.MatchString(w) {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// commandsIn returns the subcommands a heading or cell names as code
// spans: `towerd cache list`, `towerd serve`.
func commandsIn(text string, known map[string][]string) []string {
	var out []string
	for _, span := range CodeSpans(text) {
		if name, ok := strings.CutPrefix(span, "towerd "); ok {
			if _, ok := known[name]; ok {
				out = append(out, name)
			}
		}
	}
	return out
}

var flagSpan = regexp.MustCompile(`^--?([a-z0-9][a-z0-9-]*)`)

// TestManualSubcommandsAndFlags: the synopsis of docs/operating.md
// ("Running it") lists exactly the subcommands of the built binary, and
// the manual's flag tables give each subcommand exactly its flags. A flag
// table is one whose first column is "flag"; its rows belong to the
// subcommands its nearest heading names as `towerd NAME`, or, when it has
// a "subcommands" column, to those each row's cell names ("all": the
// heading's).
func TestManualSubcommandsAndFlags(t *testing.T) {
	m := loadManual(t)
	cmds := builtCommands(t)
	want := map[string][]string{}
	for _, c := range cmds {
		for _, f := range c.Flags {
			want[c.Name] = append(want[c.Name], f.Name)
		}
		if want[c.Name] == nil {
			want[c.Name] = []string{}
		}
	}

	var synopsis []string
	for _, f := range m.Docs()["docs/operating.md"].Fences {
		if slices.Contains(f.Headings, "Running it") && len(synopsis) == 0 {
			for _, line := range f.Lines {
				if strings.HasPrefix(line, "towerd ") {
					synopsis = append(synopsis, synopsisName(line))
				}
			}
		}
	}
	for _, c := range cmds {
		if !slices.Contains(synopsis, c.Name) {
			t.Errorf("docs/operating.md's synopsis (Running it) does not list towerd %s", c.Name)
		}
	}
	for _, name := range synopsis {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/operating.md's synopsis lists towerd %s, which the binary does not have", name)
		}
	}

	documented := map[string][]string{}
	for _, table := range m.Tables("flag") {
		heading := ""
		if n := len(table.Headings); n > 0 {
			heading = table.Headings[n-1]
		}
		owners := commandsIn(heading, want)
		col := table.Column("subcommands")
		for _, row := range table.Rows {
			rowOwners := owners
			if col >= 0 && col < len(row.Cells) && row.Cells[col] != "all" {
				rowOwners = commandsIn(row.Cells[col], want)
			}
			flags := 0
			for _, span := range CodeSpans(row.Cells[0]) {
				if f := flagSpan.FindStringSubmatch(span); f != nil {
					flags++
					for _, c := range rowOwners {
						documented[c] = append(documented[c], f[1])
					}
				}
			}
			if flags == 0 || len(rowOwners) == 0 {
				t.Errorf("%s:%d: a flag row without a flag, or whose subcommands neither its cell nor the heading %q names: %q",
					table.File, row.Line, heading, strings.Join(row.Cells, " | "))
			}
		}
	}
	for _, c := range cmds {
		for _, f := range want[c.Name] {
			if !slices.Contains(documented[c.Name], f) {
				t.Errorf("no flag table of the manual documents towerd %s -%s", c.Name, f)
			}
		}
		for _, f := range documented[c.Name] {
			if !slices.Contains(want[c.Name], f) {
				t.Errorf("the manual documents towerd %s -%s, which the binary does not have", c.Name, f)
			}
		}
	}
}
