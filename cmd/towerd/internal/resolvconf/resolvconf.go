// Package resolvconf reads resolv.conf(5) and knows where a node keeps the
// servers it learns: zone "."'s system files (SystemPaths, InstallFollowed),
// what towerd install leaves in resolv.conf (ManagedMarker, BackupPath), and
// a Watcher that follows one such file as DHCP clients rewrite it. Its users
// are towerd's config, daemon and install. A nameserver is compared by the
// rule every upstream address follows, upstream.NormalizeAddress. It lives
// beside those users: nothing under resolver/ or upstream/ reads a node's
// files, they are given servers.
package resolvconf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/towerd/towerd/resolver/boundedfile"
	"github.com/towerd/towerd/upstream"
)

// Conf is the part of resolv.conf(5) that towerd uses.
type Conf struct {
	// Nameservers are host:port with port 53, in file order. Entries that
	// are not IP addresses are skipped, as glibc skips them. All entries are
	// kept, not only glibc's first three: towerd's MaxAttempts already
	// bounds how many are tried per query.
	Nameservers []string
	// Search is the search list; the last search or domain line wins.
	Search []string
	// Options are the words of every options line, in order.
	Options []string
}

// DefaultNdots is resolv.conf(5)'s ndots when no options line sets it.
const DefaultNdots = 1

// maxNdots is glibc's ceiling on ndots (RES_MAXNDOTS).
const maxNdots = 15

// Ndots is the ndots that options (the words of resolv.conf's options
// lines) set: the last ndots:n, clamped to 0..15 as glibc clamps it,
// DefaultNdots when none does.
func Ndots(options []string) int {
	n := DefaultNdots
	for _, w := range options {
		if v, ok := strings.CutPrefix(w, "ndots:"); ok {
			if i, err := strconv.Atoi(v); err == nil {
				n = min(max(i, 0), maxNdots)
			}
		}
	}
	return n
}

// nameserverPort is where every resolv.conf(5) nameserver listens: the
// file has no syntax for another port.
const nameserverPort = "53"

// Paths relative to a root, so tests and chroot installs can point
// elsewhere. systemd-resolved writes its real upstreams to resolvedPath while
// /etc/resolv.conf points at its own stub (127.0.0.53), which towerd must not
// forward to: resolved may in turn forward to towerd.
const (
	resolvedPath   = "run/systemd/resolve/resolv.conf"
	resolvConfPath = "etc/resolv.conf"
)

// MaxFileSize is the most bytes a resolv.conf towerd reads may have (issue
// 21: a 100 MB one kept 311 MB, /dev/zero took 1.63 GB in 4 s). glibc uses
// three nameservers; the files resolved, DHCP clients and NetworkManager
// write are under a KiB even with their comments. 64 KiB holds any file
// an operator would write, with room to spare.
const MaxFileSize = 64 << 10

// FileRule is how every resolv.conf is read: a regular file of at most
// MaxFileSize, opened without blocking. Symlinks are followed:
// /etc/resolv.conf usually is one (into /run/systemd/resolve or
// /run/resolvconf), and the file at its end must pass the rule.
var FileRule = boundedfile.Rule{MaxSize: MaxFileSize}

// ReadFile reads the resolv.conf at path under FileRule. A file that is
// not regular or too large is a *boundedfile.RefusedError.
func ReadFile(path string) ([]byte, error) { return boundedfile.ReadFile(path, FileRule) }

// Parse reads resolv.conf(5) syntax: nameserver, search, domain and
// options lines; "#" and ";" start comments; unknown keywords are ignored. It
// fails only when r does. An empty Nameservers is returned as is: glibc would
// then fall back to the local host, which for towerd is itself.
func Parse(r io.Reader) (Conf, error) {
	var conf Conf
	scanner := bufio.NewScanner(r)
	for scanner.Scan() {
		line := scanner.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			// The IP may carry a zone ("fe80::1%eth0"); a port is not part
			// of the syntax, so "1.2.3.4:53" is as invalid here as for glibc.
			ip, err := netip.ParseAddr(fields[1])
			if err != nil {
				continue
			}
			conf.Nameservers = append(conf.Nameservers, net.JoinHostPort(ip.String(), nameserverPort))
		case "search":
			conf.Search = append([]string(nil), fields[1:]...)
		case "domain":
			conf.Search = []string{fields[1]}
		case "options":
			conf.Options = append(conf.Options, fields[1:]...)
		}
	}
	if err := scanner.Err(); err != nil {
		return Conf{}, fmt.Errorf("reading resolv.conf: %w", err)
	}
	return conf, nil
}

