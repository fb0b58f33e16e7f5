package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkNode is the config package's testdata/multizone.toml: a node's
// towerd.toml with four zones of its own, the servers of the second, third
// and fourth broken on lines 22, 26 and 35 (issue 25: all three were
// reported at the file's first "servers =").
const checkNode = "../cmd/towerd/internal/config/testdata/multizone.toml"

// TestCheckErrorLines (issue 25): towerd check with the built binary on a
// multi-zone file, fixed one error at a time as an operator does, names
// lines 22, 26 and 35 with each key's full path, then passes; a duplicate
// key is named with its table; an error in a drop-in names the drop-in
// and its line; and check -h prints check's own usage.
func TestCheckErrorLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "towerd.toml")
	body := readFile(t, checkNode)
	for _, step := range []struct {
		want     string
		from, to string
	}{
		{`:22: key "zone[1].servers[0]": "ns1.b.corp.example" is a host name`, `"ns1.b.corp.example"`, `"10.2.0.53"`},
		{`:26: key "zone[2].servers[1]": "10.3.0.300" is not an IP address`, `"10.3.0.300"`, `"10.3.0.30"`},
		{`:35: key "zone[3].servers[3]": "10.4.3.53:99999": port "99999" is not a number from 1 to 65535`, `:99999`, `:5353`},
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr := cli(t, 2, "check", "-config", path)
		mustContain(t, "check", stderr, path+step.want)
		body = strings.Replace(body, step.from, step.to, 1)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := cli(t, 0, "check", "-config", path)
	mustContain(t, "check of the fixed file", out, "config ok", "zone d.corp.example.", "10.4.3.53:5353")

	dup := strings.Replace(body, "min_ttl = \"5s\"\n", "min_ttl = \"5s\"\nsize = 6000\n", 1)
	if err := os.WriteFile(path, []byte(dup), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := cli(t, 2, "check", "-config", path)
	mustContain(t, "check of a duplicate key", stderr, path+`:8: key "cache.size": `)

	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(dir, "towerd.d", "50-site.toml")
	if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte("# site E\n[[zone]]\nname = \"e.corp.example.\"\nservers = [\"10.5.0.53\", \"ns.e.corp.example\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr = cli(t, 2, "check", "-config", path)
	mustContain(t, "check with a broken drop-in", stderr, dropIn+`:4: key "zone[0].servers[1]": "ns.e.corp.example" is a host name`)

	_, stderr = cli(t, 0, "check", "-h")
	if !strings.HasPrefix(stderr, "usage: towerd check [flags]\n") || strings.Contains(stderr, "Usage of") || !strings.Contains(stderr, "-config string") {
		t.Errorf("towerd check -h:\n%s", stderr)
	}
}
