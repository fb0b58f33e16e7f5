package install

import (
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/dnsmasqimport"
)

// Where a Debian-style dnsmasq keeps its configuration and state.
const (
	DnsmasqConf        = dnsmasqimport.ConfFile
	DnsmasqDefaults    = dnsmasqimport.DebianDefaults
	DnsmasqUnit        = "dnsmasq.service"
	dnsmasqPIDFile     = "/run/dnsmasq/dnsmasq.pid"
	dnsmasqEnabledLink = "/etc/systemd/system/multi-user.target.wants/" + DnsmasqUnit
)

// DnsmasqState is what install found of a dnsmasq on the node. It only
// reads: stopping dnsmasq is for the operator, with the printed commands,
// before towerd takes port 53.
type DnsmasqState struct {
	// Present: dnsmasq is installed or configured.
	Present bool
	// ServesDNS: its DNS side is on (no port=0), so it holds port 53 while
	// it runs and must stop before towerd starts.
	ServesDNS bool
	// Enabled: dnsmasq.service is enabled (starts at boot).
	Enabled bool
	// ConfigFiles are the files dnsmasq reads, in its order
	// (dnsmasqimport.ReadNode: Debian's /etc/default/dnsmasq and its
	// CONFIG_DIR first, then dnsmasq.conf and what it includes). What
	// `towerd install --from-dnsmasq` imports.
	ConfigFiles []string
	// Evidence are report lines, one per thing found.
	Evidence []string
	// ServesDHCP: a dhcp-range is configured; stopping dnsmasq would also
	// stop the node's DHCP service, which towerd does not replace.
	ServesDHCP bool
	// StopCommands free port 53 for towerd: printed (and run by the
	// operator) before `systemctl enable --now towerd.socket`. Where dnsmasq
	// also serves DHCP they keep it running with its DNS off (port=0)
	// instead of stopping it.
	StopCommands []string
	// UndoCommands give dnsmasq its port back after `towerd uninstall`.
	UndoCommands []string
}

// DetectDnsmasq looks for dnsmasq under the root: the configuration it
// reads (dnsmasqimport.ReadNode), an enabled unit, a pid file, and a
// resolv.conf that sends lookups to 127.0.0.1 while dnsmasq is installed
// (HashiCorp's Consul recipe).
func DetectDnsmasq(files nodeFiles) DnsmasqState {
	var s DnsmasqState
	installed := nodeHas(files, "/usr/sbin/dnsmasq") || nodeHas(files, "/usr/bin/dnsmasq")
	read, err := dnsmasqimport.ReadNode(files)
	s.ConfigFiles = read.Paths()
	if len(s.ConfigFiles) > 0 {
		s.Present = true
		s.Evidence = append(s.Evidence, "dnsmasq configuration: "+strings.Join(s.ConfigFiles, ", "))
	}
	if err != nil && len(s.ConfigFiles) > 0 {
		s.Evidence = append(s.Evidence, "dnsmasq configuration not read to the end: "+err.Error())
	}
	if read.Debian["ENABLED"] == "0" {
		s.Evidence = append(s.Evidence, DnsmasqDefaults+": ENABLED=0 (its init script will not start it)")
	}
	if nodeHas(files, dnsmasqEnabledLink) {
		s.Present, s.Enabled = true, true
		s.Evidence = append(s.Evidence, DnsmasqUnit+" is enabled ("+dnsmasqEnabledLink+")")
	}
	if nodeHas(files, dnsmasqPIDFile) {
		s.Present = true
		s.Evidence = append(s.Evidence, "dnsmasq is running ("+dnsmasqPIDFile+")")
	}
	if installed && resolvConfNames(files, replacedResolvConf(files), "127.0.0.1") {
		s.Present = true
		s.Evidence = append(s.Evidence, ResolvConfPath+" sends lookups to 127.0.0.1, where dnsmasq answers")
	}
	if !s.Present {
		return DnsmasqState{}
	}
	s.ServesDNS = true
	for _, d := range read.Directives {
		switch d.Name {
		case "port":
			s.ServesDNS = d.Value != "0" // the last one wins, as in dnsmasq
		case "dhcp-range":
			s.ServesDHCP = true
		}
	}
	if !s.ServesDNS {
		s.Evidence = append(s.Evidence, "dnsmasq has port=0: it serves no DNS and does not hold port 53")
		return s
	}
	if s.ServesDHCP {
		// Stopping it would take the node's DHCP service down; port=0
		// turns its DNS off and leaves DHCP (dnsmasq(8), --port). The line
		// goes at the end of the file dnsmasq reads last, so it wins.
		conf := mainConfFile(read)
		s.Evidence = append(s.Evidence, "dnsmasq also serves DHCP (dhcp-range): it is not stopped, its DNS is turned off instead "+
			"(port=0 in "+conf+"); check that its DHCP clients still get a DNS server they can reach")
		s.StopCommands = []string{"echo port=0 >> " + conf + " && systemctl restart " + DnsmasqUnit + "   # DHCP stays, DNS off: towerd takes port 53"}
		s.UndoCommands = []string{"remove the port=0 line from " + conf + ", then: systemctl restart " + DnsmasqUnit}
		return s
	}
	// One command stops it now and keeps it from starting at boot, so
	// towerd.socket can bind 127.0.0.1:53.
	s.StopCommands = []string{"systemctl disable --now " + DnsmasqUnit}
	s.UndoCommands = []string{"systemctl enable --now " + DnsmasqUnit}
	return s
}

// mainConfFile is the configuration file dnsmasq reads last: the one read
// as its configuration file, else the default it would read were it there.
func mainConfFile(read dnsmasqimport.Reading) string {
	for _, f := range read.Files {
		if f.Why == dnsmasqimport.ConfFileWhy {
			return f.Path
		}
	}
	return DnsmasqConf
}
