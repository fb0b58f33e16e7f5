package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerd/towerd/test/dnstest"
)

// multiZone is testdata/multizone.toml: a node's file with four zones of
// its own, the servers of the last three broken in three ways (a host
// name on line 22, the second of two addresses on line 26, the fourth
// address of a list that starts on line 31, on line 35), as an operator
// leaves a file before running `towerd check`. test/e2e_check_lines_test.go
// runs the built binary on the same file.
var multiZone = func() string {
	data, err := os.ReadFile("testdata/multizone.toml")
	if err != nil {
		panic(err)
	}
	return string(data)
}()

// Issue 25: each error is placed at the line of the value at fault with
// its full key path; fixed one by one, as an operator fixes them after
// each `towerd check`, the errors come at lines 22, 26 and 35, then none.
func TestMultiZoneErrorsAtTheirLines(t *testing.T) {
	body := multiZone
	for _, want := range []struct {
		line int
		key  string
		fix  [2]string
	}{
		{22, "zone[1].servers[0]", [2]string{`"ns1.b.corp.example"`, `"10.2.0.53"`}},
		{26, "zone[2].servers[1]", [2]string{`"10.3.0.300"`, `"10.3.0.30"`}},
		{35, "zone[3].servers[3]", [2]string{`:99999`, `:5353`}},
	} {
		path := dnstest.WriteFile(t, "towerd.toml", body)
		_, err := Load(path, false)
		prefix := fmt.Sprintf("%s:%d: key %q: ", path, want.line, want.key)
		if err == nil || !strings.HasPrefix(err.Error(), prefix) {
			t.Fatalf("error %v\nwant it to start %q", err, prefix)
		}
		body = strings.Replace(body, want.fix[0], want.fix[1], 1)
	}
	if _, err := Load(dnstest.WriteFile(t, "towerd.toml", body), false); err != nil {
		t.Fatalf("the fixed file: %v", err)
	}
}

