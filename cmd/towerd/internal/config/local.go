package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// LocalConfig is the [local] table: answers from this node's own data
// before the Consul watch, the cache and the upstreams (resolver/local;
// dnsmasq's hosts files, address=, local=, domain-needed, bogus-priv).
type LocalConfig struct {
	// HostsFiles: hosts(5) files, or directories of them, answered from
	// and re-read when they change. [] = none.
	HostsFiles []string `toml:"hosts_files"`
	// DomainNeeded: A and AAAA questions for names without a dot get
	// NXDOMAIN (NODATA if known locally) instead of going upstream.
	DomainNeeded bool `toml:"domain_needed"`
	// BogusPriv: PTR questions for private addresses (RFC 1918, RFC 6303)
	// get NXDOMAIN unless local data or a zone of their own answers them.
	BogusPriv bool `toml:"bogus_priv"`
	// TTL: TTL of local answers, whole seconds; "0s" = clients do not
	// cache them (dnsmasq's local-ttl default).
	TTL Duration `toml:"ttl"`
	// Domains: answered only from local data; NXDOMAIN for other names
	// (dnsmasq's local=/DOMAIN/).
	Domains []string `toml:"domains"`
	// Records: static records in zone-file form, "name [ttl] [IN] TYPE
	// data"; their TTL is ttl's.
	Records []string `toml:"records"`
	// Address: [[local.address]] tables, dnsmasq's address=/DOMAIN/IP.
	Address []LocalAddress `toml:"address"`
}

// LocalAddress is one [[local.address]] table: the domain and every name
// below it answer A and AAAA with these addresses; the other types, and a
// family without an address, go upstream (dnsmasq 2.86+).
type LocalAddress struct {
	Name      string   `toml:"name"`
	Addresses []string `toml:"addresses"`
}

// DefaultHostsFile is read by default, as dnsmasq reads it: the node's own
// names answer the same over DNS as through nsswitch.
const DefaultHostsFile = "/etc/hosts"

func defaultLocalConfig() LocalConfig {
	return LocalConfig{
		HostsFiles:   []string{DefaultHostsFile},
		DomainNeeded: true,
		BogusPriv:    true,
		TTL:          Dur(0),
	}
}

// maxLocalTTL is the largest TTL a record may carry (RFC 2181 §8).
const maxLocalTTL = (1<<31 - 1) * time.Second

// ParseRecords returns the static records, validated.
func (l LocalConfig) ParseRecords() ([]dns.RR, error) {
	var out []dns.RR
	byName := map[string][]uint16{}
	for i, s := range l.Records {
		key := fmt.Sprintf("local.records[%d]", i)
		rr, err := dns.NewRR(s)
		if err != nil || rr == nil {
			msg := "empty"
			if err != nil {
				msg = strings.TrimPrefix(err.Error(), "dns: ")
			}
			return nil, keyErr(key, "%q is not a record in zone-file form (e.g. \"nas.lan. A 192.168.1.10\"): %s", s, msg)
		}
		h := rr.Header()
		if h.Class != dns.ClassINET {
			return nil, keyErr(key, "%q: only class IN is served", s)
		}
		switch h.Rrtype {
		case dns.TypeSOA, dns.TypeNS, dns.TypeDNAME, dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeDS, dns.TypeDNSKEY:
			return nil, keyErr(key, "%q: %s records are not served from local data", s, dns.TypeToString[h.Rrtype])
		}
		name := dns.CanonicalName(h.Name)
		types := byName[name]
		for _, t := range types {
			if t == dns.TypeCNAME || h.Rrtype == dns.TypeCNAME {
				return nil, keyErr(key, "%q: a CNAME cannot share its name %s with another record (RFC 1034 §3.6.2)", s, name)
			}
		}
		byName[name] = append(types, h.Rrtype)
		out = append(out, rr)
	}
	return out, nil
}

// ParseAddresses returns the [[local.address]] domains' addresses.
func (l LocalConfig) ParseAddresses() ([][]netip.Addr, error) {
	out := make([][]netip.Addr, len(l.Address))
	for i, a := range l.Address {
		if _, ok := dns.IsDomainName(a.Name); !ok || a.Name == "" {
			return nil, keyErr(fmt.Sprintf("local.address[%d].name", i), "%q is not a domain name", a.Name)
		}
		if len(a.Addresses) == 0 {
			return nil, keyErr(fmt.Sprintf("local.address[%d].addresses", i),
				"needs at least one address (for NXDOMAIN, list the domain in local.domains)")
		}
		for j, s := range a.Addresses {
			ip, err := netip.ParseAddr(s)
			if err != nil || ip.Zone() != "" {
				return nil, keyErr(fmt.Sprintf("local.address[%d].addresses[%d]", i, j), "%q is not an IP address", s)
			}
			out[i] = append(out[i], ip.Unmap())
		}
	}
	return out, nil
}

func (l LocalConfig) validate() error {
	for i, f := range l.HostsFiles {
		if strings.TrimSpace(f) == "" {
			return keyErr(fmt.Sprintf("local.hosts_files[%d]", i), "is empty")
		}
	}
	if l.TTL.Duration < 0 || l.TTL.Duration > maxLocalTTL || l.TTL.Duration%time.Second != 0 {
		return keyErr("local.ttl", "must be whole seconds from \"0s\" to %v (got %v)", maxLocalTTL, l.TTL)
	}
	for i, d := range l.Domains {
		if _, ok := dns.IsDomainName(d); !ok || d == "" || dns.CanonicalName(d) == "." {
			return keyErr(fmt.Sprintf("local.domains[%d]", i), "%q is not a domain name (the root cannot be local)", d)
		}
	}
	if _, err := l.ParseRecords(); err != nil {
		return err
	}
	_, err := l.ParseAddresses()
	return err
}
