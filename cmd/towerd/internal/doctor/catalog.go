package doctor

// spec is one kind of finding: the part that does not depend on the node.
type spec struct {
	ID, Area, Title, Why, Fix string
}

// The areas, in the order doctor looks at them and prints them.
const (
	areaResolver   = "resolver"
	areaPlumbing   = "plumbing"
	areaTowerd     = "towerd"
	areaConsul     = "consul"
	areaMonitoring = "monitoring"
)

// catalog is every finding doctor can report. docs/doctor.md lists the
// same, and a test holds the two together; `towerd doctor -list` prints it.
var catalog = []spec{
	// The resolver path: what glibc and Go do with a lookup.
	{"resolv-conf-unreadable", areaResolver, "/etc/resolv.conf cannot be read",
		"Every program on the node reads resolv.conf to find its resolver. Without the file glibc and Go ask 127.0.0.1:53 and Docker gives containers 8.8.8.8; a FIFO, a device or an oversized file there is a broken or planted file that programs read differently.",
		"Make /etc/resolv.conf a regular file that names towerd: `towerd install` writes it and keeps the one it replaces."},
	{"resolv-conf-bypasses-towerd", areaResolver, "lookups do not go to towerd first",
		"glibc and Go send each question to the first nameserver of resolv.conf and try the next only after its timeout. When that is the shared resolver (or systemd-resolved's stub, which forwards to it), every lookup waits on it: no cache, no stale answers, and one lost packet holds a lookup for the whole timeout. That is the day towerd exists for.",
		"`towerd install`: it points resolv.conf at 127.0.0.1, keeps its search and options lines, and stops the program that manages the file from taking it back."},
	{"resolv-conf-fallback-servers", areaResolver, "other nameservers follow towerd in resolv.conf",
		"glibc tries the next nameserver when towerd times out or answers SERVFAIL or REFUSED: on the day the upstream fails, the question towerd could not answer goes to the same failing resolver after a further wait, and names only towerd knows (consul., local data) get NXDOMAIN there.",
		"Leave only towerd's nameserver line (towerd install writes `nameserver 127.0.0.1`) and give the other servers to towerd, as zone \".\"'s servers or the file it follows."},
	{"resolv-conf-rotate", areaResolver, "options rotate sends lookups around towerd",
		"With rotate, glibc starts each lookup at the next nameserver in turn: with towerd and one other server listed, half of all lookups skip towerd's cache and stale answers and wait on the shared resolver.",
		"Remove rotate, or every nameserver but towerd."},
	{"resolver-timeout-long", areaResolver, "a lost packet holds a lookup for the resolver's whole timeout",
		"Without a local cache the node's programs ask the shared resolver themselves, and glibc and Go resend a lost packet only after `timeout` seconds (5 by default). Go serializes lookups of one name, so each stall fails one request of every worker at once; on the reproduced day (100 ± 50 ms, 0.5 % loss) that alone failed requests every few seconds.",
		"Put towerd in front (`towerd install`): it resends after the upstream's measured round trip and answers stale when the upstream fails. Until then, `options timeout:1 attempts:3` bounds the stall."},
	{"resolver-gives-up-before-towerd", areaResolver, "clients give up before towerd answers",
		"timeout × attempts in resolv.conf is how long glibc and Go wait for towerd in all. towerd answers a miss within query_timeout and serves a stale answer once serve_stale.client_timeout has passed; a client that gives up sooner gets an error where towerd was about to answer.",
		"Raise `options timeout:` or `attempts:` so that their product exceeds towerd's query_timeout and serve_stale.client_timeout (glibc's defaults, 5 s × 2, do), or lower those keys in towerd.toml."},
	{"resolver-single-request", areaResolver, "options single-request makes A and AAAA wait for each other",
		"getaddrinfo asks A and AAAA in parallel; single-request (and single-request-reopen) sends the second only after the first is answered, so a lookup that misses every cache costs two upstream round trips instead of one.",
		"Remove single-request unless a broken firewall on the path needs it, which is its only purpose."},
	{"search-list-cost", areaResolver, "the search list and ndots cost upstream questions on every lookup",
		"glibc tries the search domains in order (before the name itself when the name has fewer dots than ndots), A and AAAA for each. Every expansion that does not exist is an NXDOMAIN, which towerd never caches so that a name that appears is seen at once: each one is asked of the upstream on every lookup. Without towerd's search-list rules (search.enabled) they go one round trip after another: with ndots above the dots of a Consul name (Kubernetes' ndots:5), every Consul lookup first waits on the shared resolver (issue 28 measured p50 275 ms instead of 3 ms). With them, in one round, and not waited for once the name the lookup ends at is known.",
		"Keep ndots at 1 (below the dots of the names the node asks) and the search list short, and write fully qualified names with a final dot in configuration (`api.service.consul.`)."},
	{"nsswitch-bypasses-towerd", areaResolver, "glibc's hosts: line goes around resolv.conf",
		"With nss-resolve (resolve) before dns, getaddrinfo asks systemd-resolved over varlink and never reads resolv.conf: resolved's own cache, which keeps NXDOMAIN, and resolved's own upstreams, not towerd. Without dns in the line, glibc asks no DNS server at all.",
		"`towerd install` takes resolve out of hosts: and puts dns where it stood; on a node managed by authselect, select a profile without it."},
	{"nsswitch-files-after-dns", areaResolver, "/etc/hosts is read after DNS",
		"glibc asks the hosts: sources in order: with dns before files (or files missing), even localhost and the node's own name wait on a DNS round trip, and on the bad day they time out with everything else.",
		"Put files first: `hosts: files dns`."},
	{"nsswitch-mdns-falls-through", areaResolver, "mDNS misses fall through to DNS",
		"mdns4_minimal without [NOTFOUND=return] hands every .local name that mDNS does not answer on to dns: each is an NXDOMAIN from the shared resolver, never cached, on every lookup.",
		"`hosts: files mdns4_minimal [NOTFOUND=return] dns` (Debian's default), or no mdns where nothing uses .local."},

	// The programs around towerd.
	{"resolv-conf-manager-reclaims", areaPlumbing, "the program that manages resolv.conf will take it back",
		"resolv.conf names towerd now, but the program that maintains it rewrites the file at its next lease, restart or link change: from then on lookups bypass towerd without anyone having changed a setting.",
		"`towerd install` writes the drop-in or hook listed, which stops it while keeping the servers it learns in the file towerd follows."},
	{"docker-bypasses-towerd", areaPlumbing, "Docker's containers do not use towerd",
		"Docker copies the host's resolv.conf into containers without its loopback nameservers; with only towerd (127.0.0.1) listed, containers get 8.8.8.8 and 8.8.4.4: no cache, no stale answers, and none of the node's private zones (consul.) inside containers.",
		"`towerd install --docker` (\"dns\" in daemon.json, towerd.socket on docker0's address, the bridge in allow), then restart Docker."},
	{"docker-dns-unanswered", areaPlumbing, "containers ask an address towerd does not listen on",
		"daemon.json gives containers an address on the bridge as their resolver, but towerd's listen does not include it: containers' lookups fail, or reach whatever else listens there.",
		"Add the address (port 53) to listen and the bridge's network to allow in towerd.toml, and the address to towerd.socket; `towerd install --docker` does all three."},
	{"resolved-stub-listening", areaPlumbing, "systemd-resolved's stub still answers on 127.0.0.53",
		"Programs and containers that use resolved's stub (stub-resolv.conf, nss-resolve) bypass towerd, and a second cache that keeps NXDOMAIN sits beside it.",
		"DNSStubListener=no in a drop-in of /etc/systemd/resolved.conf.d (`towerd install` writes towerd.conf there); resolved keeps running and keeps learning the DHCP servers towerd follows."},
	{"resolved-forwards-to-towerd", areaPlumbing, "systemd-resolved forwards to towerd while towerd follows resolved",
		"resolved writes its servers to /run/systemd/resolve/resolv.conf, the file towerd follows for zone \".\": with towerd among them, towerd would forward to itself, so it drops its own address and is left with what remains, possibly nothing.",
		"Take towerd's address out of resolved's DNS= and leave resolved the DHCP servers: glibc reaches towerd through resolv.conf, not through resolved."},
	{"port53-conflict", areaPlumbing, "another program holds towerd's address on port 53",
		"Whoever binds first wins: towerd cannot bind, or after a reboot the other program does, and lookups meet its cache and its upstreams instead of towerd's.",
		"Stop and disable it; for dnsmasq, `systemctl disable --now dnsmasq` (or port=0 to keep its DHCP)."},
	{"port53-other-resolver", areaPlumbing, "another DNS server listens on this node",
		"Programs configured with its address, or containers given it, bypass towerd: no stale answers, and a negative cache of its own.",
		"Point its clients at towerd and stop it, or make it forward to towerd."},
	{"dnsmasq-serves-dns", areaPlumbing, "dnsmasq is set to serve DNS on this node",
		"dnsmasq binds port 53 when it starts (enabled at boot, or running now): it takes 127.0.0.1:53 from towerd, and its resolvconf or DHCP hook registers it as the node's resolver again.",
		"Stop and disable it before towerd takes port 53 (the command is listed); set port=0 instead to keep its DHCP service."},

	// towerd itself.
	{"towerd-not-installed", areaTowerd, "towerd is not installed",
		"Nothing on this node absorbs a slow or failing shared resolver: every lookup waits on it, as the other findings detail.",
		"`towerd install --dry-run` shows what would change; `towerd install --activate` does it and rolls back if towerd does not answer."},
	{"towerd-config-invalid", areaTowerd, "towerd's configuration does not load",
		"towerd does not start with it, and a reload with it is refused: the node keeps whatever answered before, or nothing.",
		"Fix the key named; `towerd check` shows the same error."},
	{"towerd-not-running", areaTowerd, "towerd does not answer",
		"resolv.conf sends lookups to towerd: while it is down each one waits the resolver's timeout for nothing, then fails or goes to the next nameserver.",
		"`systemctl enable --now towerd.socket`; `journalctl -u towerd` says why it stopped."},
	{"towerd-zone-unreachable", areaTowerd, "servers of a zone are down",
		"towerd marks a server down after fail_threshold failures in a row. While every server of a zone is down, only its cached names are answered (stale) and new names get SERVFAIL; while some are, the rest carry the load.",
		"`towerd stats` names the servers; check their addresses in towerd.toml and the path to them."},
	{"towerd-tls-upstream-fails", areaTowerd, "a DNS over TLS server does not answer over a verified connection",
		"towerd sends a tls:// server nothing unless its certificate verifies against the zone's tls_ca_file (or the system's roots) and carries the name after #; it never falls back to plaintext. A server whose certificate, name or port is wrong is down for its zone: only cached names are answered, stale.",
		"The reason names what failed: `certificate` (tls_ca_file does not hold the CA that signed it), `name` (the certificate does not carry the name after #), `not_tls` or `handshake_timeout` (the port is not DNS over TLS), `network`. `openssl s_client -connect ADDRESS:853 -servername NAME -CAfile FILE` shows the certificate."},
	{"towerd-dnssec-path", areaTowerd, "zone \".\"'s servers do not pass DNSSEC records",
		"With dnssec.mode audit or enforce, towerd asks zone \".\"'s servers for signatures (DO) and DS records, as a validator must. A server that strips RRSIGs, or does not answer DS questions with them, makes every signed name bogus: SERVFAIL in enforce. A warning before enforce is on, a problem after.",
		"Keep dnssec.mode off or audit with these servers, or forward zone \".\" to resolvers that pass DNSSEC records (`dig +dnssec +cd . DNSKEY @SERVER` shows RRSIGs)."},
	{"towerd-root-zone-empty", areaTowerd, "zone \".\" has no upstream",
		"towerd leaves its own addresses out of its upstreams (forwarding to itself would loop): when the file zone \".\" follows is missing or names only towerd, every name outside the other zones gets SERVFAIL.",
		"Set resolv_conf to the file the node's DHCP client or network manager keeps current, or servers for zone \".\"; towerd install writes one of the two."},
	{"towerd-consul-not-local", areaTowerd, "Consul names are not asked of this node's agent",
		"The node's own agent answers from its local catalog and carries the load with its cache and streaming; sending every node's Consul lookups to a server, or to another node's agent, puts the fleet's lookups on a few machines and a network path that fail together.",
		"Zone consul. to 127.0.0.1:8600 and consul.address 127.0.0.1:8500, the defaults."},
	{"towerd-serve-stale-off", areaTowerd, "serve-stale is off",
		"Answering with the last good answer when the upstream times out or fails (RFC 8767) is what keeps services up on the bad day; without it every expired name waits on the failing upstream and then fails.",
		"serve_stale.enabled = true, the default."},
	{"towerd-state-dir", areaTowerd, "the cache does not survive a restart",
		"towerd saves its cache in state_dir and loads it at start. Without it, a restart on the day something already fails starts cold, and every name goes to the failing upstream at once.",
		"state_dir = \"/var/lib/towerd\", the default, which towerd.service's StateDirectory= creates."},
	{"towerd-socket-not-enabled", areaTowerd, "towerd.socket is not enabled",
		"towerd.socket binds towerd's addresses at boot and holds queries while towerd starts or restarts; not enabled, nothing answers there after the next reboot, while resolv.conf still sends every lookup there.",
		"`systemctl enable towerd.socket`."},

	// The local Consul agent.
	{"consul-unreachable", areaConsul, "the local Consul agent does not answer",
		"towerd's watch and its consul. zone both ask this agent: without it, Consul names are answered only while cached, and doctor cannot check the agent's services and checks.",
		"Start the agent, or name where it listens: consul.address in towerd.toml (doctor's -consul)."},
	{"consul-acl-denied", areaConsul, "the Consul token may not read what doctor asked",
		"doctor reads with towerd's own token: what it may not read, towerd's watch may not either.",
		"Give the token service:read and node:read (the watch's needs), and agent:read for the agent's settings; or set consul.token_file."},
	{"consul-agent-error", areaConsul, "the local Consul agent answered doctor's questions with errors",
		"An agent that fails its own API (HTTP 500: no leader, a server it cannot reach, an overloaded agent) fails towerd's watch too: Consul names are then answered only while cached.",
		"Read the agent's log (`journalctl -u consul`) and `consul members`; the item names the endpoint and the agent's own message."},
	{"consul-service-no-address", areaConsul, "services registered without an address",
		"Consul answers them with the node's address. That is an address, not a name, so no further lookup follows; listed so that a service reached on another interface, or in a container, is registered with its own.",
		"None needed while the service listens on the node's address; else register it with Address set."},
	{"consul-service-address-hostname", areaConsul, "services registered with a host name as their address",
		"Consul's DNS answers them with a CNAME to that name, which every client then resolves through the shared resolver: towerd's watch cannot answer them from memory, and on the bad day their lookups wait on the failing resolver.",
		"Register the service with its IP address (Address, or the tagged lan_ipv4/lan_ipv6 addresses)."},
	{"consul-check-hostname", areaConsul, "health checks that resolve a host name",
		"Every run of such a check starts with a DNS lookup. The checks of one agent all resolve through the same path, so one resolver stall turns them critical together, and a critical check takes the service out of Consul's DNS on every node until its next passing run: on the reproduced day, 13 of 20 checks went critical within 2 s.",
		"Check by IP address: the target is a process on this node or a known address, not a name."},
	{"consul-check-timeout-under-resolver", areaConsul, "checks by host name whose timeout is shorter than the resolver's retry",
		"The node's resolver resends a lost DNS packet only after its timeout; a check that gives up sooner fails whenever one packet is lost, and the service is then NXDOMAIN on every node until the next passing run. On the reproduced day (a 3 s check against glibc's 5 s retry) 745 of the 946 client failures came from this.",
		"Check by IP address; or put towerd in front, where a lost upstream packet costs a resend after the measured round trip, and keep the check's timeout above towerd's query_timeout."},
	{"consul-check-target-unknown", areaConsul, "checks whose target doctor could not see",
		"The agent's API does not show the URL or address of a check registered through it; doctor reads those from the agent's data_dir (as root, on the node) or from the check's last output. These checks were not judged.",
		"Run doctor as root on the node, with a token that has agent:read."},
	{"consul-recursors", areaConsul, "the agent's recursors",
		"The agent forwards names outside its domain to its recursors, for clients that ask its DNS directly. towerd sends it only consul. names; a client that still asks the agent for everything waits on these servers, through no cache of towerd's, on the bad day.",
		"Point such clients at towerd; the agent then needs no recursors."},
	{"consul-dns-allow-stale-off", areaConsul, "Consul's DNS reads from the leader only",
		"With allow_stale = false every DNS question the agent answers is a consistent read on the leader: during a leader election, or with a slow leader, Consul DNS fails or slows on every node at once.",
		"dns_config { allow_stale = true }, the default."},
	{"consul-dns-config", areaConsul, "the agent's DNS settings",
		"What towerd's answers under consul. follow: only_passing decides whether instances with a warning check are answered (towerd's watch follows it); soa.min_ttl is the TTL of Consul's negative answers (at 0 the AAAA half of a lookup of an IPv4-only name is asked of the agent every time); use_cache and max_stale decide whether the agent answers from its own cache.",
		"None needed; listed so that what the node's Consul answers follow is in sight."},

	// Monitoring.
	{"monitoring-signal-missing", areaMonitoring, "a golden signal has no alert",
		"Three signals tell \"DNS is why services fail together\" apart from everything else: the resolver failing (SERVFAIL, timeouts), clients waiting on lookups (p99), and Consul's health (check timeouts, the watch). Without an alert on each, the bad day is found from the services' errors, after it began.",
		"Load towerd's rules (monitoring/towerd.rules.yml), or alerts of your own on the signals listed."},
	{"monitoring-recording-rule-missing", areaMonitoring, "alerts use recording rules that are not loaded",
		"An alert whose expression reads a recording rule that does not exist compares nothing and never fires: the rules look loaded and the alert stays silent on the day it is needed.",
		"Load the recording rules with the alerts (towerd.rules.yml holds both, in two groups)."},
}

var catalogByID = func() map[string]spec {
	m := make(map[string]spec, len(catalog))
	for _, s := range catalog {
		if _, dup := m[s.ID]; dup {
			panic("doctor: finding " + s.ID + " is in the catalog twice")
		}
		m[s.ID] = s
	}
	return m
}()
