package install

// ISC dhclient: whether it keeps resolv.conf current, and the enter hook
// that hands each lease's servers to towerd instead.

import (
	"fmt"
	"path"
	"strings"
)

// dhclientPresent tells whether ISC dhclient with its dhclient-script is
// installed and in use: a lease file, a running dhclient, or an ifupdown
// interface configured "inet dhcp". Installed but unused (a networkd node
// with isc-dhcp-client still around), its hook would be harmless, but the
// file towerd followed would never be written again.
func dhclientPresent(files nodeFiles) bool {
	if !nodeHas(files, DhclientConf) ||
		!(nodeHas(files, "/sbin/dhclient-script") || nodeHas(files, "/usr/sbin/dhclient-script")) {
		return false
	}
	for _, dir := range []string{"/var/lib/dhcp", "/var/lib/dhclient", "/run"} {
		entries, _ := files.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "dhclient") &&
				(strings.HasSuffix(e.Name(), ".leases") || strings.HasSuffix(e.Name(), ".pid")) {
				return true
			}
		}
	}
	ifaces := []string{"/etc/network/interfaces"}
	entries, _ := files.ReadDir("/etc/network/interfaces.d")
	for _, e := range entries {
		ifaces = append(ifaces, path.Join("/etc/network/interfaces.d", e.Name()))
	}
	for _, name := range ifaces {
		data, err := files.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == "iface" && f[3] == "dhcp" {
				return true
			}
		}
	}
	return false
}

// planDhclient installs an enter hook that redefines make_resolv_conf,
// the shell function Debian's dhclient-script calls to write
// /etc/resolv.conf. The hook writes the lease's servers and search list to
// a file of towerd's own instead, which towerd follows: DHCP changes still
// reach towerd and /etc/resolv.conf keeps "nameserver 127.0.0.1".
// "supersede domain-name-servers 127.0.0.1;" in dhclient.conf would keep
// resolv.conf right too, but dhclient would then throw the DHCP servers
// away and towerd would never learn them. The resolvconf package ships a
// hook of this same shape; "towerd" sorts after "resolvconf", so ours
// wins if both exist.
//
// The file under /run is also seeded with the current resolv.conf, which
// the last lease wrote, so towerd has servers before the next renewal.
func planDhclient(files nodeFiles, replaced string) ManagerPlan {
	plan := ManagerPlan{
		Manager: ManagerDhclient,
		Follow:  DhclientResolvConf,
		Reason: "dhclient maintains resolv.conf; zone \".\" follows " + DhclientResolvConf +
			", which towerd's dhclient hook writes at every lease instead of " + ResolvConfPath,
		Files: []PlannedFile{{
			Path: DhclientHook, Data: []byte(dhclientHookScript(DhclientResolvDir)), Mode: 0o644,
			Reason: DhclientHook + ": dhclient writes each lease's DNS servers to " + DhclientResolvConf + " for towerd, not to " + ResolvConfPath,
		}},
	}
	if data, err := files.ReadFile(replaced); err == nil && !ownsResolvConf(data) {
		plan.Files = append(plan.Files, PlannedFile{
			Path: DhclientResolvConf, Data: data, Mode: 0o644, Seed: true,
			Reason: DhclientResolvConf + ": seeded with the servers of the last lease, until the next one",
		})
	}
	if data, err := files.ReadFile(DhclientConf); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			l := strings.TrimSpace(line)
			if !strings.HasPrefix(l, "#") && strings.Contains(l, "domain-name-servers") &&
				(strings.HasPrefix(l, "prepend") || strings.HasPrefix(l, "supersede")) {
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("%s: %q adds servers to every lease; towerd skips itself (127.0.0.1) among them, but a dnsmasq recipe's line can go once dnsmasq is stopped", DhclientConf, l))
			}
		}
	}
	if !nodeHas(files, DhclientEnterHooks) {
		plan.Warnings = append(plan.Warnings, DhclientEnterHooks+" does not exist: this dhclient-script may not read it (not Debian's); check that "+ResolvConfPath+" survives the next lease")
	}
	return plan
}

// pinned is the plan for a node whose zone "." does not follow the file
// the manager maintains (--upstream, or an import that names its
// servers): the manager must still leave /etc/resolv.conf alone, but
// nothing needs to hand towerd the servers it learns. Only dhclient's
// plan writes such a file: its hook then keeps resolv.conf and writes
// nothing else, and no file is seeded.
func (plan ManagerPlan) pinned() ManagerPlan {
	if plan.Manager != ManagerDhclient {
		return plan
	}
	plan.Follow = ""
	plan.Reason = "dhclient maintains resolv.conf; zone \".\" has servers of its own, so towerd's dhclient hook only keeps " +
		ResolvConfPath + " from being rewritten at every lease"
	plan.Files = []PlannedFile{{
		Path: DhclientHook, Data: []byte(dhclientKeepScript), Mode: 0o644,
		Reason: DhclientHook + ": dhclient leaves " + ResolvConfPath + " alone (zone \".\" is pinned: the lease's servers are not followed)",
	}}
	return plan
}

// dhclientKeepScript is the hook of a pinned zone ".": make_resolv_conf,
// which Debian's dhclient-script calls at every lease to write
// /etc/resolv.conf, does nothing.
const dhclientKeepScript = `# towerd: keep /etc/resolv.conf pointed at towerd (127.0.0.1). Zone "." has
# servers of its own in towerd.toml, so the lease's are not needed.
# Written by ` + "`towerd install`" + `; ` + "`towerd uninstall`" + ` removes it. Sourced by
# dhclient-script, which calls make_resolv_conf at every new lease.
make_resolv_conf() {
	:
}
`

// dhclientHookScript is sourced by dhclient-script (as root, with the
// lease in new_* variables). It writes the file atomically, so towerd's
// watcher never reads it half-written, and adds the interface to an IPv6
// link-local server as Debian's own make_resolv_conf does.
func dhclientHookScript(dir string) string {
	return `# towerd: keep /etc/resolv.conf pointed at towerd (127.0.0.1) and hand the
# DNS servers of each lease to towerd through ` + dir + `/resolv.conf.
# Written by ` + "`towerd install`" + `; ` + "`towerd uninstall`" + ` removes it. Sourced by
# dhclient-script, which calls make_resolv_conf at every new lease.
make_resolv_conf() {
	towerd_dir=` + dir + `
	mkdir -p "$towerd_dir" && chmod 755 "$towerd_dir" || return
	towerd_new="$towerd_dir/resolv.conf.new"
	{
		echo "# Written by towerd's dhclient hook: $reason on $interface"
		if [ -n "$new_domain_search" ]; then
			echo "search $new_domain_search"
		elif [ -n "$new_domain_name" ]; then
			echo "search $new_domain_name"
		elif [ -n "$new_dhcp6_domain_search" ]; then
			echo "search $new_dhcp6_domain_search"
		fi
		for towerd_ns in $new_domain_name_servers; do
			echo "nameserver $towerd_ns"
		done
		for towerd_ns in $new_dhcp6_name_servers; do
			case "$towerd_ns" in
			fe80:* | FE80:*) echo "nameserver $towerd_ns%$interface" ;;
			*) echo "nameserver $towerd_ns" ;;
			esac
		done
	} >"$towerd_new" && chmod 644 "$towerd_new" && mv -f "$towerd_new" "$towerd_dir/resolv.conf"
}
`
}
