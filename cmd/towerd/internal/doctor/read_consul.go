package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/cmd/towerd/internal/nodefs"
	"github.com/towerd/towerd/resolver/consul"
)

// The local agent is read with three GETs (/v1/agent/self, services,
// checks) and the token towerd's watch uses; doctor writes nothing to it.
// The API does not show the URL or address of a check registered through
// it (its Definition is empty), so those come from the agent's data_dir,
// where the agent keeps each such check's definition (read as root, under
// the root, each file bounded), and failing that from the check's last
// output.

// consulTarget is how doctor reaches the agent.
type consulTarget struct {
	base, unixSocket string
	header           http.Header
	tls              *tls.Config
}

// consulAddress is the agent's API from the flag, else consul.address,
// else CONSUL_HTTP_ADDR, else 127.0.0.1:8500, as the watch picks it.
func consulAddress(flagAddr string, c config.ConsulConfig) string {
	for _, a := range []string{flagAddr, c.Address, os.Getenv(api.HTTPAddrEnvName)} {
		if a != "" {
			return a
		}
	}
	return consul.DefaultAddress
}

// newConsulTarget parses addr (host:port, http(s)://host:port,
// unix:///path) for scheme (consul.scheme; "" = http, or https when
// CONSUL_HTTP_SSL says so).
func newConsulTarget(nr *nodefs.Root, addr string, c config.ConsulConfig, token string) (consulTarget, error) {
	t := consulTarget{header: http.Header{}}
	if token != "" {
		t.header.Set("X-Consul-Token", token)
	}
	scheme := c.Scheme
	if scheme == "" && strings.EqualFold(os.Getenv(api.HTTPSSLEnvName), "true") {
		scheme = "https"
	}
	if scheme == "" {
		scheme = "http"
	}
	switch {
	case strings.HasPrefix(addr, "unix://"):
		t.unixSocket = strings.TrimPrefix(addr, "unix://")
		t.base = "http://consul"
		return t, nil
	case strings.Contains(addr, "://"):
		u, err := url.Parse(addr)
		if err != nil {
			return t, err
		}
		scheme, addr = u.Scheme, u.Host
	}
	t.base = scheme + "://" + addr
	if scheme == "https" && c.TLSCAFile != "" {
		pem, err := nr.ReadFileMax(c.TLSCAFile, 1<<20)
		if err != nil {
			return t, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		t.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t, nil
}

// The parts of the API's answers doctor reads.
type (
	agentSelf struct {
		Config struct {
			Datacenter, NodeName string
		}
		DebugConfig struct {
			DataDir            string
			AdvertiseAddrLAN   string
			DNSRecursors       []string
			DNSRecursorTimeout string
			DNSOnlyPassing     bool
			DNSAllowStale      bool
			DNSUseCache        bool
			DNSCacheMaxAge     string
			DNSMaxStale        string
			DNSSOA             struct{ Minttl int }
			Checks             []checkDef
			Services           []struct {
				ID, Name string
				Check    checkDef
				Checks   []checkDef
			}
		}
	}
	// checkDef is a check's definition: the agent's config files, a
	// Definition, or a data_dir file's ChkType (whose Timeout is in ns).
	checkDef struct {
		ID, CheckID                  string
		HTTP, TCP, GRPC, H2PING, UDP string
		Timeout                      json.RawMessage
		// What makes a check without a target (script, TTL, alias,
		// docker, OS service) count as one.
		ScriptArgs                         []string
		TTL                                json.RawMessage // "0s" or ns
		AliasService, AliasNode, OSService string
		Docker                             string `json:"DockerContainerID"`
	}
	agentService struct {
		ID, Service, Address string
		Port                 int
	}
	agentCheck struct {
		CheckID, Name, ServiceID, Type, Timeout, Output string
		Definition                                      checkDef
	}
	persistedCheck struct {
		Check   struct{ CheckID string }
		ChkType checkDef
	}
)

// target is the URL or host:port the definition reaches, and its type.
func (d checkDef) target() (typ, target string) {
	for _, c := range [][2]string{{"http", d.HTTP}, {"tcp", d.TCP}, {"grpc", d.GRPC}, {"h2ping", d.H2PING}, {"udp", d.UDP}} {
		if c[1] != "" {
			return c[0], c[1]
		}
	}
	return "", ""
}

// empty tells an unset Check of a service definition (Consul's
// CheckType.Empty) from a check of any kind.
func (d checkDef) empty() bool {
	typ, _ := d.target()
	return typ == "" && len(d.ScriptArgs) == 0 && slices.Contains([]string{"", `"0s"`, "0", `""`}, string(d.TTL)) &&
		d.AliasService == "" && d.AliasNode == "" && d.OSService == "" && d.Docker == ""
}

// timeout reads "3s" (config files, Definition) or 3000000000 (data_dir).
func (d checkDef) timeout() time.Duration {
	var s string
	if json.Unmarshal(d.Timeout, &s) == nil {
		t, _ := time.ParseDuration(s)
		return t
	}
	var ns int64
	if json.Unmarshal(d.Timeout, &ns) == nil {
		return time.Duration(ns)
	}
	return 0
}

// readConsul asks the agent at addr.
func readConsul(ctx context.Context, nr *nodefs.Root, addr string, c config.ConsulConfig, token string, timeout time.Duration) *consulView {
	v := &consulView{Addr: addr}
	t, err := newConsulTarget(nr, addr, c, token)
	if err != nil {
		v.Err = err
		return v
	}
	client := httpClient(t.unixSocket)
	if t.tls != nil {
		client.Transport.(*http.Transport).TLSClientConfig = t.tls
	}
	get := func(p string, out any) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return getJSON(ctx, client, t.base+p, t.header, out)
	}
	var self agentSelf
	v.SelfErr = get("/v1/agent/self", &self)
	if v.SelfErr != nil && !isStatus(v.SelfErr) {
		v.Err = v.SelfErr // nothing answers there
		return v
	}
	if v.SelfErr == nil {
		dc := self.DebugConfig
		v.Node, v.Datacenter, v.NodeAddr, v.DataDir = self.Config.NodeName, self.Config.Datacenter, dc.AdvertiseAddrLAN, dc.DataDir
		v.DNS = consulDNS{Known: true, Recursors: dc.DNSRecursors, RecursorTimeout: dc.DNSRecursorTimeout,
			OnlyPassing: dc.DNSOnlyPassing, AllowStale: dc.DNSAllowStale, UseCache: dc.DNSUseCache,
			CacheMaxAge: dc.DNSCacheMaxAge, MaxStale: dc.DNSMaxStale, SOAMinTTL: dc.DNSSOA.Minttl}
	}
	var services map[string]agentService
	if v.ServicesErr = get("/v1/agent/services", &services); v.ServicesErr == nil {
		for _, s := range services {
			v.Services = append(v.Services, consulService{ID: s.ID, Name: s.Service, Address: s.Address, Port: s.Port})
		}
		slices.SortFunc(v.Services, func(a, b consulService) int { return strings.Compare(a.ID, b.ID) })
	}
	var checks map[string]agentCheck
	if v.ChecksErr = get("/v1/agent/checks", &checks); v.ChecksErr == nil {
		defs := configChecks(self)
		for id, d := range persistedChecks(nr, v.DataDir) {
			if _, ok := defs[id]; !ok {
				defs[id] = d
			}
		}
		for _, ac := range checks {
			v.Checks = append(v.Checks, resolveCheck(ac, defs))
		}
		slices.SortFunc(v.Checks, func(a, b consulCheck) int { return strings.Compare(a.ID, b.ID) })
	}
	return v
}

func isStatus(err error) bool {
	_, ok := err.(*statusError)
	return ok
}

// sourcedDef is a definition and where it was found.
type sourcedDef struct {
	def  checkDef
	from string
}

// configChecks are the checks of the agent's config files by check ID:
// their own id, or service:ID (service:ID:N when a service has several),
// as the agent names them (agent.go, AddService).
func configChecks(self agentSelf) map[string]sourcedDef {
	out := map[string]sourcedDef{}
	for _, c := range self.DebugConfig.Checks {
		out[c.ID] = sourcedDef{c, "config"}
	}
	for _, s := range self.DebugConfig.Services {
		id := s.ID
		if id == "" {
			id = s.Name
		}
		var defs []checkDef
		// A service's Check is always there, empty when unset.
		if !s.Check.empty() {
			defs = append(defs, s.Check)
		}
		defs = append(defs, s.Checks...)
		for i, d := range defs {
			cid := d.CheckID
			if cid == "" {
				cid = "service:" + id
				if len(defs) > 1 {
					cid += ":" + strconv.Itoa(i+1)
				}
			}
			out[cid] = sourcedDef{d, "config"}
		}
	}
	return out
}

// maxCheckFile bounds one persisted check definition.
const maxCheckFile = 256 << 10

// persistedChecks reads the definitions the agent keeps for the checks
// registered through its API, <data_dir>/checks/*, under the root. Each
// holds the check's token too: it is not decoded.
func persistedChecks(nr *nodefs.Root, dataDir string) map[string]sourcedDef {
	out := map[string]sourcedDef{}
	if dataDir == "" {
		return out
	}
	dir := path.Join(dataDir, "checks")
	for _, e := range readDir(nr, dir) {
		data, err := nr.ReadFileMax(path.Join(dir, e.Name()), maxCheckFile)
		if err != nil {
			continue
		}
		var p persistedCheck
		if json.Unmarshal(data, &p) == nil && p.Check.CheckID != "" {
			out[p.Check.CheckID] = sourcedDef{p.ChkType, "data_dir"}
		}
	}
	return out
}

// resolveCheck finds a check's target: its Definition (filled for checks
// registered through the catalog), its config file or data_dir definition,
// else its last output.
func resolveCheck(ac agentCheck, defs map[string]sourcedDef) consulCheck {
	c := consulCheck{ID: ac.CheckID, Name: ac.Name, ServiceID: ac.ServiceID, Type: ac.Type}
	c.Timeout, _ = time.ParseDuration(ac.Timeout)
	def, from := ac.Definition, "definition"
	if typ, _ := def.target(); typ == "" {
		if d, ok := defs[ac.CheckID]; ok {
			def, from = d.def, d.from
		}
	}
	if typ, target := def.target(); typ != "" {
		c.Target, c.TargetFrom = target, from
		if c.Type == "" {
			c.Type = typ
		}
		if c.Timeout == 0 {
			c.Timeout = def.timeout()
		}
		return c
	}
	if target := targetFromOutput(ac.Output); target != "" {
		c.Target, c.TargetFrom = target, "output"
	}
	return c
}
