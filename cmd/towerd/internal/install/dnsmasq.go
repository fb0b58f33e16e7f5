package install

import (
	"bufio"
	"bytes"
	"path"
	"strings"
)

// Where a Debian-style dnsmasq keeps its configuration and state.
const (
	DnsmasqConf        = "/etc/dnsmasq.conf"
	DnsmasqDefaults    = "/etc/default/dnsmasq"
	DnsmasqUnit        = "dnsmasq.service"
	dnsmasqDefaultDir  = "/etc/dnsmasq.d"
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
	// ConfigFiles are the files dnsmasq reads, in its order: dnsmasq.conf,
	// then conf-file= and conf-dir= entries and Debian's CONFIG_DIR. What
	// `towerd install --from-dnsmasq` imports.
	ConfigFiles []string
	// Evidence are report lines, one per thing found.
	Evidence []string
	// ServesDHCP: a dhcp-range is configured; stopping dnsmasq also stops
	// the node's DHCP service, which towerd does not replace.
	ServesDHCP bool
	// StopCommands are to be printed (and run by the operator) before
	// towerd's `systemctl enable --now towerd.socket`.
	StopCommands []string
}

// DetectDnsmasq looks for dnsmasq under the root: its configuration, its
// Debian defaults file, an enabled unit, a pid file, and a resolv.conf
// that sends lookups to 127.0.0.1 while dnsmasq is installed (HashiCorp's
// Consul recipe).
func DetectDnsmasq(files nodeFiles) DnsmasqState {
	var s DnsmasqState
	installed := nodeHas(files, "/usr/sbin/dnsmasq") || nodeHas(files, "/usr/bin/dnsmasq")
	if nodeHas(files, DnsmasqConf) {
		s.Present = true
		s.ConfigFiles = append(s.ConfigFiles, DnsmasqConf)
	}
	// Debian's unit runs dnsmasq with --conf-dir=$CONFIG_DIR, this
	// default when /etc/default/dnsmasq does not set it.
	configDir := dnsmasqDefaultDir + ",.dpkg-dist,.dpkg-old,.dpkg-new"
	if data, err := files.ReadFile(DnsmasqDefaults); err == nil {
		s.Present = true
		if v, ok := shellVar(data, "ENABLED"); ok && v == "0" {
			s.Evidence = append(s.Evidence, DnsmasqDefaults+": ENABLED=0 (its init script will not start it)")
		}
		if v, ok := shellVar(data, "CONFIG_DIR"); ok {
			configDir = v
		}
	}
	if configDir != "" && (installed || s.Present) {
		s.ConfigFiles = append(s.ConfigFiles, dnsmasqConfDir(files, configDir)...)
	}
	// dnsmasq.conf's own conf-file= and conf-dir= lines, one level deep.
	if data, err := files.ReadFile(DnsmasqConf); err == nil {
		for _, opt := range dnsmasqOptions(data) {
			switch opt.key {
			case "conf-file":
				s.ConfigFiles = appendMissing(s.ConfigFiles, opt.value)
			case "conf-dir":
				for _, f := range dnsmasqConfDir(files, opt.value) {
					s.ConfigFiles = appendMissing(s.ConfigFiles, f)
				}
			}
		}
	}
	if len(s.ConfigFiles) > 0 {
		s.Evidence = append(s.Evidence, "dnsmasq configuration: "+strings.Join(s.ConfigFiles, ", "))
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
	for _, f := range s.ConfigFiles {
		data, err := files.ReadFile(f)
		if err != nil {
			continue
		}
		for _, opt := range dnsmasqOptions(data) {
			switch opt.key {
			case "port":
				s.ServesDNS = opt.value != "0"
			case "dhcp-range":
				s.ServesDHCP = true
			}
		}
	}
	if !s.ServesDNS {
		s.Evidence = append(s.Evidence, "dnsmasq has port=0: it serves no DNS and does not hold port 53")
		return s
	}
	if s.ServesDHCP {
		s.Evidence = append(s.Evidence, "dnsmasq also serves DHCP (dhcp-range): stopping it stops that too; to keep it, set port=0 instead of stopping it")
	}
	// One command stops it now and keeps it from starting at boot, so
	// towerd.socket can bind 127.0.0.1:53.
	s.StopCommands = []string{"systemctl disable --now " + DnsmasqUnit}
	return s
}

type dnsmasqOption struct{ key, value string }

// dnsmasqOptions parses dnsmasq's "key=value" / "key" lines.
func dnsmasqOptions(data []byte) []dnsmasqOption {
	var out []dnsmasqOption
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		out = append(out, dnsmasqOption{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return out
}

// dnsmasqConfDir lists the files dnsmasq reads for "conf-dir=DIR[,ext...]":
// an extension ".x" leaves files ending in it out; "*.x" reads only files
// ending in it. Like dnsmasq, names starting with "." and editor backups
// ("~", "#...#") are skipped.
func dnsmasqConfDir(files nodeFiles, spec string) []string {
	parts := strings.Split(spec, ",")
	dir := strings.TrimSpace(parts[0])
	var skip, only []string
	for _, p := range parts[1:] {
		p = strings.TrimSpace(p)
		if after, ok := strings.CutPrefix(p, "*"); ok {
			only = append(only, after)
		} else if p != "" {
			skip = append(skip, p)
		}
	}
	entries, err := files.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") ||
			(strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#")) {
			continue
		}
		if hasAnySuffix(name, skip) || (len(only) > 0 && !hasAnySuffix(name, only)) {
			continue
		}
		out = append(out, path.Join(dir, name))
	}
	return out
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

func appendMissing(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// shellVar returns the value of NAME=value in a shell defaults file.
func shellVar(data []byte, name string) (string, bool) {
	value, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, name+"="); ok {
			value, found = strings.Trim(v, `"'`), true
		}
	}
	return value, found
}
