package install

import (
	"bufio"
	"bytes"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/resolvconf"
)

// ResolvConfManager names what keeps /etc/resolv.conf up to date on a node.
type ResolvConfManager string

// The managers install knows. Anything else is static: a file no program
// rewrites.
const (
	ManagerResolved       ResolvConfManager = "systemd-resolved"
	ManagerNetworkManager ResolvConfManager = "NetworkManager"
	ManagerResolvconf     ResolvConfManager = "resolvconf"
	ManagerDhclient       ResolvConfManager = "dhclient"
	ManagerStatic         ResolvConfManager = "static"
)

// Files the managers write and the drop-ins and hooks install adds.
const (
	NMConfPath          = "/etc/NetworkManager/NetworkManager.conf"
	NMDropIn            = "/etc/NetworkManager/conf.d/99-towerd.conf"
	NMNoStubResolvConf  = resolvconf.NetworkManagerPath
	NMResolvConf        = "/run/NetworkManager/resolv.conf"
	ResolvconfResolv    = resolvconf.ResolvconfPath
	DhclientConf        = "/etc/dhcp/dhclient.conf"
	DhclientEnterHooks  = "/etc/dhcp/dhclient-enter-hooks.d"
	DhclientHook        = DhclientEnterHooks + "/towerd"
	DhclientResolvDir   = resolvconf.DhclientDir
	DhclientResolvConf  = resolvconf.DhclientPath
	resolvedDir         = "/run/systemd/resolve"
	resolvedStubAddress = "127.0.0.53"
)

// PlannedFile is a file install writes for a manager. Install creates it
// (it never exists before: the names are towerd's own) and uninstall
// removes it while it is still byte for byte Data.
type PlannedFile struct {
	Path string
	Data []byte
	Mode fs.FileMode
	// Reason is the report line.
	Reason string
	// Seed marks a starting copy of a file another program keeps current
	// (the dhclient hook's): install writes it only where none exists yet,
	// and leaves one that is there alone, since it may be newer.
	Seed bool
}

// ManagerPlan is what install does about the program that maintains
// resolv.conf on the node.
type ManagerPlan struct {
	Manager ResolvConfManager
	// Follow is the file zone "." follows (towerd.toml's resolv_conf): one
	// the manager keeps rewriting with the servers DHCP hands out. Empty for
	// a static node, whose servers install copies into towerd.toml.
	Follow string
	// Files are the supported drop-ins and hooks that stop the manager from
	// taking /etc/resolv.conf back from towerd, in the order to write them.
	Files []PlannedFile
	// Reason is the report line saying what was found and why Follow.
	Reason string
	// Warnings are report lines about what install cannot settle alone.
	Warnings []string
}

// DetectResolvConfManager finds what maintains /etc/resolv.conf under
// files' root and plans how towerd keeps its "nameserver 127.0.0.1" there
// while still learning the servers DHCP hands out. It writes nothing.
//
// The order matters: NetworkManager first, since it may also run
// resolved; then resolved (resolv.conf links to its stub, or names it); then
// the resolvconf package; then dhclient; else the file is static.
func DetectResolvConfManager(files nodeFiles) (ManagerPlan, error) {
	nm, err := readNMConfig(files)
	if err != nil {
		return ManagerPlan{}, err
	}
	replaced := replacedResolvConf(files)
	link := linkTarget(files, replaced)
	switch {
	case nm.present && nm.rcManager == "resolvconf" && resolvconfPresent(files):
		// NetworkManager hands its servers to resolvconf: follow resolvconf.
		return planResolvconf(files, "NetworkManager feeds resolvconf (rc-manager=resolvconf); "), nil
	case nm.present && nm.dns != "none":
		return planNetworkManager(files, nm), nil
	case link != "" && path.Dir(link) == resolvedDir,
		nodeHas(files, ResolvedUpstreams) && resolvConfNames(files, replaced, resolvedStubAddress):
		return ManagerPlan{
			Manager: ManagerResolved,
			Follow:  ResolvedUpstreams,
			Reason: "systemd-resolved maintains resolv.conf; zone \".\" follows " + ResolvedUpstreams +
				", where resolved keeps writing the servers it learns (its stub is turned off, resolved keeps running)",
		}, nil
	case link == ResolvconfResolv || link == "/etc/resolvconf/run/resolv.conf" ||
		(link == "" && resolvconfPresent(files) && nodeHas(files, ResolvconfResolv)):
		return planResolvconf(files, ""), nil
	case dhclientPresent(files):
		return planDhclient(files, replaced), nil
	}
	return ManagerPlan{
		Manager: ManagerStatic,
		Reason:  ResolvConfPath + " is a plain file no DHCP client or network manager rewrites; its servers are copied into towerd.toml",
	}, nil
}