// The decoder's errors in the same file: its line was right, the key was
// not (a duplicate named "size", every [[zone]] "zone"); each now has the
// full path, indices included.
func TestDecodeErrorsHaveFullKeyPaths(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		want           string
	}{
		{"duplicate key", "min_ttl = \"5s\"\n", "min_ttl = \"5s\"\nsize = 6000\n", `:8: key "cache.size": `},
		{"unknown key in the third zone", "name = \"c.corp.example.\"\n", "name = \"c.corp.example.\"\nprobe = \"x.\"\n", `:26: key "zone[2].probe": unknown key`},
		{"wrong type in a list", `"10.4.2.53",`, `10,`, `:34: key "zone[3].servers[2]": want a string, got integer 10`},
		{"wrong type in the second zone", "probe_name = \"b.corp.example.\"\n", "probe_name = 7\n", `:21: key "zone[1].probe_name": want a string`},
		{"duplicate table", "[serve_stale]\n", "[cache]\n", `:9: key "cache": `},
		{"bare duration in a zone's file", "max_age = \"12h\"", "max_age = 12", `:10: key "serve_stale.max_age": want a duration string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(multiZone, tc.from, tc.to, 1)
			if body == multiZone {
				t.Fatalf("%q not in the file", tc.from)
			}
			path := dnstest.WriteFile(t, "towerd.toml", body)
			_, err := Load(path, false)
			if err == nil || !strings.Contains(err.Error(), path+tc.want) {
				t.Fatalf("error %v\nwant %q", err, path+tc.want)
			}
		})
	}
}

// A key the file does not set is placed at what holds it: a zone without
// servers at its own [[zone]] header, not the first zone's.
func TestMissingKeyAtItsTable(t *testing.T) {
	body := strings.Replace(multiZone, "servers = [\"10.3.0.53\", \"10.3.0.300\"]\n", "", 1)
	body = strings.Replace(body, `"ns1.b.corp.example"`, `"10.2.0.53"`, 1)
	path := dnstest.WriteFile(t, "towerd.toml", body)
	_, err := Load(path, false)
	if want := path + `:24: key "zone[2].servers": zone "c.corp.example." needs at least one server`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v\nwant %q", err, want)
	}
}

// Drop-ins (towerd.d/*.toml): an error is placed in the file that set the
// value, with the line there and, for a zone, its index among that file's
// zones; a zone of towerd.toml a drop-in did not replace stays placed in
// towerd.toml.
func TestDropInErrorsInTheirFile(t *testing.T) {
	for _, tc := range []struct {
		name          string
		main, dropIn  string
		file          string // "main" or "drop-in"
		line          int
		key, inTheMsg string
	}{
		{"a new zone in the drop-in", "[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.1\"]\n",
			"# site\n[[zone]]\nname = \"b.\"\nservers = [\"10.0.0.2\"]\n\n[[zone]]\nname = \"c.\"\nservers = [\"10.0.0.1\", \"host.example\"]\n",
			"drop-in", 8, "zone[1].servers[1]", "host name"},
		{"a zone the drop-in replaces", "[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.1\"]\n[[zone]]\nname = \"b.\"\nservers = [\"10.0.0.2\"]\n",
			"[[zone]]\nname = \"B\"\nservers = [\"10.0.0.256\"]\n",
			"drop-in", 3, "zone[0].servers[0]", "not an IP address"},
		{"a zone of the main file", "[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.1\"]\n[[zone]]\nname = \"b.\"\nservers = [\"10.0.0.2:0\"]\n",
			"[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.9\"]\n",
			"main", 6, "zone[1].servers[0]", "port"},
		{"a key the drop-in sets", "[cache]\nsize = 100\n", "log_level = \"warn\"\n\n[cache]\nsize = 0\n",
			"drop-in", 4, "cache.size", "at least 1"},
		{"a decode error in the drop-in", "[cache]\nsize = 100\n", "[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.1\"]\n[[zone]]\nname = \"b.\"\nsevers = []\n",
			"drop-in", 6, "zone[1].severs", "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeAt(t, dir, map[string]string{"towerd.toml": tc.main, "towerd.d/50-site.toml": tc.dropIn})
			file := filepath.Join(dir, "towerd.toml")
			if tc.file == "drop-in" {
				file = filepath.Join(dir, "towerd.d", "50-site.toml")
			}
			_, err := Load(filepath.Join(dir, "towerd.toml"), false)
			want := fmt.Sprintf("%s:%d: key %q: ", file, tc.line, tc.key)
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.inTheMsg) {
				t.Fatalf("error %v\nwant it to start %q and say %q", err, want, tc.inTheMsg)
			}
		})
	}
}

// scanKeys reads what the decoder reads: dotted keys, inline tables and
// arrays of them, a table inside the last element of an array of tables,
// a "servers =" in a comment or a string is no key.
func TestScanKeys(t *testing.T) {
	doc := `# servers = ["in a comment"]
cache.size = 5
local = { ttl = "1m", domains = ["lan.", "home."] }
note = "[[zone]] servers = [1]"
[[zone]]
name = "a."
[zone.extra]
x = 1
[[zone]]
name = "b."
[[local.address]]
name = "n."
addresses = [
  "10.0.0.1",
]
`
	got := map[string]int{}
	for _, s := range scanKeys([]byte(doc)) {
		got[s.path] = s.line
	}
	want := map[string]int{
		"cache.size": 2, "local": 3, "local.ttl": 3, "local.domains": 3, "local.domains[1]": 3, "note": 4,
		"zone[0]": 5, "zone[0].name": 6, "zone[0].extra": 7, "zone[0].extra.x": 8, "zone[1]": 9, "zone[1].name": 10,
		"local.address[0]": 11, "local.address[0].name": 12, "local.address[0].addresses": 13, "local.address[0].addresses[0]": 14,
	}
	for k, line := range want {
		if got[k] != line {
			t.Errorf("%s at line %d, want %d", k, got[k], line)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != "local.domains[0]" {
			t.Errorf("unexpected key %s at line %d", k, got[k])
		}
	}
	// A syntax error stops the scan with what came before it.
	if spans := scanKeys([]byte("a = 1\nb = [\n")); len(spans) != 1 || spans[0].path != "a" {
		t.Errorf("scan of a broken document: %+v", spans)
	}
}
