package doctor

import (
	"context"
	"path/filepath"
	"time"
)

// Options say where doctor looks.
type Options struct {
	// Root stands for the node's "/": "/" is this machine; another
	// directory is a node image, whose towerd, agent and /proc doctor
	// does not ask unless told their addresses.
	Root string
	// ConfigPath is towerd's config file as the node sees it;
	// ConfigMustExist when it was named (-config).
	ConfigPath      string
	ConfigMustExist bool
	// AdminAddr is the running towerd's admin server; "" = the config's
	// admin.listen, asked only on this machine.
	AdminAddr string
	// ConsulAddr is the local agent's HTTP API; "" = the config's (as the
	// watch picks it), asked only on this machine.
	ConsulAddr string
	// Rules is a rules file or directory, or a Prometheus URL; "" = not
	// checked.
	Rules string
	// Timeout bounds each HTTP exchange.
	Timeout time.Duration
}

// live tells whether Root is this machine.
func (o Options) live() bool { return filepath.Clean(o.Root) == "/" }

// Read gathers the Node: files first, then what the running towerd, the
// Consul agent and Prometheus answer. Only a root that cannot be opened
// is an error; anything else it could not read is in the Node.
func Read(ctx context.Context, o Options) (*Node, error) {
	nr, err := openRoot(o.Root)
	if err != nil {
		return nil, err
	}
	defer nr.Close()
	n := &Node{Root: o.Root}
	readResolverFiles(nr, n)
	readPlumbing(nr, n)
	readTowerdFiles(nr, n, o.ConfigPath, o.ConfigMustExist)
	cfg := n.Towerd.Config

	if o.live() {
		ls, err := readListeners(nr)
		if err != nil {
			n.Skipped = append(n.Skipped, Skip{areaPlumbing, "who listens on port 53: " + err.Error()})
		}
		n.Listeners = ls
	} else {
		n.Skipped = append(n.Skipped, Skip{areaPlumbing, "who listens on port 53: --root is not this machine"})
	}

	admin := o.AdminAddr
	switch {
	case admin == "" && !o.live():
		n.Skipped = append(n.Skipped, Skip{areaTowerd, "the running towerd: --root is not this machine (name it with -admin)"})
	case admin == "" && cfg.Admin.Listen == "":
		n.Skipped = append(n.Skipped, Skip{areaTowerd, "the running towerd: admin.listen is off (name an admin server with -admin)"})
	case !n.Towerd.Installed && o.AdminAddr == "":
	default:
		if admin == "" {
			admin = cfg.Admin.Listen
		}
		n.Running = readRunning(ctx, admin, o.Timeout)
	}

	switch {
	case o.ConsulAddr == "" && !o.live():
		n.Skipped = append(n.Skipped, Skip{areaConsul, "the Consul agent: --root is not this machine (name it with -consul)"})
	case o.ConsulAddr == "" && n.Towerd.Installed && !cfg.Consul.Enabled:
		n.Skipped = append(n.Skipped, Skip{areaConsul, "the Consul agent: consul.enabled = false (name one with -consul)"})
	default:
		addr := consulAddress(o.ConsulAddr, cfg.Consul)
		n.Consul = readConsul(ctx, nr, addr, cfg.Consul, n.Towerd.ConsulToken, o.Timeout)
	}

	switch {
	case n.Towerd.ConfigErr != nil || !hasTLSServers(cfg):
	case !o.live():
		n.Skipped = append(n.Skipped, Skip{areaTowerd, "DNS over TLS servers: --root is not this machine"})
	default:
		n.TLSUpstreams = readTLSUpstreams(ctx, cfg, o.Timeout)
	}

	switch {
	case n.Towerd.ConfigErr != nil || cfg.DNSSEC.Mode == "off" || cfg.DNSSEC.Mode == "":
		// Asked once audit is on: the step before enforce.
	case !o.live():
		n.Skipped = append(n.Skipped, Skip{areaTowerd, "whether zone \".\"'s servers pass DNSSEC records: --root is not this machine"})
	default:
		n.DNSSECPath = readDNSSECPath(ctx, cfg, o.Timeout)
	}

	if o.Rules == "" {
		n.Skipped = append(n.Skipped, Skip{areaMonitoring, "alert rules: name a rules directory or a Prometheus URL with -rules"})
	} else {
		n.Rules = readRules(ctx, o.Rules, o.Timeout)
		if n.Rules.Err != nil {
			n.Skipped = append(n.Skipped, Skip{areaMonitoring, "alert rules: " + oneLineErr(n.Rules.Err)})
		}
		for _, u := range n.Rules.Unread {
			n.Skipped = append(n.Skipped, Skip{areaMonitoring, u.Subject + ": " + u.Detail})
		}
	}
	return n, nil
}

// checks are run in this order, which is the order findings print in.
var checks = []func(*Node) []Finding{
	checkResolvConf, checkSearchList, checkNsswitch,
	checkManager, checkDocker, checkResolved, checkListeners, checkDnsmasq,
	checkTowerd, checkTLSUpstreams, checkDNSSECPath,
	checkConsul,
	checkMonitoring,
}

// Diagnose runs every check on n.
func Diagnose(n *Node) Report {
	r := Report{Schema: Schema, Root: n.Root, Skipped: n.Skipped}
	for _, check := range checks {
		r.Findings = append(r.Findings, check(n)...)
	}
	r.Summary = summarize(r.Findings)
	return r
}
