package doctor

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver/consul"
)

// checkTowerd looks at towerd itself: installed, its config, running,
// its zones, serve-stale, the state directory, the socket unit.
func checkTowerd(n *Node) []Finding {
	t := n.Towerd
	if !t.Installed {
		return []Finding{newFinding("towerd-not-installed", Problem, "no towerd program, unit or %s on this node", t.ConfigPath)}
	}
	var out []Finding
	out = append(out, checkRunning(n)...)
	if t.ConfigErr != nil {
		// What the config would set is unknown: the checks of its keys
		// would judge the defaults instead.
		out = append(out, newFinding("towerd-config-invalid", Problem, "%v", t.ConfigErr))
		return append(out, checkSocket(n)...)
	}
	if f, ok := checkRootZone(t.RootZone, t.Config.Listen); ok {
		out = append(out, f)
	}
	if f, ok := checkConsulLocal(t.Config); ok {
		out = append(out, f)
	}
	if !t.Config.ServeStale.Enabled {
		out = append(out, newFinding("towerd-serve-stale-off", Problem, "serve_stale.enabled = false"))
	}
	if f, ok := checkStateDir(t); ok {
		out = append(out, f)
	}
	return append(out, checkSocket(n)...)
}

func checkSocket(n *Node) []Finding {
	if n.Towerd.SocketEnabled {
		return nil
	}
	sev, saw := Warning, "no "+socketWants
	if n.ResolvConf.ok() && n.resolverPath().viaTowerd {
		sev, saw = Problem, "no "+socketWants+", and resolv.conf sends every lookup to towerd"
	}
	return []Finding{newFinding("towerd-socket-not-enabled", sev, "%s", saw)}
}

// checkRunning reads the running towerd's /stats: answering, ready, and
// each zone's servers.
func checkRunning(n *Node) []Finding {
	r := n.Running
	if r == nil {
		return nil
	}
	if r.Err != nil {
		return []Finding{newFinding("towerd-not-running", Problem, "its admin server at %s: %s", r.Addr, oneLineErr(r.Err))}
	}
	var out []Finding
	if !r.Report.Ready {
		out = append(out, newFinding("towerd-not-running", Problem, "towerd %s at %s runs but says it is not ready", r.Report.Version, r.Addr))
	}
	f := newFinding("towerd-zone-unreachable", Warning, "towerd's view of its upstream servers (/stats)")
	for _, z := range r.Report.Zones {
		switch {
		case z.Servers > 0 && z.ServersUp == 0:
			f.Severity = Problem
			f = f.with("zone "+z.Name, "all %d server(s) down", z.Servers)
		case z.ServersUp < z.Servers:
			f = f.with("zone "+z.Name, "%d of %d server(s) down", z.Servers-z.ServersUp, z.Servers)
		}
	}
	for _, s := range r.Report.Upstreams {
		if !s.Up {
			f = f.with(s.Server, "down (zone %s, %d timeouts)", s.Zone, s.Timeouts)
		}
	}
	if len(f.Items) > 0 {
		out = append(out, f)
	}
	return out
}

func checkRootZone(z rootZone, listen []string) (Finding, bool) {
	switch {
	case z.Configured && len(z.Servers) == 0:
		return newFinding("towerd-root-zone-empty", Problem, "zone \".\"'s servers are towerd's own listen addresses (%s)", strings.Join(listen, ", ")), true
	case z.Configured:
		return Finding{}, false
	case errors.Is(z.Err, fs.ErrNotExist):
		return newFinding("towerd-root-zone-empty", Problem, "zone \".\" follows %s, which does not exist", z.File), true
	case z.Err != nil:
		return newFinding("towerd-root-zone-empty", Problem, "zone \".\" follows %s, which cannot be read: %v", z.File, z.Err), true
	case len(z.Servers) == 0 && len(z.Dropped) > 0:
		return newFinding("towerd-root-zone-empty", Problem, "zone \".\" follows %s, which names only towerd (%s)", z.File, strings.Join(z.Dropped, ", ")), true
	case len(z.Servers) == 0:
		return newFinding("towerd-root-zone-empty", Problem, "zone \".\" follows %s, which names no nameserver", z.File), true
	}
	return Finding{}, false
}

// checkConsulLocal: the consul. zone and the watch go to this node's agent.
func checkConsulLocal(cfg config.Config) (Finding, bool) {
	f := newFinding("towerd-consul-not-local", Warning, "Consul is reached off this node")
	for _, s := range consulZoneServers(cfg) {
		if !consul.IsLocalAddress(s) {
			f = f.with("zone consul. server "+s, "not on this node")
		}
	}
	if cfg.Consul.Enabled && cfg.Consul.Address != "" && !consul.IsLocalAddress(cfg.Consul.Address) {
		f = f.with("consul.address "+cfg.Consul.Address, "the watch's agent is not on this node")
	}
	return f, len(f.Items) > 0
}

func checkStateDir(t towerdFiles) (Finding, bool) {
	s := t.StateDir
	switch {
	case s.Path == "":
		return newFinding("towerd-state-dir", Warning, "state_dir is empty: the cache is not saved"), true
	case s.Info == nil && errors.Is(s.Err, fs.ErrNotExist):
		if t.StateDirectory && s.Path == config.DefaultStateDir {
			return Finding{}, false // towerd.service's StateDirectory= makes it
		}
		return newFinding("towerd-state-dir", Warning, "state_dir %s does not exist, and towerd.service does not create it", s.Path), true
	case s.Info == nil:
		return newFinding("towerd-state-dir", Warning, "state_dir %s cannot be read: %v", s.Path, s.Err), true
	case !s.Info.IsDir():
		return newFinding("towerd-state-dir", Warning, "state_dir %s is not a directory (%v)", s.Path, s.Info.Mode().Type()), true
	case s.Info.Mode().Perm()&0o200 == 0:
		return newFinding("towerd-state-dir", Warning, "state_dir %s is not writable by its owner (mode %v)", s.Path, s.Info.Mode().Perm()), true
	}
	return Finding{}, false
}
