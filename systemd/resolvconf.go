package systemd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strings"

	"github.com/towerd/towerd/upstream/resolvconf"
)

// Paths install reads and writes, as the target system sees them.
const (
	ResolvConfPath      = "/etc/resolv.conf"
	ResolvConfBackup    = "/etc/resolv.pre-towerd-backup.conf"
	ResolvedUpstreams   = "/run/systemd/resolve/resolv.conf"
	ResolvedDropIn      = "/etc/systemd/resolved.conf.d/towerd.conf"
	ConfigPath          = "/etc/towerd/towerd.toml"
	towerdListenAddress = "127.0.0.1"
)

// resolvConfMarker starts the first line of every resolv.conf towerd
// writes. Uninstall puts the original back only while the file still starts
// with it (and is byte for byte what install wrote): anything else means
// someone else has taken the file over since, and their version wins.
const resolvConfMarker = "# Managed by towerd"

// ownsResolvConf reports whether data is a resolv.conf towerd wrote.
func ownsResolvConf(data []byte) bool {
	return bytes.HasPrefix(data, []byte(resolvConfMarker))
}

// renderResolvConf is the resolv.conf that sends every lookup to towerd,
// keeping the search list and options of the one it replaces.
func renderResolvConf(search, options []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (`towerd install`): lookups go to towerd on %s:53.\n", resolvConfMarker, towerdListenAddress)
	fmt.Fprintf(&b, "# `towerd uninstall` puts back the previous file, kept as %s,\n", ResolvConfBackup)
	b.WriteString("# as long as this one is unchanged.\n")
	fmt.Fprintf(&b, "nameserver %s\n", towerdListenAddress)
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return []byte(b.String())
}

// previousResolvConf returns the resolv.conf install replaces (or replaced:
// once the live file is towerd's, the backup is the previous one), read
// through symlinks inside the root, and the path it came from.
func previousResolvConf(fsys fileSystem) (resolvconf.Conf, string, error) {
	name := ResolvConfPath
	if data, err := fsys.ReadFile(name); err == nil && ownsResolvConf(data) {
		name = ResolvConfBackup
	}
	data, err := fsys.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		// No resolv.conf at all (or a dangling stub link): glibc then asks
		// the local host; there is nothing to keep.
		return resolvconf.Conf{}, name, nil
	}
	if err != nil {
		return resolvconf.Conf{}, name, fmt.Errorf("reading %s: %w", name, err)
	}
	rc, err := resolvconf.Parse(bytes.NewReader(data))
	// Named as the file it was, wherever it is kept now: a second install
	// (or one finishing a killed one) renders the same config as the first.
	return rc, ResolvConfPath, err
}

// discovered are the upstreams install found for zone ".".
type discovered struct {
	servers []string // host:port
	source  string   // the file they came from
	skipped []string // left out, each with why
}

// discoverUpstreams finds the servers towerd should forward "." to: those
// systemd-resolved forwards to (its list in /run/systemd/resolve/resolv.conf)
// when it runs, else those of the resolv.conf being replaced. Loopback
// servers on port 53 are left out: 127.0.0.53 is resolved's stub, which this
// install turns off, and 127.0.0.1 is towerd itself; forwarding to either
// would loop or fail.
func discoverUpstreams(fsys fileSystem) (discovered, error) {
	var rc resolvconf.Conf
	var source string
	data, err := fsys.ReadFile(ResolvedUpstreams)
	switch {
	case err == nil:
		source = ResolvedUpstreams
		rc, err = resolvconf.Parse(bytes.NewReader(data))
	case errors.Is(err, fs.ErrNotExist):
		rc, source, err = previousResolvConf(fsys)
	}
	if err != nil {
		return discovered{}, fmt.Errorf("reading upstreams: %w", err)
	}
	d := discovered{source: source}
	for _, s := range rc.Nameservers {
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
