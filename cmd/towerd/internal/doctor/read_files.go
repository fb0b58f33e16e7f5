package doctor

import (
	"bufio"
	"bytes"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/install"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
)

// The node's files are read through nodefs.Root, as install reads them:
// symlinks resolved inside the root, only regular files, opened without
// blocking, each at most maxNodeFile bytes (maxConfigFile for towerd's
// own configuration).
// Install's detectors (resolv.conf's manager, Docker, dnsmasq) read
// through the same value, so doctor sees the node as install does.

// maxNodeFile bounds every other file doctor reads under the root: the
// files of a node's resolver plumbing are a few KiB; the bound leaves room
// for a large /etc/hosts or /proc/net/tcp.
const maxNodeFile = 4 << 20

// openRoot opens dir for doctor's reads, with doctor's bound.
func openRoot(dir string) (*nodefs.Root, error) {
	nr, err := nodefs.Open(dir)
	if err != nil {
		return nil, err
	}
	nr.SetReadLimit(maxNodeFile)
	return nr, nil
}

// maxConfigFile bounds towerd.toml and each drop-in: a config is a few KiB.
const maxConfigFile = 1 << 20

// maxDirEntries bounds how many entries of one directory doctor looks at.
const maxDirEntries = 4096

func readNodeFile(nr *nodefs.Root, name string) nodeFile {
	data, err := nr.ReadFile(name)
	return nodeFile{Path: name, Data: data, Err: err}
}

// exists tells whether name is there (a dangling symlink counts).
func exists(nr *nodefs.Root, name string) bool {
	_, err := nr.Lstat(name)
	return err == nil
}

// readDir lists name's entries, sorted, at most maxDirEntries.
func readDir(nr *nodefs.Root, name string) []fs.DirEntry {
	entries, err := nr.ReadDir(name)
	if err != nil {
		return nil
	}
	return entries[:min(len(entries), maxDirEntries)]
}

// readResolverFiles reads what glibc reads: resolv.conf, nsswitch.conf
// and hosts.
func readResolverFiles(nr *nodefs.Root, n *Node) {
	n.ResolvConf = readNodeFile(nr, install.ResolvConfPath)
	if fi, err := nr.Lstat(install.ResolvConfPath); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		n.ResolvConfLink, _ = nr.Readlink(install.ResolvConfPath)
	}
	n.Nsswitch = readNodeFile(nr, install.NsswitchPath)
	n.Hosts = readNodeFile(nr, "/etc/hosts")
}

// readPlumbing runs install's detectors and reads systemd-resolved's
// configuration.
func readPlumbing(nr *nodefs.Root, n *Node) {
	if plan, err := install.DetectResolvConfManager(nr); err == nil {
		n.Manager = &plan
		for _, f := range plan.Files {
			if !f.Seed && !exists(nr, f.Path) {
				n.ManagerMissing = append(n.ManagerMissing, f.Path)
			}
		}
	} else {
		n.Skipped = append(n.Skipped, Skip{areaPlumbing, "resolv.conf's manager: " + err.Error()})
	}
	// apply: the plan of --docker tells whether "dns" names the bridge
	// already (DaemonJSONChanged); nothing is written.
	if plan, err := install.PlanDocker(nr, true); err == nil {
		n.Docker = &plan
	} else {
		n.Skipped = append(n.Skipped, Skip{areaPlumbing, "Docker: " + err.Error()})
	}
	n.Dnsmasq = install.DetectDnsmasq(nr)
	n.DnsmasqRunning = exists(nr, "/run/dnsmasq/dnsmasq.pid")
	n.Resolved = readResolved(nr)
}

// resolvedPaths show that systemd-resolved is installed or running.
var resolvedPaths = []string{"/run/systemd/resolve", "/etc/systemd/resolved.conf",
	"/usr/lib/systemd/system/systemd-resolved.service", "/lib/systemd/system/systemd-resolved.service"}

// resolvedRunning show that it runs, or starts at boot.
var resolvedRunning = []string{"/run/systemd/resolve", "/etc/systemd/system/sysinit.target.wants/systemd-resolved.service",
	"/etc/systemd/system/multi-user.target.wants/systemd-resolved.service"}

// readResolved merges resolved.conf(5): the main file, then the drop-ins
// of /usr/lib, /run and /etc (a name in a later directory shadows the same
// name in an earlier one), all drop-ins in name order, later keys winning.
// An empty DNS= resets the list.
func readResolved(nr *nodefs.Root) resolvedView {
	v := resolvedView{SetBy: map[string]string{}}
	for _, p := range resolvedPaths {
		v.Present = v.Present || exists(nr, p)
	}
	for _, p := range resolvedRunning {
		v.Running = v.Running || exists(nr, p)
	}
	if !v.Present {
		return v
	}
	byName := map[string]string{}
	for _, dir := range []string{"/usr/lib/systemd/resolved.conf.d", "/run/systemd/resolved.conf.d", "/etc/systemd/resolved.conf.d"} {
		for _, e := range readDir(nr, dir) {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
				byName[e.Name()] = path.Join(dir, e.Name())
			}
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	files := []string{"/etc/systemd/resolved.conf"}
	for _, name := range names {
		files = append(files, byName[name])
	}
	for _, p := range files {
		data, err := nr.ReadFile(p)
		if err != nil {
			continue
		}
		for _, kv := range iniValues(data, "Resolve") {
			switch kv[0] {
			case "DNS":
				if kv[1] == "" {
					v.DNS = nil
				} else {
					v.DNS = append(v.DNS, strings.Fields(kv[1])...)
				}
			case "DNSStubListener":
				v.StubListener = kv[1]
			default:
				continue
			}
			v.SetBy[kv[0]] = p
		}
	}
	return v
}

// iniValues are the key=value lines of one [section] of a systemd-style
// file, in order, repeated keys kept.
func iniValues(data []byte, section string) [][2]string {
	var out [][2]string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			in = line[1:len(line)-1] == section
		case in:
			if k, v, ok := strings.Cut(line, "="); ok {
				out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		}
	}
	return out
}
