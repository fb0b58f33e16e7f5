package resolvconf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/towerd/towerd/resolver/boundedfile"
)

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Conf
	}{
		{
			name: "systemd-resolved upstream list",
			in: `# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).
# Do not edit.
nameserver 10.0.0.2
nameserver 2001:db8::53
search corp.example.com
`,
			want: Conf{Nameservers: []string{"10.0.0.2:53", "[2001:db8::53]:53"}, Search: []string{"corp.example.com"}},
		},
		{
			name: "comments, blanks, tabs and trailing comments",
			in:   "; old style comment\n\n\tnameserver\t192.0.2.1  # primary\r\nnameserver 192.0.2.2;secondary\n",
			want: Conf{Nameservers: []string{"192.0.2.1:53", "192.0.2.2:53"}},
		},
		{
			name: "link-local with zone",
			in:   "nameserver fe80::1%eth0\n",
			want: Conf{Nameservers: []string{"[fe80::1%eth0]:53"}},
		},
		{
			name: "invalid nameservers skipped as glibc does",
			in:   "nameserver dns.example.com\nnameserver 192.0.2.1:5353\nnameserver\nnameserver 192.0.2.9\n",
			want: Conf{Nameservers: []string{"192.0.2.9:53"}},
		},
		{
			name: "last of search and domain wins",
			in:   "search a.example b.example\ndomain c.example\n",
			want: Conf{Search: []string{"c.example"}},
		},
		{
			name: "domain then search",
			in:   "domain c.example\nsearch a.example b.example\n",
			want: Conf{Search: []string{"a.example", "b.example"}},
		},
		{
			name: "options accumulate, unknown lines ignored",
			in:   "options ndots:2 edns0\nsortlist 130.155.160.0/255.255.240.0\nlookup file bind\noptions timeout:1\n",
			want: Conf{Options: []string{"ndots:2", "edns0", "timeout:1"}},
		},
		{
			name: "more than glibc's three are kept",
			in:   "nameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n",
			want: Conf{Nameservers: []string{"192.0.2.1:53", "192.0.2.2:53", "192.0.2.3:53", "192.0.2.4:53"}},
		},
		{name: "empty", in: "", want: Conf{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestParseResolvConfReadError(t *testing.T) {
	broken := errors.New("disk on fire")
	if _, err := Parse(iotest.ErrReader(broken)); !errors.Is(err, broken) {
		t.Errorf("error = %v, want it to wrap %v", err, broken)
	}
}

func TestSystemResolvConf(t *testing.T) {
	const (
		resolved = "nameserver 10.0.0.2\n"
		stub     = "nameserver 127.0.0.53\nsearch example.com\n"
	)
	tests := []struct {
		name     string
		files    map[string]string
		wantPath string
		wantNS   []string
		wantErr  error
	}{
		{
			name:     "resolved in charge: its real upstreams, not the stub",
			files:    map[string]string{resolvedPath: resolved, resolvConfPath: stub},
			wantPath: resolvedPath, wantNS: []string{"10.0.0.2:53"},
		},
		{
			name:     "plain resolv.conf",
			files:    map[string]string{resolvConfPath: stub},
			wantPath: resolvConfPath, wantNS: []string{"127.0.0.53:53"},
		},
		{
			name:     "neither",
			files:    map[string]string{},
			wantPath: resolvConfPath, wantErr: fs.ErrNotExist,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range tt.files {
				path := filepath.Join(root, rel)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			conf, path, err := ReadSystem(root)
			if want := filepath.Join(root, tt.wantPath); path != want {
				t.Errorf("path = %q, want %q", path, want)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(conf.Nameservers, tt.wantNS) {
				t.Errorf("nameservers = %q, want %q", conf.Nameservers, tt.wantNS)
			}
		})
	}
}

// TestSystemResolvConfRefused: /etc/resolv.conf pointing at /dev/zero (issue
// 21: 1.63 GB in 4 s) is refused at once, the error naming the file.
func TestSystemResolvConfRefused(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, resolvConfPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", path); err != nil {
		t.Fatal(err)
	}
	_, got, err := ReadSystem(root)
	if got != path || !errors.Is(err, boundedfile.ErrNotRegular) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadSystem = %q, %v; want %s refused as not a regular file", got, err, path)
	}
}

func TestWithoutAddresses(t *testing.T) {
	servers := []string{"127.0.0.1:53", "[::1]:53", "127.0.0.53:53", "10.0.0.2:53", "127.0.0.1:5353", "0.0.0.0:53"}
	tests := []struct {
		name   string
		listen []string
		want   []string
	}{
		{"nothing to drop", []string{"127.0.0.1:1053"}, servers},
		{"exact loopback listen", []string{"127.0.0.1:53"},
			[]string{"[::1]:53", "127.0.0.53:53", "10.0.0.2:53", "127.0.0.1:5353"}},
		{"IPv4 wildcard drops every loopback on the port", []string{"0.0.0.0:53"},
			[]string{"10.0.0.2:53", "127.0.0.1:5353"}},
		{"IPv6 wildcard too", []string{"[::]:53"},
			[]string{"10.0.0.2:53", "127.0.0.1:5353"}},
		{"other port", []string{"0.0.0.0:5353"},
			[]string{"127.0.0.1:53", "[::1]:53", "127.0.0.53:53", "10.0.0.2:53", "0.0.0.0:53"}},
		{"a host address listen", []string{"10.0.0.2:53"},
			[]string{"127.0.0.1:53", "[::1]:53", "127.0.0.53:53", "127.0.0.1:5353", "0.0.0.0:53"}},
		{"IPv4-mapped and default port", []string{"[::ffff:127.0.0.53]", "::1"},
			[]string{"127.0.0.1:53", "10.0.0.2:53", "127.0.0.1:5353", "0.0.0.0:53"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WithoutAddresses(servers, tt.listen)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("WithoutAddresses(%q) = %q, want %q", tt.listen, got, tt.want)
			}
		})
	}
}
