package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consul"
)

// ConsulConfig is the [consul] table: the watch that pushes the catalog's
// healthy services into memory and answers <svc>.service.consul from there.
type ConsulConfig struct {
	// Enabled: run the watch. On by default: towerd starts whether or not
	// an agent runs, and the watch retries until one answers.
	Enabled bool `toml:"enabled"`
	// Address: the local agent's HTTP API (host:port, http(s)://host:port,
	// unix:///path); "" = CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string `toml:"address"`
	// Scheme: "http" or "https"; "" = CONSUL_HTTP_SSL, else http.
	Scheme string `toml:"scheme"`
	// Token: the ACL token; "" = CONSUL_HTTP_TOKEN(_FILE), else none.
	Token string `toml:"token"`
	// TokenFile: file holding the ACL token (read at start).
	TokenFile string `toml:"token_file"`
	// TLSCAFile: CA bundle for an https agent; "" = CONSUL_CACERT, else
	// the system's.
	TLSCAFile string `toml:"tls_ca_file"`
	// Datacenter: names the <svc>.service.<dc>.consul form; "" = the
	// agent's.
	Datacenter string `toml:"datacenter"`
	// Domain: Consul's DNS domain; "" = the agent's, else "consul.".
	Domain string `toml:"domain"`
	// Services: services always watched (pinned), from the start; the
	// rest are watched once this node asks for them. ["*"] = follow the
	// whole catalog (small catalogs only; capped at max_watches).
	Services []string `toml:"services"`
	// Tags: answer from the watch only services carrying at least one of
	// these; empty = no tag filter.
	Tags []string `toml:"tags"`
	// MaxWatches: cap on watched services (each holds one HTTP connection
	// to the agent while it blocks); at the cap the most asked are watched.
	MaxWatches int `toml:"max_watches"`
	// IdleTimeout: a watch ends after this long without a question; a
	// service asked twice within it is watched.
	IdleTimeout Duration `toml:"idle_timeout"`
	// AnswerTTL: TTL of the answers served from the watch; unset = the
	// agent's dns_config.service_ttl for the service, as its own DNS.
	AnswerTTL OptionalDuration `toml:"answer_ttl"`
}

func defaultConsulConfig() ConsulConfig {
	return ConsulConfig{Enabled: true, MaxWatches: consul.DefaultMaxWatches,
		IdleTimeout: Dur(consul.DefaultIdleTimeout)}
}

func (c ConsulConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	switch c.Scheme {
	case "", "http", "https":
	default:
		return keyErr("consul.scheme", "%q is not one of http, https", c.Scheme)
	}
	if c.Token != "" && c.TokenFile != "" {
		return keyErr("consul.token_file", "set consul.token or consul.token_file, not both")
	}
	if c.Domain != "" {
		if _, ok := dns.IsDomainName(c.Domain); !ok {
			return keyErr("consul.domain", "%q is not a domain name", c.Domain)
		}
	}
	for i, s := range c.Services {
		if strings.TrimSpace(s) == "" {
			return keyErr(fmt.Sprintf("consul.services[%d]", i), "empty service name")
		}
		if s == consul.WatchAll && len(c.Services) > 1 {
			return keyErr(fmt.Sprintf("consul.services[%d]", i), `"*" (watch the whole catalog) must be the only entry`)
		}
	}
	// 150 leaves room under Consul's default http_max_conns_per_client
	// (200) for the node's other Consul clients.
	if c.MaxWatches < 1 || c.MaxWatches > 150 {
		return keyErr("consul.max_watches", "must be between 1 and 150 (got %d)", c.MaxWatches)
	}
	if pinned := len(c.Services); pinned > c.MaxWatches && !(pinned == 1 && c.Services[0] == consul.WatchAll) {
		return keyErr("consul.services", "%d pinned services exceed consul.max_watches = %d", pinned, c.MaxWatches)
	}
	if c.IdleTimeout.Duration < time.Second {
		return keyErr("consul.idle_timeout", "must be at least 1s (got %v)", c.IdleTimeout)
	}
	if c.AnswerTTL.Set && (c.AnswerTTL.Duration < 0 || c.AnswerTTL.Duration > 24*time.Hour) {
		return keyErr("consul.answer_ttl", "must be between 0s and 24h (got %v)", c.AnswerTTL)
	}
	if c.AnswerTTL.Duration%time.Second != 0 {
		return keyErr("consul.answer_ttl", "DNS TTLs are whole seconds (got %v)", c.AnswerTTL)
	}
	return nil
}

// checkFiles reads consul.token_file and consul.tls_ca_file as the watch
// reads them (consul.ReadCredential), so that a missing one, a FIFO or a
// device fails the start, a reload or `towerd check` naming the key, not
// the watch later. Load calls it after Validate: what Validate checks is
// the configuration, this the files it names on this machine.
func (c ConsulConfig) checkFiles() error {
	if !c.Enabled {
		return nil
	}
	tokenFile, ok := ExpandCredentials(c.TokenFile)
	if !ok {
		// Only towerd.service has the credential: check-config outside
		// it cannot read the file, which is no error.
		tokenFile = ""
	}
	for _, f := range []struct{ key, path string }{{"consul.token_file", tokenFile}, {"consul.tls_ca_file", c.TLSCAFile}} {
		if f.path == "" {
			continue
		}
		if _, err := consul.ReadCredential(f.path); err != nil {
			return keyErr(f.key, "cannot be read: %v", err)
		}
	}
	return nil
}

// credentialsVar is the one variable consul.token_file may name: systemd
// sets it to the service's private credentials directory
// (/run/credentials/towerd.service) when the unit loads a credential
// (LoadCredential=consul-token:/etc/towerd/consul-token). towerd runs as
// user towerd and cannot read a root-only token file itself.
const credentialsVar = "CREDENTIALS_DIRECTORY"

// ExpandCredentials expands ${CREDENTIALS_DIRECTORY} (or
// $CREDENTIALS_DIRECTORY) in path, and nothing else: a "$" in any other
// place stays as it is, so a path is never changed by an unrelated
// variable of the environment. ok is false when path names the variable
// and it is not set: outside towerd.service (towerd check run by hand),
// the credential exists only inside the service.
func ExpandCredentials(path string) (expanded string, ok bool) {
	if !strings.Contains(path, "$"+credentialsVar) && !strings.Contains(path, "${"+credentialsVar+"}") {
		return path, true
	}
	dir, set := os.LookupEnv(credentialsVar)
	if !set || dir == "" {
		return path, false
	}
	expanded = strings.ReplaceAll(path, "${"+credentialsVar+"}", dir)
	return strings.ReplaceAll(expanded, "$"+credentialsVar, dir), true
}

// CredentialsNote is what towerd check says of a consul.token_file it
// cannot read because it lives in towerd.service's credentials; "" when
// there is nothing to say.
func (c ConsulConfig) CredentialsNote() string {
	if !c.Enabled || c.TokenFile == "" {
		return ""
	}
	if _, ok := ExpandCredentials(c.TokenFile); ok {
		return ""
	}
	return "consul.token_file " + c.TokenFile + ": read inside towerd.service only ($" + credentialsVar +
		" is set there by LoadCredential=; not checked here)"
}
