package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeAt writes files (relative path -> content) under dir.
func writeAt(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDropInsOverTheFile: towerd.d/*.toml are read over towerd.toml in
// name order; a key a later file sets wins, zones merge by name, files
// that are not *.toml are ignored.
func TestDropInsOverTheFile(t *testing.T) {
	dir := t.TempDir()
	writeAt(t, dir, map[string]string{
		"towerd.toml": "# the package's sample: every key commented out\n#log_level = \"info\"\n" +
			"[cache]\nsize = 500\n[[zone]]\nname = \"corp.example.\"\nservers = [\"10.0.0.53\"]\n",
		"towerd.d/00-install.toml":    "listen = [\"127.0.0.1:53\"]\nresolv_conf = \"/run/towerd-dhclient/resolv.conf\"\nlog_level = \"warn\"\n",
		"towerd.d/50-site.toml":       "log_level = \"debug\"\n[[zone]]\nname = \"corp.example\"\nservers = [\"10.0.1.53\"]\n[[zone]]\nname = \"lab.\"\nservers = [\"10.9.0.53\"]\n",
		"towerd.d/README":             "not toml = [\n",
		"towerd.d/60-x.toml.dpkg-old": "not toml = [\n",
	})
	cfg, err := Load(filepath.Join(dir, "towerd.toml"), false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ResolvConf != "/run/towerd-dhclient/resolv.conf" || cfg.LogLevel != "debug" || cfg.Cache.Size != 500 {
		t.Errorf("resolv_conf %q, log_level %q, cache.size %d; want the drop-in's, the later drop-in's, the file's",
			cfg.ResolvConf, cfg.LogLevel, cfg.Cache.Size)
	}
	var got []string
	for _, z := range cfg.Zones {
		got = append(got, z.Name+"="+strings.Join(z.Servers, ","))
	}
	if want := []string{"corp.example=10.0.1.53", "lab.=10.9.0.53"}; !slices.Equal(got, want) {
		t.Errorf("zones %v, want %v", got, want)
	}
	if got, _ := DropIns(filepath.Join(dir, "towerd.toml")); len(got) != 2 {
		t.Errorf("DropIns = %v, want the two .toml files", got)
	}

	// Without towerd.toml at the default-like optional path, the drop-ins
	// still count.
	if err := os.Remove(filepath.Join(dir, "towerd.toml")); err != nil {
		t.Fatal(err)
	}
	if cfg, err := Load(filepath.Join(dir, "towerd.toml"), true); err != nil || cfg.ResolvConf != "/run/towerd-dhclient/resolv.conf" {
		t.Errorf("optional missing file: resolv_conf %q, err %v; want the drop-in's", cfg.ResolvConf, err)
	}
}

// TestDropInErrorsNameTheDropIn: a bad key or value in a drop-in is
// reported with the drop-in's name and line, not towerd.toml's.
func TestDropInErrorsNameTheDropIn(t *testing.T) {
	dir := t.TempDir()
	writeAt(t, dir, map[string]string{
		"towerd.toml":        "log_level = \"info\"\n",
		"towerd.d/10-a.toml": "\n\nlisten = [\"not an address\"]\n",
	})
	_, err := Load(filepath.Join(dir, "towerd.toml"), false)
	if want := filepath.Join(dir, "towerd.d/10-a.toml") + ":3: key \"listen[0]\""; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want it to start %q", err, want)
	}
	writeAt(t, dir, map[string]string{"towerd.d/10-a.toml": "[cache]\nsise = 3\n"})
	_, err = Load(filepath.Join(dir, "towerd.toml"), false)
	if want := filepath.Join(dir, "towerd.d/10-a.toml") + ":2: key \"cache.sise\": unknown key"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %v, want it to start %q", err, want)
	}
	writeAt(t, dir, map[string]string{"towerd.d/10-a.toml": "[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.1\"]\n[[zone]]\nname = \"a.\"\nservers = [\"10.0.0.2\"]\n"})
	if _, err = Load(filepath.Join(dir, "towerd.toml"), false); err == nil || !strings.Contains(err.Error(), "configured twice") {
		t.Errorf("a zone twice in one drop-in: %v, want it refused", err)
	}
}

// TestOwnResolvConfFallsBack: resolv_conf unset and /etc/resolv.conf
// written by towerd install (naming only towerd): zone "." takes the file
// install follows instead of running without servers; with none of them
// there, the error names the fix.
func TestOwnResolvConfFallsBack(t *testing.T) {
	own := "# Managed by towerd (`towerd install`): lookups go to towerd on 127.0.0.1:53.\nnameserver 127.0.0.1\nsearch corp.example\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // source, relative to the root; "" = an error
	}{
		{"dhclient", map[string]string{"run/towerd-dhclient/resolv.conf": "nameserver 10.1.0.2\n",
			"etc/resolv.pre-towerd-backup.conf": "nameserver 10.1.0.9\n"}, "run/towerd-dhclient/resolv.conf"},
		{"networkmanager", map[string]string{"run/NetworkManager/no-stub-resolv.conf": "nameserver 10.1.0.2\n"}, "run/NetworkManager/no-stub-resolv.conf"},
		{"static, from the backup", map[string]string{"etc/resolv.pre-towerd-backup.conf": "nameserver 10.1.0.2\n"}, "etc/resolv.pre-towerd-backup.conf"},
		{"dhclient before its first lease", map[string]string{"run/towerd-dhclient/resolv.conf": "",
			"etc/resolv.pre-towerd-backup.conf": "nameserver 10.1.0.2\n"}, "etc/resolv.pre-towerd-backup.conf"},
		{"resolved first", map[string]string{"run/systemd/resolve/resolv.conf": "nameserver 10.1.0.2\n",
			"run/towerd-dhclient/resolv.conf": "nameserver 10.1.0.7\n"}, "run/systemd/resolve/resolv.conf"},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeAt(t, root, map[string]string{"etc/resolv.conf": own})
			writeAt(t, root, tc.files)
			cfg := DefaultConfig()
			zones, source, err := cfg.ForwardZones(root)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "set resolv_conf") || !strings.Contains(err.Error(), "towerd's own") {
					t.Fatalf("err = %v, want one naming the fix", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if source != filepath.Join(root, tc.want) {
				t.Errorf("source %s, want %s", source, tc.want)
			}
			i := slices.IndexFunc(zones, func(z ZoneConfig) bool { return z.Name == "." })
			if i < 0 || len(zones[i].Servers) != 1 || zones[i].Servers[0] != "10.1.0.2:53" {
				t.Errorf("zones %+v, want . -> 10.1.0.2:53", zones)
			}
			paths, note := SystemResolvConfs(root)
			if !strings.Contains(note, "set resolv_conf") || slices.Contains(paths, filepath.Join(root, "etc/resolv.conf")) {
				t.Errorf("SystemResolvConfs = %v, %q: want the fallbacks and a note", paths, note)
			}
		})
	}

	// Someone else's /etc/resolv.conf: followed as before.
	root := t.TempDir()
	writeAt(t, root, map[string]string{"etc/resolv.conf": "nameserver 10.1.0.2\n", "run/towerd-dhclient/resolv.conf": "nameserver 10.1.0.7\n"})
	if paths, note := SystemResolvConfs(root); note != "" || len(paths) != 2 || paths[1] != filepath.Join(root, "etc/resolv.conf") {
		t.Errorf("SystemResolvConfs = %v, %q; want resolved's file and /etc/resolv.conf", paths, note)
	}
}
