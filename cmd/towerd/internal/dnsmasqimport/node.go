package dnsmasqimport

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"strings"
)

// Where dnsmasq's configuration is on a node.
const (
	// ConfFile is the file dnsmasq reads unless its command line names
	// another (-C, --conf-file): its compile-time CONFFILE on Linux.
	ConfFile = "/etc/dnsmasq.conf"
	// DebianDefaults is sourced by Debian's dnsmasq.service (through
	// /usr/share/dnsmasq/systemd-helper) and init script, which turn its
	// variables into dnsmasq's command line.
	DebianDefaults = "/etc/default/dnsmasq"
	// ConfFileWhy is FileRead.Why of the configuration file.
	ConfFileWhy = "dnsmasq's configuration file"
)

// ReadNode reads what dnsmasq reads when the node starts it. On a node
// with Debian's /etc/default/dnsmasq, dnsmasq's command line comes first,
// as it does for dnsmasq itself (it reads a --conf-dir given there before
// its configuration file; `dnsmasq --test` shows it): the options Debian's
// helper builds from that file's variables (-7 CONFIG_DIR, -r RESOLV_CONF,
// -c CACHESIZE, -s DOMAIN_SUFFIX, -i/-I, DNSMASQ_OPTS), each conf-dir's
// files read in place. Then the configuration file, ConfFile unless the
// command line names another, with everything it includes. Without either
// file it returns ErrNoConfig.
func ReadNode(files Files) (Reading, error) {
	rd := &reader{files: files, reading: map[string]bool{}, seen: map[string]bool{}}
	conf, named := ConfFile, false
	data, err := files.ReadFile(DebianDefaults)
	switch {
	case err == nil:
		rd.out.Files = append(rd.out.Files, FileRead{Path: DebianDefaults, Why: "Debian's dnsmasq.service turns its variables into dnsmasq's command line"})
		vars := shellVars(data)
		rd.out.Debian = map[string]string{}
		for k, v := range vars {
			rd.out.Debian[k] = v.value
		}
		for _, d := range debianCommandLine(vars, resolvconfInstalled(files)) {
			if d.Name == "conf-file" {
				// -C names the configuration file itself, read after the
				// rest of the command line; without a value, none.
				conf, named = d.Value, true
				continue
			}
			if err := rd.directive(d, 0); err != nil {
				return rd.out, err
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return rd.out, err
	}
	if conf == "" {
		return rd.out, nil
	}
	err = rd.readFile(conf, ConfFileWhy, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !named && rd.out.Debian != nil:
		return rd.out, nil // dnsmasq starts without its default file
	case errors.Is(err, fs.ErrNotExist) && !named:
		return rd.out, ErrNoConfig
	}
	return rd.out, err
}

// resolvconfInstalled is the test of Debian's helper: /sbin/resolvconf is
// executable.
func resolvconfInstalled(files Files) bool {
	info, err := files.Stat("/sbin/resolvconf")
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// shellVar is one NAME=value of a shell defaults file, and its line.
type shellVar struct {
	value string
	line  int
}

// shellVars reads the NAME=value lines of a shell file the way sourcing it
// would set them, for the plain assignments defaults files hold: the last
// one wins, quotes are dropped, "export" is allowed.
func shellVars(data []byte) map[string]shellVar {
	vars := map[string]shellVar{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimSpace(strings.TrimPrefix(line, "export "))
		name, value, ok := strings.Cut(line, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t#") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		} else if i := strings.Index(value, " #"); i >= 0 {
			value = strings.TrimSpace(value[:i])
		}
		vars[name] = shellVar{value: value, line: n}
	}
	return vars
}

// debianCommandLine is the part of dnsmasq's command line Debian's helper
// builds from vars that the import cares about, in the helper's order
// (usr/share/dnsmasq/systemd-helper, "exec"), each directive placed at the
// line that set its variable. Its --local-service and -u are left out: they
// are the helper's, not the node's settings.
func debianCommandLine(vars map[string]shellVar, resolvconf bool) []Directive {
	var out []Directive
	add := func(variable, name, value string) {
		out = append(out, Directive{File: DebianDefaults, Line: vars[variable].line, Name: name, Value: value, Has: true})
	}
	for _, iface := range strings.Fields(vars["DNSMASQ_INTERFACE"].value) {
		add("DNSMASQ_INTERFACE", "interface", iface)
	}
	for _, iface := range strings.Fields(vars["DNSMASQ_EXCEPT"].value) {
		add("DNSMASQ_EXCEPT", "except-interface", iface)
	}
	if v := vars["DHCP_LEASE"].value; v != "" {
		add("DHCP_LEASE", "dhcp-leasefile", v)
	}
	if v := vars["DOMAIN_SUFFIX"].value; v != "" {
		add("DOMAIN_SUFFIX", "domain", v)
	}
	switch v := vars["RESOLV_CONF"].value; {
	case v != "":
		add("RESOLV_CONF", "resolv-file", v)
	case vars["IGNORE_RESOLVCONF"].value != "yes" && resolvconf:
		// The file resolvconf writes for dnsmasq; towerd follows the one
		// the node's resolvconf keeps (install decides), so this is only
		// said, in the report's files, not imported as resolv_conf.
	}
	if v := vars["CACHESIZE"].value; v != "" {
		add("CACHESIZE", "cache-size", v)
	}
	if v := vars["CONFIG_DIR"].value; v != "" {
		add("CONFIG_DIR", "conf-dir", v)
	}
	for _, d := range commandLineOptions(strings.Fields(vars["DNSMASQ_OPTS"].value)) {
		d.File, d.Line = DebianDefaults, vars["DNSMASQ_OPTS"].line
		out = append(out, d)
	}
	return out
}

// shortOptions are dnsmasq's one-letter options the import reads from a
// command line (option.c's OPTSTRING), by the long name they stand for;
// those marked false take no value.
var shortOptions = map[byte]struct {
	name  string
	value bool
}{
	'C': {"conf-file", true}, '7': {"conf-dir", true}, 'r': {"resolv-file", true},
	'S': {"server", true}, 'A': {"address", true}, 'a': {"listen-address", true},
	'p': {"port", true}, 'c': {"cache-size", true}, 'i': {"interface", true},
	'I': {"except-interface", true}, 'H': {"addn-hosts", true}, 'T': {"local-ttl", true},
	's': {"domain", true}, 'u': {"user", true}, 'g': {"group", true}, 'x': {"pid-file", true},
	'l': {"dhcp-leasefile", true}, 'F': {"dhcp-range", true}, 'O': {"dhcp-option", true},
	'R': {"no-resolv", false}, 'h': {"no-hosts", false}, 'o': {"strict-order", false},
	'n': {"no-poll", false}, 'q': {"log-queries", false}, 'D': {"domain-needed", false},
	'b': {"bogus-priv", false}, 'E': {"expand-hosts", false}, 'N': {"no-negcache", false},
	'k': {"keep-in-foreground", false}, 'd': {"no-daemon", false}, 'z': {"bind-interfaces", false},
}

// commandLineOptions turns dnsmasq command-line words into directives:
// "--name=value", "--name value" (for an option that requires a value),
// "--name", and the short options above ("-7 DIR", "-7DIR"). An unknown
// short option becomes a directive named "-X", which the import reports.
func commandLineOptions(words []string) []Directive {
	var out []Directive
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case strings.HasPrefix(w, "--"):
			name, value, has := strings.Cut(w[2:], "=")
			if !has && requiresValue[name] && i+1 < len(words) {
				i++
				value, has = words[i], true
			}
			out = append(out, Directive{Name: name, Value: value, Has: has})
		case strings.HasPrefix(w, "-") && len(w) >= 2:
			opt, ok := shortOptions[w[1]]
			switch {
			case !ok:
				out = append(out, Directive{Name: w})
			case !opt.value:
				out = append(out, Directive{Name: opt.name})
			case len(w) > 2:
				out = append(out, Directive{Name: opt.name, Value: w[2:], Has: true})
			case i+1 < len(words):
				i++
				out = append(out, Directive{Name: opt.name, Value: words[i], Has: true})
			default:
				out = append(out, Directive{Name: opt.name})
			}
		}
	}
	return out
}

// requiresValue are the long options whose value getopt_long takes from
// the next word ("--conf-dir /etc/dnsmasq.d"); an option whose value is
// optional (--conf-file, --resolv-file, --cache-size, ...) takes it only
// after "=", as getopt_long does.
var requiresValue = map[string]bool{
	"server": true, "local": true, "address": true, "listen-address": true, "port": true,
	"conf-dir": true, "servers-file": true, "interface": true, "except-interface": true,
	"addn-hosts": true, "hostsdir": true, "local-ttl": true, "domain": true, "rev-server": true,
	"host-record": true, "cname": true, "srv-host": true, "txt-record": true, "ptr-record": true,
	"mx-host": true, "min-cache-ttl": true, "max-cache-ttl": true, "neg-ttl": true,
	"dns-forward-max": true, "dhcp-range": true, "dhcp-option": true, "dhcp-host": true,
}
