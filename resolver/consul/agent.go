package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

// DefaultAddress is the agent's HTTP API when neither the configuration nor
// CONSUL_HTTP_ADDR name one.
const DefaultAddress = "127.0.0.1:8500"

// DefaultDomain is Consul's DNS domain when the agent cannot be asked.
const DefaultDomain = "consul."

// ErrACL marks an error the agent gave because of the ACL token: missing,
// unknown, expired or without the permissions the watch needs.
var ErrACL = errors.New("consul rejected the ACL token")

// ErrUnreachable marks an error reaching the agent at all.
var ErrUnreachable = errors.New("consul agent unreachable")

// ErrThrottled marks an HTTP 429 from the agent: this client holds more
// connections than limits.http_max_conns_per_client allows (or the agent's
// rate limit hit). The watch shrinks instead of retrying.
var ErrThrottled = errors.New("consul agent refused the query with 429 (too many requests)")

// clients are the two API clients of the watch, on one configuration and
// one bound on bodies: pooled keeps its connections for the watches' next
// queries; probe is for the first reads of names not watched yet, on a
// connection of its own that closes after each read, so that reading names
// that turn out to be no service leaves no connection behind.
type clients struct {
	pooled, probe *api.Client
}

// newClients builds the API clients. Empty fields fall back to Consul's own
// environment variables (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN,
// CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...), as every
// Consul tool does, and then to api's defaults (127.0.0.1:8500, http). Their
// transport bounds every reply body (boundedTransport).
func newClients(cfg Config) (clients, error) {
	c := api.DefaultConfig() // Consul's environment variables
	c.Datacenter = ""        // always the agent's own: the watch serves the local datacenter
	if cfg.Address != "" {
		c.Address = cfg.Address
	}
	if cfg.Scheme != "" {
		c.Scheme = cfg.Scheme
	}
	if cfg.Token != "" {
		c.Token = cfg.Token
	}
	if err := readCredentials(cfg, c); err != nil {
		return clients{}, err
	}
	// Every blocking query holds a connection for its whole wait. The
	// watches and the service list or /v1/agent/self on the pooled client,
	// one first read on the probe's, are the most towerd ever has open;
	// MaxConnsPerHost makes that a hard bound of MaxConns (a request past it
	// waits for a connection), well under Consul's
	// http_max_conns_per_client (200), which refuses a client's further
	// connections with 429 and would take the node's other Consul clients
	// down with it. Idle connections are kept for reuse up to the same
	// number, so a watch's next query does not open a new one.
	maxWatches := cfg.MaxWatches
	if maxWatches <= 0 {
		maxWatches = DefaultMaxWatches
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = MaxConns(maxWatches) - 1
	tr.MaxIdleConnsPerHost = tr.MaxConnsPerHost
	tr.MaxIdleConns = tr.MaxConnsPerHost
	tr.ForceAttemptHTTP2 = false // the agent speaks HTTP/1.1 to API clients
	if path, ok := strings.CutPrefix(c.Address, "unix://"); ok {
		// api would swap in a transport of its own for a unix socket (and
		// lose the bounds): dial the socket from this one instead.
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
		c.Address, c.Scheme = "localhost", "http"
	}
	single := tr.Clone()
	single.MaxConnsPerHost, single.DisableKeepAlives = 1, true
	maxBody := cfg.MaxBody
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	budget := &bodyBudget{max: bodyBudgetBodies * maxBody}
	var out clients
	for _, side := range []struct {
		tr     *http.Transport
		client **api.Client
	}{{tr, &out.pooled}, {single, &out.probe}} {
		hc, err := api.NewHttpClient(side.tr, c.TLSConfig)
		if err != nil {
			return clients{}, fmt.Errorf("consul client: %w", err)
		}
		hc.Transport = &boundedTransport{next: side.tr, maxBody: maxBody, budget: budget}
		cc := *c
		cc.Transport, cc.HttpClient = side.tr, hc
		if *side.client, err = api.NewClient(&cc); err != nil {
			return clients{}, fmt.Errorf("consul client: %w", err)
		}
	}
	return out, nil
}

// MaxConns is the most connections the watch opens to the agent for a
// given max_watches: one per watch, one for the service list or the agent's
// configuration, one for a first read.
func MaxConns(maxWatches int) int { return maxWatches + 2 }

// displayAddress is the address the client talks to, for logs and State.
func displayAddress(cfg Config) string {
	if cfg.Address != "" {
		return cfg.Address
	}
	if a := os.Getenv(api.HTTPAddrEnvName); a != "" {
		return a
	}
	return DefaultAddress
}

// IsLocalAddress reports whether addr (host:port, a URL or unix://path)
// names this machine: a loopback IP, "localhost" or a unix socket. The watch
// is meant for the node's own agent, whose cache and streaming carry the
// load; pointing thousands of nodes at the servers defeats that.
func IsLocalAddress(addr string) bool {
	scheme, rest, found := strings.Cut(addr, "://")
	if !found {
		rest = addr
	} else if scheme == "unix" {
		return true
	}
	rest, _, _ = strings.Cut(rest, "/")
	host := rest
	if h, _, err := net.SplitHostPort(rest); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// agentInfo is what the watch learns from the agent (or the configuration)
// to name and shape records like the agent's DNS does.
type agentInfo struct {
	datacenter   string   // lower case
	domain       string   // lower case, fully qualified
	onlyPassing  bool     // dns_config.only_passing
	nodeMetaTXT  bool     // dns_config.enable_additional_node_meta_txt
	aRecordLimit int      // dns_config.a_record_limit
	udpAnswer    int      // dns_config.udp_answer_limit
	serviceTTL   ttlTable // dns_config.service_ttl
	soa          soaTimers
	fromAgent    bool // false: the agent would not say (ACL), defaults used
}

// agentReadTimeout bounds a read of /v1/agent/self, which the agent
// answers at once from its own memory.
const agentReadTimeout = 10 * time.Second

// readAgent asks /v1/agent/self for the datacenter and the DNS settings.
// Configured datacenter and domain win over the agent's. An ACL refusal is
// not fatal: the token may be allowed to read services but not the agent;
// then the configuration and Consul's defaults are used, and the datacenter
// comes from the catalog's own entries.
func readAgent(ctx context.Context, client *api.Client, cfg Config) (*agentInfo, error) {
	info := &agentInfo{
		datacenter:  strings.ToLower(cfg.Datacenter),
		domain:      DefaultDomain,
		nodeMetaTXT: true, // Consul's default
		udpAnswer:   defaultUDPAnswerLimit,
		soa:         defaultSOA,
	}
	if cfg.Domain != "" {
		info.domain = dns.CanonicalName(cfg.Domain)
	}
	var self map[string]map[string]any
	ctx, cancel := context.WithTimeout(ctx, agentReadTimeout)
	defer cancel()
	_, err := client.Raw().Query("/v1/agent/self", &self, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		err = classify(err)
		if errors.Is(err, ErrACL) {
			return info, err
		}
		return nil, err
	}
	info.fromAgent = true
	if dc, ok := self["Config"]["Datacenter"].(string); ok && info.datacenter == "" {
		info.datacenter = strings.ToLower(dc)
	}
	dbg := self["DebugConfig"]
	if d, ok := dbg["DNSDomain"].(string); ok && d != "" && cfg.Domain == "" {
		info.domain = dns.CanonicalName(d)
	}
	if v, ok := dbg["DNSOnlyPassing"].(bool); ok {
		info.onlyPassing = v
	}
	if v, ok := dbg["DNSNodeMetaTXT"].(bool); ok {
		info.nodeMetaTXT = v
	}
	if v, ok := dbg["DNSARecordLimit"].(float64); ok && v > 0 {
		info.aRecordLimit = int(v)
	}
	if v, ok := dbg["DNSUDPAnswerLimit"].(float64); ok && v > 0 {
		info.udpAnswer = int(v)
	}
	if v, ok := dbg["DNSServiceTTL"].(map[string]any); ok {
		info.serviceTTL = readTTLTable(v)
	}
	if v, ok := dbg["DNSSOA"].(map[string]any); ok {
		info.soa = readSOA(v)
	}
	return info, nil
}

// classify wraps err with ErrACL, ErrUnreachable, ErrThrottled or
// ErrBodyTooLarge when it is one of those, so logs and State say plainly
// what an operator has to fix. The text of what the agent sent is cut
// short: it is logged and shown in /stats.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrACL) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrThrottled) {
		return err
	}
	if errors.Is(err, ErrBodyTooLarge) {
		return err // before net.Error: a *url.Error is one
	}
	msg := shorten(err.Error())
	var se api.StatusError
	if (errors.As(err, &se) && se.Code == 429) || strings.Contains(msg, "Unexpected response code: 429") {
		return fmt.Errorf("%w: %s", ErrThrottled, msg)
	}
	if errors.As(err, &se) && (se.Code == 401 || se.Code == 403) {
		return fmt.Errorf("%w (HTTP %d: %s): set consul.token or consul.token_file (or CONSUL_HTTP_TOKEN) "+
			"to a token with service:read and node:read", ErrACL, se.Code, shorten(se.Body))
	}
	// api returns a plain error for non-2xx replies on some paths; the ACL
	// ones carry Consul's own wording.
	if strings.Contains(msg, "Permission denied") || strings.Contains(msg, "ACL not found") {
		return fmt.Errorf("%w: %s: set consul.token or consul.token_file (or CONSUL_HTTP_TOKEN) "+
			"to a token with service:read and node:read", ErrACL, msg)
	}
	var ne net.Error
	var op *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %s", ErrUnreachable, msg)
	}
	if len(msg) < len(err.Error()) {
		return shortError{msg: msg, err: err}
	}
	return err
}

// shortError is an error whose text was cut short; errors.Is and As still
// see the whole.
type shortError struct {
	msg string
	err error
}

func (e shortError) Error() string { return e.msg }
func (e shortError) Unwrap() error { return e.err }

// maxErrorText is the most of an error's text kept: the agent's reply
// bodies end up in it.
const maxErrorText = 512

func shorten(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorText], "") + "… (cut)"
}
