package drill

import (
	"fmt"
	"io"
	"strings"
)

// printHeader says what is rehearsed: the node's configuration and what
// the drill replaced in it, each zone and its loopback copy, the faults,
// the clients and the plan of phases.
func printHeader(w io.Writer, o Options, p plan, stands standIns, replaced []string) {
	cfg := o.Node.Config
	fmt.Fprintf(w, "towerd drill  seed %d\n", o.Seed)
	fmt.Fprintf(w, "config    %s\n", o.Node.describe())
	stale := "off"
	if cfg.ServeStale.Enabled {
		stale = fmt.Sprintf("on (client_timeout %v, failure_recheck %v, max_age %v)",
			cfg.ServeStale.ClientTimeout, cfg.ServeStale.FailureRecheck, cfg.ServeStale.MaxAge)
	}
	fmt.Fprintf(w, "          cache %d entries, prefetch %v; serve_stale %s; upstream timeout %v, %d attempts; query_timeout %v\n",
		cfg.Cache.Size, onOff(cfg.Cache.Prefetch), stale, cfg.Upstream.Timeout, cfg.Upstream.MaxAttempts, cfg.QueryTimeout)
	fmt.Fprintf(w, "loopback  run in this process with the node's settings; replaced: %s\n", strings.Join(replaced, ", "))
	fmt.Fprintln(w, "          the node's running towerd, its port 53, its saved cache and its upstreams are not touched")
	width := len("zone")
	for _, s := range stands {
		width = max(width, len(s.zone.Name))
	}
	for _, s := range stands {
		servers := strings.Join(s.zone.Servers, " ")
		if len(s.zone.Servers) == 0 {
			servers = "the system's resolv.conf (not read: one stand-in)"
		}
		var proxies []string
		for _, px := range s.proxies {
			proxies = append(proxies, px.Addr())
		}
		fmt.Fprintf(w, "zone      %-*s  node: %s\n", width, s.zone.Name, servers)
		proxyNoun := "fault proxy"
		if len(proxies) > 1 {
			proxyNoun = "fault proxies"
		}
		names := fmt.Sprintf("%d names", len(s.names))
		if len(s.names) == 1 {
			names = "1 name"
		}
		fmt.Fprintf(w, "          %-*s  copy: %s %s …, upstream %s behind %s %s\n",
			width, "", names, s.names[0], s.upstream.addr, proxyNoun, strings.Join(proxies, " "))
	}
	fmt.Fprintf(w, "faults    delay %v ± %v, loss %.2f%% each way, SERVFAIL %.2f%% (phases 1 and 3); phase 2 drops everything\n",
		o.Faults.Delay, o.Faults.Jitter, 100*o.Faults.Loss, 100*o.Faults.ServFail)
	fmt.Fprintf(w, "clients   %d × %d queries/s, timeout %v, no retries; records with TTL %v", o.Clients, o.Rate, o.Timeout, o.TTL)
	if p.ttl != o.TTL {
		fmt.Fprintf(w, " (%v once the node's cache clamps it)", p.ttl)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "plan      warm-up (at most %v), %s %v (baseline, direct and through towerd), %s %v, %s (at most %v: ends once every name is answered fresh)\n",
		p.warmup, phaseFaults, p.faults, phaseBlackhole, p.blackhole, phaseBack, p.recoveryMax)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