// replacedResolvConf is the resolv.conf that tells what the node had
// before towerd: /etc/resolv.conf, or, once that is towerd's own file, the
// backup install kept of it (a symlink stays a symlink there, and its
// relative target still resolves from /etc). Detection then finds the same
// on a second install as on the first.
func replacedResolvConf(files nodeFiles) string {
	if linkTarget(files, ResolvConfPath) != "" {
		return ResolvConfPath
	}
	data, err := files.ReadFile(ResolvConfPath)
	if err == nil && ownsResolvConf(data) && nodeHas(files, ResolvConfBackup) {
		return ResolvConfBackup
	}
	return ResolvConfPath
}

// resolvConfNames tells whether the resolv.conf at name has a nameserver
// line for addr.
func resolvConfNames(files nodeFiles, name, addr string) bool {
	data, err := files.ReadFile(name)
	if err != nil {
		return false
	}
	for _, f := range resolvConfLines(data, "nameserver") {
		if f == addr {
			return true
		}
	}
	return false
}

// resolvConfLines returns the first argument of every line whose keyword
// is key.
func resolvConfLines(data []byte, key string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == key {
			out = append(out, f[1])
		}
	}
	return out
}

// nmConfig is the part of NetworkManager's merged configuration install
// cares about.
type nmConfig struct {
	// present: NetworkManager runs now (/run/NetworkManager) or is enabled
	// at boot. Merely installed, it maintains nothing.
	present         bool
	dns, rcManager  string
	setBy           map[string]string // key → file that set it last
	overridesDropIn []string          // files read after towerd's drop-in that set dns or rc-manager
}

// readNMConfig merges NetworkManager's configuration the way
// NetworkManager.conf(5) orders it: /usr/lib/NetworkManager/conf.d, then
// /run/NetworkManager/conf.d (both shadowed by a file of the same name in
// /etc/NetworkManager/conf.d), then NetworkManager.conf, then
// /etc/NetworkManager/conf.d; each directory in name order, later keys
// winning.
func readNMConfig(files nodeFiles) (nmConfig, error) {
	c := nmConfig{setBy: map[string]string{}}
	for _, p := range []string{"/run/NetworkManager",
		"/etc/systemd/system/multi-user.target.wants/NetworkManager.service"} {
		if nodeHas(files, p) {
			c.present = true
		}
	}
	if !c.present {
		return c, nil
	}
	etc := confDNames(files, "/etc/NetworkManager/conf.d")
	var order []string
	for _, dir := range []string{"/usr/lib/NetworkManager/conf.d", "/run/NetworkManager/conf.d"} {
		for _, name := range confDNames(files, dir) {
			if !slices.Contains(etc, name) {
				order = append(order, path.Join(dir, name))
			}
		}
	}
	order = append(order, NMConfPath)
	for _, name := range etc {
		order = append(order, path.Join("/etc/NetworkManager/conf.d", name))
	}
	for _, p := range order {
		if p == NMDropIn {
			continue // towerd's own, from an earlier install
		}
		data, err := files.ReadFile(p)
		if err != nil {
			continue
		}
		for key, value := range nmMainKeys(data) {
			switch key {
			case "dns":
				c.dns = value
			case "rc-manager":
				c.rcManager = value
			default:
				continue
			}
			c.setBy[key] = p
			if path.Dir(p) == path.Dir(NMDropIn) && path.Base(p) > path.Base(NMDropIn) {
				c.overridesDropIn = append(c.overridesDropIn, p)
			}
		}
	}
	return c, nil
}

// confDNames lists the *.conf files of a conf.d directory by name.
func confDNames(files nodeFiles, dir string) []string {
	entries, err := files.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
			names = append(names, e.Name())
		}
	}
	return names
}

