package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func serverAddr(s string) string {
	switch s {
	case "towerd":
		return "127.0.0.11:" + port
	case "dnsmasq":
		return "127.0.0.12:" + port
	case "unbound":
		return "127.0.0.13:" + port
	case "nullgo":
		return "127.0.0.43:" + port
	default: // null
		return "127.0.0.14:" + port
	}
}

// serverSetup is what changes between the scenarios' starts of a server.
type serverSetup struct {
	phase     string // names the log and config files: "hit", "memory", "jitter"
	upstream  string // the synthetic upstream it forwards to, ip:port
	cacheSize int    // entries (unbound: bytes sized to hold them)
	// stale turns on each server's own serve-stale and prefetch, as close
	// to towerd's defaults as its options go (scenario 6; jitter.go).
	// towerd has both on by default either way.
	stale bool
	// noNegCache turns negative caching off in the peers (scenarios 7 and
	// 8); towerd never caches NXDOMAIN.
	noNegCache bool
	// admin, when set, is towerd's admin address (its /metrics); else
	// the admin server is off.
	admin string
	// addr, when set, is where the server listens instead of serverAddr
	// (scenario 10: port 53, which glibc asks).
	addr string
	// consulDNS, when set, is the Consul agent's DNS address, where every
	// server forwards consul. (towerd's watch asks its HTTP API beside).
	consulDNS string
	// consulHTTP, when set, is the agent's HTTP API towerd's watch asks;
	// else the agent at consulDNS's address, port 8500.
	consulHTTP string
	// searchResolvConf, when set, is the resolv.conf whose search list
	// towerd reads for its search-list rules (scenario 10).
	searchResolvConf string
	// dnstapSocket, when set, is the collector's socket towerd writes
	// dnstap to (scenario 11).
	dnstapSocket string
	// towerdConfig is more of towerd's config file (scenario 13's
	// outage day turns hedging off with it).
	towerdConfig string
}

// startServer starts server s (or the null responder) fresh and waits until
// it answers. The caller stops it with b.procs.stop.
func (b *bench) startServer(s string, round int, set serverSetup) (*proc, error) {
	addr := serverAddr(s)
	if set.addr != "" {
		addr = set.addr
	}
	if err := addrFree(addr); err != nil {
		return nil, err
	}
	logf := filepath.Join(b.dir, fmt.Sprintf("%s-%s-%d.log", s, set.phase, round))
	var p *proc
	var err error
	switch s {
	case "null":
		p, err = b.procs.start(s, logf, b.self, "-serve-null", addr)
	case "nullgo":
		p, err = b.procs.start(s, logf, b.self, "-serve-null-go", addr)
	default:
		name, args, cerr := b.serverCommand(s, addr, round, set)
		if cerr != nil {
			return nil, cerr
		}
		p, err = b.procs.start(s, logf, name, args...)
	}
	if err != nil {
		return nil, err
	}
	if err := waitAnswer(addr, "ready.bench.example.", 15*time.Second); err != nil {
		b.procs.stop(p)
		return nil, fmt.Errorf("%s did not answer: %w (log: %s)", s, err, tail(logf))
	}
	if err := exited(p, logf); err != nil {
		return nil, err
	}
	return p, nil
}

// addrFree fails when something already holds addr (UDP), say another
// bench on the same loopback addresses: its answers would pass for ours.
func addrFree(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("%s is taken (another bench running?): %w", addr, err)
	}
	return pc.Close()
}

// exited fails when p has already ended: whatever answered was not it.
func exited(p *proc, logf string) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited at start: %v (log: %s)", p.name, p.cmd.ProcessState, tail(logf))
	default:
		return nil
	}
}

