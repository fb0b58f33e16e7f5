package drill

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/daemon"
)

// Node is the configuration a drill rehearses: the node's own towerd.toml,
// or the built-in defaults when the installed file does not exist.
type Node struct {
	// Path is the file read; Missing says it did not exist and the
	// built-in defaults stand in (only for the default path).
	Path    string
	Missing bool
	// Config is the node's configuration as towerd serve would run it.
	Config config.Config
	// Zones are the node's forwarding zones, merged over the defaults as
	// serve merges them, each with the servers the node would ask.
	Zones []NodeZone
}

// NodeZone is one zone of the node and the servers it forwards to there.
type NodeZone struct {
	Name string
	// Servers are the configured ip:port; empty for "." when the node
	// takes them from resolv.conf, which the drill does not read.
	Servers []string
}

// placeholderServer fills zones without servers while the zones are merged,
// so ForwardZones has no reason to read the system's resolv.conf; it is
// never contacted (every zone gets a loopback stand-in instead).
const placeholderServer = "127.0.0.1:9"

// LoadNode reads the node's configuration at path. optional is true for the
// default path: a missing file there means the built-in defaults, as for
// towerd serve; a missing file named with -config is an error.
func LoadNode(path string, optional bool) (Node, error) {
	n := Node{Path: path}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && optional {
		n.Missing = true
	}
	cfg, err := config.Load(path, optional)
	if err != nil {
		return n, err
	}
	n.Config = cfg

	// Merge the zones the way serve does, with a placeholder for servers
	// the node would read from resolv.conf.
	fromSystem := map[string]bool{".": true}
	probe := cfg
	probe.Zones = nil
	for _, z := range cfg.Zones {
		name := dns.CanonicalName(z.Name)
		servers := z.Servers
		if len(servers) == 0 {
			servers = []string{placeholderServer}
		} else {
			delete(fromSystem, name)
		}
		probe.Zones = append(probe.Zones, config.ZoneConfig{Name: name, Servers: servers})
	}
	if fromSystem["."] {
		probe.Zones = append(probe.Zones, config.ZoneConfig{Name: ".", Servers: []string{placeholderServer}})
	}
	zones, _, err := probe.ForwardZones("/")
	if err != nil {
		return n, err
	}
	for _, z := range zones {
		nz := NodeZone{Name: z.Name, Servers: z.Servers}
		if fromSystem[z.Name] {
			nz.Servers = nil
		}
		n.Zones = append(n.Zones, nz)
	}
	return n, nil
}

// describe says where the configuration came from, for the report.
func (n Node) describe() string {
	if n.Missing {
		return n.Path + " does not exist: built-in defaults"
	}
	return n.Path
}

// loopbackCopy is the node's configuration with everything that reaches
// outside the drill switched to loopback or off: it listens on a free
// loopback port (never the node's port 53), runs no admin server and no
// control socket, neither
// loads nor saves the cache (the node's state stays untouched), watches no
// Consul agent, and lets loopback clients in. Cache, serve-stale, upstream
// and timeout settings stay the node's: they are what is rehearsed.
// It returns what it replaced besides listen, for the report.
func (n Node) loopbackCopy() (config.Config, []string) {
	cfg := n.Config
	var changed []string
	cfg.Listen = []string{"127.0.0.1:0"} // Run names the port it got
	if cfg.Admin.Listen != "" {
		changed = append(changed, "admin server "+cfg.Admin.Listen+" → off")
		cfg.Admin.Listen = ""
	}
	if cfg.Control.Socket != "" {
		// The node's own towerd has it, or will.
		changed = append(changed, "control socket "+cfg.Control.Socket+" → off")
		cfg.Control.Socket = ""
	}
	if cfg.StateDir != "" {
		changed = append(changed, "state_dir "+cfg.StateDir+" → none (not read, not written)")
		cfg.StateDir = ""
	}
	if cfg.Consul.Enabled {
		changed = append(changed, "Consul watch → off")
		cfg.Consul.Enabled = false
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	allowed := false
	for _, a := range cfg.Allow {
		if p, err := netip.ParsePrefix(a); err == nil && p.Contains(loopback) {
			allowed = true
		}
	}
	if !allowed {
		cfg.Allow = append(append([]string(nil), cfg.Allow...), "127.0.0.1/32")
		changed = append(changed, "allow + 127.0.0.1/32 (the drill's clients)")
	}
	return cfg, changed
}

// towerd is the drill's towerd: the daemon's own New and Run over the
// node's loopback copy, each zone pointing at its stand-ins, and nothing
// that reaches outside the drill (no systemd sockets or signals either).
type towerd struct {
	addr string
	d    *daemon.Daemon
	done chan error
}

func startTowerd(cfg config.Config, zones []config.ZoneConfig, log *slog.Logger) (*towerd, error) {
	// Every zone, "." too, names its stand-ins as servers: nothing is taken
	// from (or follows) the node's resolv.conf.
	cfg.Zones = zones
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := daemon.New(daemon.Options{Config: cfg, Zones: zones, Log: log})
	if err != nil {
		return nil, err
	}
	t := &towerd{d: d, done: make(chan error, 1)}
	go func() { t.done <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
	case err := <-t.done:
		return nil, err
	}
	for _, a := range d.Addrs() {
		if udp, ok := strings.CutPrefix(a, "udp/"); ok {
			t.addr = udp
		}
	}
	if t.addr == "" {
		t.stop()
		return nil, errors.New("no UDP listener")
	}
	return t, nil
}

// stop drains the listeners, then the upstream work, as the daemon does
// on SIGTERM.
func (t *towerd) stop() {
	t.d.Shutdown()
	<-t.done
}
