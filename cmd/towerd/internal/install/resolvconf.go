package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// Paths install reads and writes, as the target system sees them.
const (
	ResolvConfPath      = "/etc/resolv.conf"
	ResolvConfBackup    = resolvconf.BackupPath
	ResolvedUpstreams   = "/run/systemd/resolve/resolv.conf"
	ResolvedDropIn      = "/etc/systemd/resolved.conf.d/towerd.conf"
	ConfigPath          = "/etc/towerd/towerd.toml"
	towerdListenAddress = "127.0.0.1"
)

// resolvConfMarker starts the first line of every resolv.conf towerd
// writes. Uninstall puts the original back only while the file still starts
// with it (and is byte for byte what install wrote): anything else means
// someone else has taken the file over since, and their version wins.
const resolvConfMarker = resolvconf.ManagedMarker

// ownsResolvConf reports whether data is a resolv.conf towerd wrote.
func ownsResolvConf(data []byte) bool {
	return bytes.HasPrefix(data, []byte(resolvConfMarker))
}

// keptResolvConf is what the resolv.conf towerd writes keeps of the one
// it replaces.
type keptResolvConf struct {
	// Nameservers are the file's servers (host:port), for a static node.
	Nameservers []string
	// SearchLines are its domain and search lines, normalized, in file
	// order: the last of them is the one glibc uses, as before.
	SearchLines []string
	// Options are the words of its options lines.
	Options []string
}

// parseKept reads what install keeps from a resolv.conf.
func parseKept(data []byte) (keptResolvConf, error) {
	rc, err := resolvconf.Parse(bytes.NewReader(data))
	if err != nil {
		return keptResolvConf{}, err
	}
	k := keptResolvConf{Nameservers: rc.Nameservers, Options: rc.Options}
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "search" {
			// systemd-resolved writes "search ." for "no search domains":
			// towerd would warn about the root as a search domain at every
			// start and reload (issue 32), so "." is not carried over.
			f = slices.DeleteFunc(f, func(w string) bool { return w == "." })
		}
		if len(f) >= 2 && (f[0] == "search" || (f[0] == "domain" && len(f) == 2)) {
			k.SearchLines = append(k.SearchLines, strings.Join(f, " "))
		}
	}
	return k, nil
}

// renderResolvConf is the resolv.conf that sends every lookup to towerd,
// keeping the domain, search and options lines of the one it replaces.
func renderResolvConf(k keptResolvConf) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (`towerd install`): lookups go to towerd on %s:53.\n", resolvConfMarker, towerdListenAddress)
	fmt.Fprintf(&b, "# `towerd uninstall` puts back the previous file, kept as %s,\n", ResolvConfBackup)
	b.WriteString("# as long as this one is unchanged.\n")
	fmt.Fprintf(&b, "nameserver %s\n", towerdListenAddress)
	for _, l := range k.SearchLines {
		b.WriteString(l + "\n")
	}
	if len(k.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(k.Options, " "))
	}
	return []byte(b.String())
}

// previousResolvConf returns the resolv.conf install replaces (or replaced:
// once the live file is towerd's, the backup is the previous one), read
// through symlinks inside the root, and the path it came from.
func previousResolvConf(fsys fileSystem) (keptResolvConf, string, error) {
	name := ResolvConfPath
	if data, err := fsys.ReadFile(name); err == nil && ownsResolvConf(data) {
		name = ResolvConfBackup
	}
	data, err := fsys.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		// No resolv.conf at all (or a dangling stub link): glibc then asks
		// the local host; there is nothing to keep.
		return keptResolvConf{}, name, nil
	}
	if err != nil {
		return keptResolvConf{}, name, fmt.Errorf("reading %s: %w", name, err)
	}
	k, err := parseKept(data)
	// Named as the file it was, wherever it is kept now: a second install
	// (or one finishing a killed one) renders the same config as the first.
	return k, ResolvConfPath, err
}

// discovered are the upstreams install found for zone ".".
type discovered struct {
	servers []string // host:port
	source  string   // the file they came from
	skipped []string // left out, each with why
	// follow is the file zone "." follows instead (resolv_conf).
	follow string
}

// staticUpstreams copies the servers of the resolv.conf being replaced,
// on a node where no program rewrites it. Loopback servers on port 53 are
// left out: 127.0.0.53 is resolved's stub, which this install turns off,
// and 127.0.0.1 is towerd itself; forwarding to either would loop or fail.
func staticUpstreams(fsys fileSystem) (discovered, error) {
	k, source, err := previousResolvConf(fsys)
	if err != nil {
		return discovered{}, fmt.Errorf("reading upstreams: %w", err)
	}
	d := discovered{source: source}
	for _, s := range k.Nameservers {
		if why := localResolver(s); why != "" {
			d.skipped = append(d.skipped, s+" ("+why+")")
			continue
		}
		d.servers = append(d.servers, s)
	}
	return d, nil
}

// localResolver says why a nameserver is this node's own resolver, or "".
func localResolver(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port != "53" {
		return ""
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !(ip.IsLoopback() || ip.IsUnspecified()) {
		return ""
	}
	switch ip.String() {
	case "127.0.0.53", "127.0.0.54":
		return "systemd-resolved's stub, turned off by this install"
	case towerdListenAddress:
		return "towerd itself"
	}
	return "a resolver on this node, which towerd replaces"
}

// renderDropIn turns off resolved's stub listener on 127.0.0.53. resolved
// itself keeps running: it still learns upstreams from DHCP and writes them
// to /run/systemd/resolve/resolv.conf, and still serves LLMNR/mDNS if set up.
func renderDropIn() []byte {
	return []byte("# Written by `towerd install`: towerd answers on 127.0.0.1:53 and\n" +
		"# /etc/resolv.conf points at it, so systemd-resolved's stub listener on\n" +
		"# 127.0.0.53 is turned off. `towerd uninstall` removes this file.\n" +
		"[Resolve]\nDNSStubListener=no\n")
}

// resolvedPresent tells whether systemd-resolved is installed or running
// under the root: only then is its drop-in worth writing.
func resolvedPresent(fsys fileSystem) bool {
	for _, p := range []string{
		"/run/systemd/resolve",
		"/etc/systemd/resolved.conf",
		"/usr/lib/systemd/system/systemd-resolved.service",
		"/lib/systemd/system/systemd-resolved.service",
	} {
		if _, err := fsys.Lstat(p); err == nil {
			return true
		}
	}
	return false
}
