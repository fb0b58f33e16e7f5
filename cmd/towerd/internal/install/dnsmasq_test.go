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
			// dnsmasq's order: Debian's command line (CONFIG_DIR) before
			// its configuration file.
			want := []string{DnsmasqDefaults, "/etc/dnsmasq.d/10-consul", "/etc/dnsmasq.d/README", DnsmasqConf}
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
		stop    string // "" = none
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
			serves: true, dhcp: true,
			// DHCP stays: dnsmasq is not stopped, its DNS goes (issue 25
			// item 7), in the file it reads last.
			stop:    "echo port=0 >> /etc/dnsmasq.conf && systemctl restart dnsmasq.service",
			configs: DnsmasqDefaults + " /etc/dnsmasq.d/x " + DnsmasqConf + " /etc/dm/a.conf /etc/extra.conf",
		},
		{
			name:   "DNS only: stopped",
			files:  map[string]string{DnsmasqConf: "server=/consul/127.0.0.1#8600\n", "/usr/sbin/dnsmasq": ""},
			serves: true, stop: "systemctl disable --now dnsmasq.service", configs: DnsmasqConf,
		},
		{
			name: "Debian without CONFIG_DIR reads no conf-dir",
			files: map[string]string{DnsmasqConf: "", DnsmasqDefaults: "ENABLED=1\n#CONFIG_DIR=/etc/dnsmasq.d\n",
				"/etc/dnsmasq.d/10-consul": "server=/consul/127.0.0.1#8600\n"},
			serves: true, stop: "systemctl disable --now dnsmasq.service", configs: DnsmasqDefaults + " " + DnsmasqConf,
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
			stop := strings.Join(s.StopCommands, ";")
			if s.ServesDNS != tc.serves || s.ServesDHCP != tc.dhcp || (tc.stop == "") != (stop == "") || !strings.HasPrefix(stop, tc.stop) ||
				strings.Join(s.ConfigFiles, " ") != tc.configs {
				t.Errorf("got %+v", s)
			}
			if tc.dhcp && strings.Contains(stop, "disable") {
				t.Errorf("a dnsmasq that serves DHCP is stopped: %q", stop)
			}
		})
	}
}
