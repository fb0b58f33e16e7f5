package manual

import (
	"slices"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// TestManualConfigKeys: the configuration reference (the table of
// docs/configuration.md with a reload column) lists every key the config
// types read, read off their toml tags, each once, and no other; every
// other key table of the manual (consul.md's, [local]'s) names only real
// keys; every default the manual gives is config.DefaultConfig()'s; and
// the sample docs/towerd.toml, which the package installs and towerd.toml(5)
// prints, shows every key. Whether a reload applies a key is the daemon's
// to test (daemon.TestManualReloadColumn).
func TestManualConfigKeys(t *testing.T) {
	m := loadManual(t)
	keys := map[string]ConfigKey{}
	var names []string
	for _, k := range ConfigKeys(config.DefaultConfig()) {
		keys[k.Name] = k
		names = append(names, k.Name)
	}
	if len(keys) < 50 {
		t.Fatalf("only %d config keys found by reflection: %v", len(keys), names)
	}

	referenced := map[string]int{}
	for _, table := range m.Tables("key") {
		reference := table.Column("reload") >= 0
		if reference && table.File != "docs/configuration.md" {
			t.Errorf("%s: a key table with a reload column outside docs/configuration.md", table.Where())
		}
		def := table.Column("default")
		for _, row := range table.Rows {
			named := KeysIn(row.Cells[0])
			if len(named) == 0 {
				t.Errorf("%s:%d: a key table row naming no key: %q", table.File, row.Line, row.Cells[0])
			}
			for _, name := range named {
				k, ok := keys[name]
				if !ok {
					t.Errorf("%s:%d: documents %s, which is no config key", table.File, row.Line, name)
					continue
				}
				if reference {
					referenced[name]++
				}
				if def >= 0 && def < len(row.Cells) {
					checkDefault(t, table.File, row.Line, k, row.Cells[def])
				}
			}
		}
	}
	for _, name := range names {
		switch n := referenced[name]; {
		case n == 0:
			t.Errorf("docs/configuration.md's key reference does not list %s", name)
		case n > 1:
			t.Errorf("docs/configuration.md's key reference lists %s %d times", name, n)
		}
	}

	sample := SampleKeys(repoFile(t, "docs/towerd.toml"))
	for _, name := range names {
		if !slices.Contains(sample, name) {
			t.Errorf("docs/towerd.toml does not show %s", name)
		}
	}
	for _, name := range sample {
		if _, ok := keys[name]; !ok {
			t.Errorf("docs/towerd.toml shows %s, which is no config key", name)
		}
	}
}

// checkDefault holds a default cell to the key's built-in value: its first
// code span, read as TOML. A cell without one ("none": keys of each
// [[zone]]) says nothing to check.
func checkDefault(t *testing.T, file string, line int, k ConfigKey, cell string) {
	t.Helper()
	spans := CodeSpans(cell)
	if len(spans) == 0 || !k.Default.IsValid() {
		return
	}
	v, err := ParseValue(spans[0], k.Type)
	if err != nil {
		t.Errorf("%s:%d: %s: the default %s: %v", file, line, k.Name, spans[0], err)
		return
	}
	if !SameValue(v, k.Default) {
		t.Errorf("%s:%d: %s: the manual says the default is %s, the code's is %v", file, line, k.Name, spans[0], k.Default)
	}
}

// The keys reflection finds are those a file may set, named as the
// manual names them.
func TestConfigKeys(t *testing.T) {
	var names []string
	for _, k := range ConfigKeys(config.DefaultConfig()) {
		names = append(names, k.Name)
	}
	for _, want := range []string{"listen", "state_save_interval", "cache.size", "zone[].probe_name", "local.address[].addresses", "consul.answer_ttl"} {
		if !slices.Contains(names, want) {
			t.Errorf("ConfigKeys lacks %s: %v", want, names)
		}
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".duration") || name == "zone" || name == "local" {
			t.Errorf("ConfigKeys lists %s: a duration or a table is not a key", name)
		}
	}
	if got := KeysIn("`local.address[].name`, `.addresses`, `\"x\"`"); !slices.Equal(got, []string{"local.address[].name", "local.address[].addresses"}) {
		t.Errorf("KeysIn = %v", got)
	}
	sample := "[cache]\n#size = 1\n# prose = not a key\n#[[zone]]\n#name = \".\"\n[local]\n#[[local.address]]\n#addresses = []\n"
	if got := SampleKeys(sample); !slices.Equal(got, []string{"cache.size", "zone[].name", "local.address[].addresses"}) {
		t.Errorf("SampleKeys = %v", got)
	}
}