// serverCommand is how each server is started: in the foreground, caching
// set.cacheSize answers, forwarding everything to set.upstream only.
func (b *bench) serverCommand(s, addr string, round int, set serverSetup) (string, []string, error) {
	host, port, _ := strings.Cut(addr, ":")
	// set.upstream may list several servers, comma-separated (scenario 13).
	upstreams := strings.Split(set.upstream, ",")
	consulHost, consulPort, _ := strings.Cut(set.consulDNS, ":")
	switch s {
	case "towerd":
		// Built-in defaults: serve-stale (1.8 s client timeout, an entry
		// that just expired answered stale at once; 30 s answer TTL, 1
		// day) and prefetch (last 10 % of the TTL when that is longer than
		// the upstream's RTO) on; the search-list rules on, with no list
		// unless the scenario gives the file of one.
		config, body := "", set.towerdConfig
		if set.searchResolvConf != "" {
			body += fmt.Sprintf("[search]\nresolv_conf = %q\n", set.searchResolvConf)
		}
		if set.dnstapSocket != "" {
			body += fmt.Sprintf("[dnstap]\nsocket = %q\n", set.dnstapSocket)
		}
		if body != "" {
			config = filepath.Join(b.dir, fmt.Sprintf("towerd-%s-%d.toml", set.phase, round))
			if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
				return "", nil, err
			}
		}
		args := []string{"-config", config, "-listen", addr, "-upstream", set.upstream, "-consul-http", "off",
			"-admin", set.admin, "-state-dir", "",
			// No control socket: the default path, /run/towerd/control.sock,
			// is the host's (a towerd installed there, or another run's).
			"-control", "", "-log-level", "warn", "-cache-size", strconv.Itoa(set.cacheSize)}
		if set.consulDNS != "" {
			// The watch on the agent's HTTP API (its default port) and its DNS.
			api := consulHost + ":8500"
			if set.consulHTTP != "" {
				api = set.consulHTTP
			}
			args = append(args, "-consul-http", api, "-consul-dns", set.consulDNS)
		}
		return b.towerd, args, nil
	case "dnsmasq":
		dnsmasq, _ := lookPath("dnsmasq")
		args := []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
			"--no-poll", "--bind-interfaces", "--listen-address=" + host, "--port=" + port,
			"--cache-size=" + strconv.Itoa(set.cacheSize),
			"--pid-file=", "--user=root", "--log-facility=-"}
		for _, up := range upstreams {
			h, p, _ := strings.Cut(up, ":")
			args = append(args, "--server="+h+"#"+p)
		}
		if set.stale {
			// Answers an expired entry at once (TTL 0, EDE 3 when the
			// client sent EDNS) for up to a day and refreshes it behind;
			// dnsmasq has no client timeout and no prefetch.
			args = append(args, "--use-stale-cache")
		}
		if set.noNegCache {
			args = append(args, "--no-negcache")
		}
		if set.consulDNS != "" {
			args = append(args, "--server=/consul/"+consulHost+"#"+consulPort)
		}
		return dnsmasq, args, nil
	case "unbound":
		conf := filepath.Join(b.dir, fmt.Sprintf("unbound-%s-%d.conf", set.phase, round))
		// About 400 bytes per cached answer in each cache (message and rrset),
		// doubled for unbound's slab and hash overhead: it holds cacheSize.
		// unbound allocates as it caches, so a large limit costs nothing.
		mb := max(4, set.cacheSize*400*2/(1<<20))
		stale := "\tprefetch: no\n\tserve-expired: no\n"
		if set.stale {
			// unbound's most eager serve-stale (RFC 8767), as issue 11
			// compares: an expired entry answered stale at once (client
			// timeout 0) with TTL 30 for up to a day, refreshed behind;
			// prefetch; stale answers marked with EDE 3.
			stale = `	prefetch: yes
	serve-expired: yes
	serve-expired-ttl: 86400
	serve-expired-client-timeout: 0
	serve-expired-reply-ttl: 30
	ede: yes
	ede-serve-expired: yes
`
		}
		if set.noNegCache {
			stale += "\tcache-max-negative-ttl: 0\n"
		}
		zones := unboundForwardZone(".", upstreams...) + "\tforward-first: no\n"
		if set.consulDNS != "" {
			zones += unboundForwardZone("consul.", set.consulDNS)
		}
		return unboundConf{
			addr:    addr,
			dir:     b.dir,
			threads: "\tdo-tcp: yes\n\tnum-threads: 2\n\tso-reuseport: yes\n",
			cache:   fmt.Sprintf("\tmsg-cache-size: %dm\n\trrset-cache-size: %dm\n\tcache-min-ttl: 0\n", mb, 2*mb) + stale,
			zones:   zones,
		}.write(conf)
	}
	return "", nil, fmt.Errorf("unknown server %q", s)
}

// unboundConf is a bench unbound's configuration: the lines every bench
// unbound shares (loopback only, no privileges dropped, no files but its
// directory, the iterator only, no QNAME minimisation), with the parts that
// differ between them.
type unboundConf struct {
	addr    string // host:port it listens on
	dir     string // its working directory
	threads string // server: lines after do-ip6 (threads, TCP, reuseport)
	cache   string // server: lines after module-config (cache sizes, stale)
	server  string // any other server: lines (tls-cert-bundle)
	zones   string // the stub-zone and forward-zone clauses
	control string // remote-control: lines; none turns it off
}

func (u unboundConf) text() string {
	host, port, _ := strings.Cut(u.addr, ":")
	control := u.control
	if control == "" {
		control = "\tcontrol-enable: no\n"
	}
	return fmt.Sprintf(`server:
	interface: %[1]s@%[2]s
	port: %[2]s
	do-ip6: no
%[4]s	access-control: 127.0.0.0/8 allow
	do-not-query-localhost: no
	username: ""
	chroot: ""
	directory: "%[3]s"
	pidfile: ""
	use-syslog: no
	logfile: ""
	verbosity: 0
	module-config: "iterator"
%[5]s%[8]s	qname-minimisation: no
%[6]sremote-control:
%[7]s`, host, port, u.dir, u.threads, u.cache, u.zones, control, u.server)
}

// write writes the configuration to path and returns the command line of
// an unbound that runs it in the foreground.
func (u unboundConf) write(path string) (name string, args []string, err error) {
	if err := os.WriteFile(path, []byte(u.text()), 0o600); err != nil {
		return "", nil, err
	}
	unbound, _ := lookPath("unbound")
	return unbound, []string{"-d", "-c", path}, nil
}

// unboundForwardZone is a forward-zone clause sending name to servers,
// each host:port, or host:port#name for a DNS over TLS server (the name
// its certificate must carry).
func unboundForwardZone(name string, servers ...string) string {
	text := fmt.Sprintf("forward-zone:\n\tname: %q\n", name)
	for _, s := range servers {
		h, p, _ := strings.Cut(s, ":")
		text += fmt.Sprintf("\tforward-addr: %s@%s\n", h, p)
	}
	return text
}
