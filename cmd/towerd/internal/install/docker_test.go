package install

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

func TestPlanDockerOnTheNodes(t *testing.T) {
	t.Parallel()
	for _, c := range allNodeCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			_, n := buildNode(t, c)
			warn, err := PlanDocker(n, false)
			if err != nil {
				t.Fatal(err)
			}
			if warn.Present != c.docker {
				t.Fatalf("Present = %v", warn.Present)
			}
			if !c.docker {
				if warn.Warning != "" {
					t.Errorf("warning without Docker: %q", warn.Warning)
				}
				return
			}
			// Unasked, install only explains, naming the fallback and the flag.
			if warn.DaemonJSON != nil || !strings.Contains(warn.Warning, "8.8.8.8") || !strings.Contains(warn.Warning, "--docker") {
				t.Errorf("unasked plan: %+v", warn)
			}
			p, err := PlanDocker(n, true)
			if err != nil {
				t.Fatal(err)
			}
			want := "{\n  \"dns\": [\"172.17.0.1\"],\n" + strings.TrimPrefix(dockerDaemonJSON, "{\n")
			if string(p.DaemonJSON) != want || !p.DaemonJSONExisted || !p.DaemonJSONChanged {
				t.Errorf("daemon.json:\n%s\nwant:\n%s", p.DaemonJSON, want)
			}
			if p.Listen != "172.17.0.1:53" || p.Allow != "172.17.0.0/16" {
				t.Errorf("listen %q allow %q", p.Listen, p.Allow)
			}
			if !strings.Contains(string(p.SocketDropIn.Data), "ListenDatagram=172.17.0.1:53\nListenStream=172.17.0.1:53\nFreeBind=yes\n") {
				t.Errorf("socket drop-in:\n%s", p.SocketDropIn.Data)
			}
			if len(p.Reasons) != 3 || p.Next == "" {
				t.Errorf("report: %q next %q", p.Reasons, p.Next)
			}
		})
	}
}

func TestSetDockerDNS(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want, previous string
	}{
		{"no file", "", "{\n  \"dns\": [\"172.17.0.1\"]\n}\n", ""},
		{"empty object", "{}\n", "{\n  \"dns\": [\"172.17.0.1\"]\n}\n", ""},
		{"one line", `{"log-level":"warn"}`, `{"dns": ["172.17.0.1"], "log-level":"warn"}`, ""},
		{"tabs", "{\n\t\"iptables\": false\n}\n", "{\n\t\"dns\": [\"172.17.0.1\"],\n\t\"iptables\": false\n}\n", ""},
		{
			"dns replaced in place",
			"{\n    \"dns\" :  [\"8.8.8.8\", \"1.1.1.1\"],\n    \"dns-search\": [\"corp.example\"]\n}\n",
			"{\n    \"dns\" :  [\"172.17.0.1\"],\n    \"dns-search\": [\"corp.example\"]\n}\n",
			`["8.8.8.8", "1.1.1.1"]`,
		},
		{"already set", "{ \"dns\": [ \"172.17.0.1\" ] }", "{ \"dns\": [ \"172.17.0.1\" ] }", `[ "172.17.0.1" ]`},
		{"nested dns key untouched", `{"x": {"dns": 1}}`, `{"dns": ["172.17.0.1"], "x": {"dns": 1}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, prev, err := setDockerDNS([]byte(tc.in), "172.17.0.1")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want || prev != tc.previous {
				t.Errorf("got %q (previous %q), want %q (previous %q)", got, prev, tc.want, tc.previous)
			}
			if !json.Valid(got) {
				t.Fatalf("invalid JSON %q", got)
			}
			// Everything but "dns" means what it meant.
			var before, after map[string]any
			json.Unmarshal([]byte(tc.in), &before)
			json.Unmarshal(got, &after)
			if !reflect.DeepEqual(after["dns"], []any{"172.17.0.1"}) {
				t.Errorf("dns = %v", after["dns"])
			}
			delete(after, "dns")
			if before != nil {
				delete(before, "dns")
			}
			if len(before) != len(after) || (len(before) > 0 && !maps.EqualFunc(before, after, func(a, b any) bool { return reflect.DeepEqual(a, b) })) {
				t.Errorf("other keys changed: %v → %v", before, after)
			}
			// Install again: nothing to change.
			again, _, err := setDockerDNS(got, "172.17.0.1")
			if err != nil || string(again) != string(got) {
				t.Errorf("second edit changed %q to %q (%v)", got, again, err)
			}
		})
	}
	for _, bad := range []string{"[1]", "{", `{"a":1} x`} {
		if _, _, err := setDockerDNS([]byte(bad), "172.17.0.1"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPlanDockerUsesBipAndCreatesDaemonJSON(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	nodeTree{files: map[string]string{DockerDaemonJSON: `{"bip": "10.200.0.1/24"}`}}.write(t, root)
	n, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p, err := PlanDocker(n, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.Listen != "10.200.0.1:53" || p.Allow != "10.200.0.0/24" || string(p.DaemonJSON) != `{"dns": ["10.200.0.1"], "bip": "10.200.0.1/24"}` {
		t.Errorf("bip plan: listen %q allow %q json %s", p.Listen, p.Allow, p.DaemonJSON)
	}

	root = t.TempDir()
	nodeTree{files: map[string]string{"/usr/bin/dockerd": ""}}.write(t, root)
	m, err := nodefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err = PlanDocker(m, true)
	if err != nil {
		t.Fatal(err)
	}
	if p.DaemonJSONExisted || string(p.DaemonJSON) != "{\n  \"dns\": [\"172.17.0.1\"]\n}\n" {
		t.Errorf("no daemon.json: existed %v, %q", p.DaemonJSONExisted, p.DaemonJSON)
	}
}
