package install

import (
	"strings"
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

func TestDetectDnsmasqOnTheNodes(t *testing.T) {
	t.Parallel()
	for _, c := range allNodeCases() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			_, n := buildNode(t, c)
			s := DetectDnsmasq(n)
			if c.kind != nodeConsulDnsmasq {
				if s.Present || s.StopCommands != nil {
					t.Errorf("dnsmasq found on %s: %+v", c, s)
				}
				return
			}
			want := []string{DnsmasqConf, "/etc/dnsmasq.d/10-consul", "/etc/dnsmasq.d/README"}
			if !s.Present || !s.Enabled || !s.ServesDNS || s.ServesDHCP ||
				strings.Join(s.ConfigFiles, " ") != strings.Join(want, " ") {
				t.Errorf("state %+v, want config files %q", s, want)
			}
			if strings.Join(s.StopCommands, ";") != "systemctl disable --now dnsmasq.service" {
				t.Errorf("stop commands %q", s.StopCommands)
			}
			ev := strings.Join(s.Evidence, "\n")
			for _, w := range []string{"10-consul", "is enabled", "127.0.0.1"} {
				if !strings.Contains(ev, w) {
					t.Errorf("evidence lacks %q:\n%s", w, ev)
				}
			}
		})
	}
}

func TestDetectDnsmasqVariants(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		files   map[string]string
		serves  bool
		dhcp    bool
		stop    bool
		configs string
	}{
		{
			name:  "DHCP only (port=0) holds no port 53",
			files: map[string]string{DnsmasqConf: "port=0\ndhcp-range=192.168.0.50,192.168.0.150,12h\n", "/usr/sbin/dnsmasq": ""},
			dhcp:  true, configs: DnsmasqConf,
		},
		{
			name: "conf-dir with only and skip extensions; a conf-file",
			files: map[string]string{
				DnsmasqConf:            "conf-dir=/etc/dm,*.conf\nconf-file=/etc/extra.conf\ndhcp-range=10.0.0.10,10.0.0.20\n",
				"/etc/dm/a.conf":       "server=/consul/127.0.0.1#8600\n",
				"/etc/dm/b.conf~":      "",
				"/etc/dm/.hidden.conf": "",
				"/etc/dm/c.txt":        "",
				"/etc/extra.conf":      "cache-size=1000\n",
				DnsmasqDefaults:        "CONFIG_DIR=/etc/dnsmasq.d,.bak\n",
				"/etc/dnsmasq.d/x":     "",
				"/etc/dnsmasq.d/x.bak": "",
			},
			serves: true, dhcp: true, stop: true,
			configs: DnsmasqConf + " /etc/dnsmasq.d/x /etc/dm/a.conf /etc/extra.conf",
		},
		{
			name:  "nothing but a resolv.conf at 127.0.0.1 (no dnsmasq installed)",
			files: map[string]string{ResolvConfPath: "nameserver 127.0.0.1\n"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			nodeTree{files: tc.files}.write(t, root)
			n, err := nodefs.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			s := DetectDnsmasq(n)
			if s.ServesDNS != tc.serves || s.ServesDHCP != tc.dhcp || (s.StopCommands != nil) != tc.stop ||
				strings.Join(s.ConfigFiles, " ") != tc.configs {
				t.Errorf("got %+v", s)
			}
		})
	}
}