// SystemPaths are the files ReadSystem chooses from, in its order of
// preference, under root ("" or "/" is the real root). The daemon follows
// both when resolv_conf is unset, so that resolved's file appearing after
// towerd started is taken as ReadSystem would take it.
func SystemPaths(root string) []string {
	if root == "" {
		root = "/"
	}
	return []string{filepath.Join(root, resolvedPath), filepath.Join(root, resolvConfPath)}
}

// ReadSystem reads <root>/run/systemd/resolve/resolv.conf when it
// exists (systemd-resolved's list of real upstreams) and <root>/etc/resolv.conf
// otherwise, and returns the path it read. root "" or "/" is the real root.
func ReadSystem(root string) (Conf, string, error) {
	if root == "" {
		root = "/"
	}
	path := filepath.Join(root, resolvedPath)
	data, err := ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		path = filepath.Join(root, resolvConfPath)
		data, err = ReadFile(path)
	}
	if err != nil {
		return Conf{}, path, err // names the path
	}
	conf, err := Parse(bytes.NewReader(data))
	if err != nil {
		return Conf{}, path, fmt.Errorf("parsing %s: %w", path, err)
	}
	return conf, path, nil
}

// Read reads and parses the resolv.conf at path under FileRule: the
// node's search list (issue 28) lives in no other file.
func Read(path string) (Conf, error) {
	data, err := ReadFile(path)
	if err != nil {
		return Conf{}, err // names the path
	}
	conf, err := Parse(bytes.NewReader(data))
	if err != nil {
		return Conf{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	return conf, nil
}

// WithoutAddresses returns servers minus those towerd itself listens on, so
// towerd never forwards to itself (a loop that would only end when every
// in-flight slot is taken). Both lists hold host:port. A listen on 0.0.0.0:P
// or [::]:P excludes every loopback and unspecified address on port P; a
// server at 0.0.0.0 or :: counts as loopback, because that is where the
// kernel delivers it. Other addresses of this host are not detected.
// Entries that do not parse are compared as plain strings.
func WithoutAddresses(servers []string, listen []string) []string {
	var out []string
	for _, srv := range servers {
		if !listensOn(listen, srv) {
			out = append(out, srv)
		}
	}
	return out
}

// listensOn reports whether a query to srv would reach one of listen.
func listensOn(listen []string, srv string) bool {
	srvAddr, srvOK := parseAddrPort(srv)
	if srvOK && srvAddr.Addr().IsUnspecified() {
		srvAddr = netip.AddrPortFrom(loopbackOf(srvAddr.Addr()), srvAddr.Port())
	}
	for _, l := range listen {
		lAddr, lOK := parseAddrPort(l)
		switch {
		case !srvOK || !lOK:
			if srv == l {
				return true
			}
		case lAddr.Port() != srvAddr.Port():
		case lAddr.Addr().IsUnspecified():
			if srvAddr.Addr().IsLoopback() {
				return true
			}
		case lAddr.Addr() == srvAddr.Addr():
			return true
		}
	}
	return false
}

// parseAddrPort accepts what upstream.NormalizeAddress accepts and unmaps
// IPv4-mapped IPv6, so ::ffff:127.0.0.1 and 127.0.0.1 compare equal.
func parseAddrPort(s string) (netip.AddrPort, bool) {
	normalized, err := upstream.NormalizeAddress(s)
	if err != nil {
		return netip.AddrPort{}, false
	}
	host, port, err := net.SplitHostPort(normalized)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, false
	}
	portNum, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(portNum)), true
}

// loopbackOf maps an unspecified address to the loopback address of its
// family: Linux delivers packets sent to 0.0.0.0 or :: to the local host.
func loopbackOf(ip netip.Addr) netip.Addr {
	if ip.Is4() {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.IPv6Loopback()
}
