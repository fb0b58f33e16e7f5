package install

import (
	"fmt"
	"strings"
	"testing"
)

func TestRewriteNsswitch(t *testing.T) {
	t.Parallel()
	const marker = nsswitchMarker
	cases := []struct {
		name, in, want string
		removed        []string
	}{
		{
			name: "debian 12 with libnss-resolve",
			in: "# /etc/nsswitch.conf\n#\n# Example configuration of GNU Name Service Switch functionality.\n\n" +
				"passwd:         files systemd\ngroup:          files systemd\nshadow:         files\n\n" +
				"hosts:          files resolve [!UNAVAIL=return] dns myhostname\nnetworks:       files\n",
			want: "# /etc/nsswitch.conf\n#\n# Example configuration of GNU Name Service Switch functionality.\n\n" +
				"passwd:         files systemd\ngroup:          files systemd\nshadow:         files\n\n" +
				marker + " \"resolve [!UNAVAIL=return]\" (see `towerd uninstall`).\n" +
				"hosts:          files dns myhostname\nnetworks:       files\n",
			removed: []string{"resolve [!UNAVAIL=return]"},
		},
		{
			name: "fedora order with mymachines and a comment",
			in:   "hosts:      files myhostname mymachines resolve [!UNAVAIL=return] dns # from authselect\n",
			want: marker + " \"resolve [!UNAVAIL=return]\" (see `towerd uninstall`).\n" +
				"hosts:      files myhostname mymachines dns # from authselect\n",
			removed: []string{"resolve [!UNAVAIL=return]"},
		},
		{
			name: "blanks inside the action group, tabs, no newline at the end",
			in:   "hosts:\tfiles\tresolve [ !UNAVAIL = return ]\tdns",
			want: marker + " \"resolve [ !UNAVAIL = return ]\" (see `towerd uninstall`).\n" +
				"hosts:\tfiles\tdns",
			removed: []string{"resolve [ !UNAVAIL = return ]"},
		},
		{
			name:    "resolve without dns gets dns in its place",
			in:      "hosts: files resolve [!UNAVAIL=return] myhostname\n",
			want:    marker + " \"resolve [!UNAVAIL=return]\" (see `towerd uninstall`).\nhosts: files dns myhostname\n",
			removed: []string{"resolve [!UNAVAIL=return]"},
		},
		{
			name: "ubuntu default without resolve is left alone",
			in:   "hosts:          files mdns4_minimal [NOTFOUND=return] dns\n",
			want: "hosts:          files mdns4_minimal [NOTFOUND=return] dns\n",
		},
		{
			name: "a commented-out hosts line and other databases naming resolve are not touched",
			in:   "#hosts: files resolve dns\nnetgroup: nis resolve\nhosts: files dns\n",
			want: "#hosts: files resolve dns\nnetgroup: nis resolve\nhosts: files dns\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := RewriteNsswitch([]byte(tc.in))
			if string(got.Data) != tc.want {
				t.Errorf("data:\n%q\nwant:\n%q", got.Data, tc.want)
			}
			if got.Changed != (tc.removed != nil) || strings.Join(got.Removed, "|") != strings.Join(tc.removed, "|") {
				t.Errorf("changed %v removed %q, want %q", got.Changed, got.Removed, tc.removed)
			}
			// Install runs again: nothing more to do.
			again := RewriteNsswitch(got.Data)
			if again.Changed || string(again.Data) != tc.want {
				t.Errorf("second rewrite changed the file: %q", again.Data)
			}
			if got.Reason == "" {
				t.Error("no report line")
			}
		})
	}
}

func TestHostsSources(t *testing.T) {
	got, ok := HostsSources([]byte("passwd: files\n# hosts: dns\nhosts:  files mdns4_minimal [NOTFOUND=return] resolve [!UNAVAIL=return] dns # c\nhosts: dns\n"))
	want := []NssSource{{Name: "files"}, {Name: "mdns4_minimal", Actions: []string{"[NOTFOUND=return]"}},
		{Name: "resolve", Actions: []string{"[!UNAVAIL=return]"}}, {Name: "dns"}}
	if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HostsSources = %v, %v; want %v", got, ok, want)
	}
	if _, ok := HostsSources([]byte("passwd: files\n")); ok {
		t.Error("a file without hosts: has a hosts line")
	}
}
