package config

import (
	"fmt"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver"
	"github.com/towerd/towerd/resolver/dnssec"
)

// DNSSECConfig is the [dnssec] table: validation of the answers of names
// a trust anchor covers (issue 39; docs/resolving.md, "DNSSEC").
type DNSSECConfig struct {
	// Mode: "off" (nothing validated, DO/CD/AD pass through), "audit"
	// (answers unchanged; verdicts counted, bogus ones logged) or
	// "enforce" (bogus answers SERVFAIL with an Extended DNS Error, secure
	// ones AD).
	Mode string `toml:"mode"`
	// TrustAnchorFile: DS or DNSKEY records in zone-file form; read at
	// start and on reload when mode is not off.
	TrustAnchorFile string `toml:"trust_anchor_file"`
	// NegativeTrustAnchors: names at and below which nothing is validated
	// (RFC 7646). Every [[zone]] other than ".", the Consul domain and the
	// local data's names are negative anchors without being listed.
	NegativeTrustAnchors []string `toml:"negative_trust_anchors"`
}

func defaultDNSSECConfig() DNSSECConfig {
	return DNSSECConfig{Mode: "off", TrustAnchorFile: dnssec.DefaultAnchorFile}
}

// dnssecModes are the values of dnssec.mode.
var dnssecModes = map[string]resolver.DNSSECMode{
	"off": resolver.DNSSECOff, "audit": resolver.DNSSECAudit, "enforce": resolver.DNSSECEnforce,
}

// ModeValue is Mode as the resolver takes it (validated).
func (c DNSSECConfig) ModeValue() resolver.DNSSECMode { return dnssecModes[c.Mode] }

func (c DNSSECConfig) validate() error {
	if _, ok := dnssecModes[c.Mode]; !ok {
		return keyErr("dnssec.mode", "%q is not one of off, audit, enforce", c.Mode)
	}
	if c.Mode != "off" && c.TrustAnchorFile == "" {
		return keyErr("dnssec.trust_anchor_file", "must name a file when dnssec.mode is %s", c.Mode)
	}
	for i, n := range c.NegativeTrustAnchors {
		if _, ok := dns.IsDomainName(n); !ok || n == "" || dns.CanonicalName(n) == "." {
			return keyErr(fmt.Sprintf("dnssec.negative_trust_anchors[%d]", i), "%q is not a domain name below the root", n)
		}
	}
	return nil
}

// ReadAnchors reads trust_anchor_file; the error names the key.
func (c DNSSECConfig) ReadAnchors() ([]dns.RR, error) {
	rrs, err := dnssec.ReadAnchors(c.TrustAnchorFile)
	if err != nil {
		return nil, keyErr("dnssec.trust_anchor_file", "%v", err)
	}
	return rrs, nil
}

// LocalNames are the names local data answers for (local.domains,
// local.records, local.address): negative trust anchors of their own.
func (l LocalConfig) LocalNames() []string {
	var names []string
	names = append(names, l.Domains...)
	for _, s := range l.Records {
		if rr, err := dns.NewRR(s); err == nil && rr != nil {
			names = append(names, rr.Header().Name)
		}
	}
	for _, a := range l.Address {
		names = append(names, a.Name)
	}
	return names
}