// nmMainKeys returns the keys of the [main] section of a keyfile.
func nmMainKeys(data []byte) map[string]string {
	keys := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "main" {
			keys[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return keys
}

// planNetworkManager keeps NetworkManager computing DNS but stops it from
// writing /etc/resolv.conf. NetworkManager.conf(5): with
// rc-manager=unmanaged it does not touch /etc/resolv.conf; and
// nm-dns-manager.c's update_dns writes no-stub-resolv.conf (the servers of
// the active connections, never a local stub: what towerd forwards to)
// before it even looks at rc-manager. dns=none is not used: NetworkManager
// would stop handling DNS, and a node set up that way has another manager
// (the caller goes on to the next). When rc-manager is already unmanaged,
// there is nothing to write.
func planNetworkManager(files nodeFiles, nm nmConfig) ManagerPlan {
	follow := NMNoStubResolvConf
	if !nodeHas(files, NMNoStubResolvConf) && nodeHas(files, NMResolvConf) && nm.dns != "systemd-resolved" && nm.dns != "dnsmasq" {
		// Releases before no-stub-resolv.conf existed: in dns=default
		// mode resolv.conf holds the servers themselves.
		follow = NMResolvConf
	}
	var b strings.Builder
	b.WriteString("# Written by `towerd install`: NetworkManager keeps learning DNS servers\n")
	b.WriteString("# and writing them to " + follow + ", which towerd\n")
	b.WriteString("# follows, but leaves /etc/resolv.conf (nameserver 127.0.0.1) alone.\n")
	b.WriteString("# `towerd uninstall` removes this file.\n")
	b.WriteString("[main]\nrc-manager=unmanaged\n")
	reason := NMDropIn + ": rc-manager=unmanaged, so NetworkManager stops rewriting " + ResolvConfPath
	if nm.dns == "dnsmasq" {
		b.WriteString("# NetworkManager's own dnsmasq would hold 127.0.0.1:53, towerd's address.\ndns=default\n")
		reason += "; dns=default instead of dns=dnsmasq (set in " + nm.setBy["dns"] + "), whose dnsmasq would take towerd's port 53"
	}
	plan := ManagerPlan{
		Manager: ManagerNetworkManager,
		Follow:  follow,
		Reason: "NetworkManager maintains resolv.conf; zone \".\" follows " + follow +
			", where NetworkManager keeps writing the servers of the active connections",
	}
	if nm.rcManager == "unmanaged" && nm.dns != "dnsmasq" {
		plan.Reason += " (rc-manager=unmanaged already, set in " + nm.setBy["rc-manager"] + ")"
		return plan
	}
	plan.Files = []PlannedFile{{Path: NMDropIn, Data: []byte(b.String()), Mode: 0o644, Reason: reason}}
	for _, p := range nm.overridesDropIn {
		plan.Warnings = append(plan.Warnings, p+" is read after "+NMDropIn+" and sets dns or rc-manager: check it leaves "+ResolvConfPath+" alone")
	}
	return plan
}

// resolvconfPresent tells whether Debian's resolvconf package is installed.
func resolvconfPresent(files nodeFiles) bool {
	return nodeHas(files, "/etc/resolvconf/resolv.conf.d") &&
		(nodeHas(files, "/sbin/resolvconf") || nodeHas(files, "/usr/sbin/resolvconf"))
}

// planResolvconf follows the file resolvconf assembles. Nothing needs to
// be written: resolvconf only ever writes /run/resolvconf/resolv.conf, and
// /etc/resolv.conf reaches it only through the symlink that install
// replaces with towerd's file. Putting "nameserver 127.0.0.1" in
// resolv.conf.d/head instead would write towerd into the very file it
// follows for its upstreams.
func planResolvconf(files nodeFiles, prefix string) ManagerPlan {
	plan := ManagerPlan{
		Manager: ManagerResolvconf,
		Follow:  ResolvconfResolv,
		Reason: prefix + "resolvconf maintains resolv.conf through a symlink; zone \".\" follows " + ResolvconfResolv +
			" and the symlink is replaced, so resolvconf no longer reaches " + ResolvConfPath,
	}
	if nodeHas(files, "/etc/resolvconf/update.d/dnsmasq") {
		plan.Warnings = append(plan.Warnings, "dnsmasq registers 127.0.0.1 with resolvconf while it runs, and resolvconf drops every server after a loopback one: stop dnsmasq so "+ResolvconfResolv+" lists the real servers again")
	}
	return plan
}
