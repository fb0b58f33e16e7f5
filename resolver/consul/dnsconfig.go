package consul

import (
	"math"
	"strings"
	"time"
)

// The agent's DNS settings that shape its records beyond the catalog:
// dns_config.service_ttl (the TTL of a service's records) and
// dns_config.soa (the SOA of its negative answers). The watch reads them
// from /v1/agent/self, so that a record it builds carries the TTL the
// agent's DNS gives the same record (issue 23: with service_ttl set, the
// watch's answers had TTL 0 and the agent's forwarded ones the
// configured TTL).

// defaultUDPAnswerLimit is Consul's dns_config.udp_answer_limit: the
// answer records a UDP client without EDNS gets at most.
const defaultUDPAnswerLimit = 3

// ttlTable is Consul's service TTL lookup (agent/dns.go
// GetTTLForService): a service's own entry, else the longest prefix
// entry ("web*", "*"), else none.
type ttlTable struct {
	strict   map[string]time.Duration
	prefixes map[string]time.Duration // keys without their trailing "*"
}

// readTTLTable reads DebugConfig's DNSServiceTTL: names to durations
// written as Go durations ("10s"). An entry that does not parse is left
// out, as if not configured.
func readTTLTable(v map[string]any) ttlTable {
	var t ttlTable
	for key, raw := range v {
		text, ok := raw.(string)
		if !ok {
			continue
		}
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 {
			continue
		}
		if prefix, ok := strings.CutSuffix(key, "*"); ok {
			if t.prefixes == nil {
				t.prefixes = map[string]time.Duration{}
			}
			t.prefixes[prefix] = d
			continue
		}
		if t.strict == nil {
			t.strict = map[string]time.Duration{}
		}
		t.strict[key] = d
	}
	return t
}

// maxServiceTTL bounds a TTL the agent's settings give, as
// consul.answer_ttl is bounded: whoever answers on the agent's address
// cannot make clients keep a record for years.
const maxServiceTTL = 24 * time.Hour

// ttl is the TTL in seconds of service's records (service lower case, as
// Consul's DNS lower-cases the question before it looks it up); 0 when
// the table has no entry for it, Consul's default; at most maxServiceTTL.
func (t ttlTable) ttl(service string) uint32 {
	if d, ok := t.strict[service]; ok {
		return seconds(min(d, maxServiceTTL))
	}
	best, found := "", false
	for prefix := range t.prefixes {
		if strings.HasPrefix(service, prefix) && (!found || len(prefix) > len(best)) {
			best, found = prefix, true
		}
	}
	if !found {
		return 0
	}
	return seconds(min(t.prefixes[best], maxServiceTTL))
}

func seconds(d time.Duration) uint32 {
	return uint32(min(d/time.Second, math.MaxUint32))
}

// soaTimers are dns_config.soa's: the SOA's refresh, retry, expire and
// minimum. Consul writes the minimum as the SOA's own TTL too.
type soaTimers struct {
	refresh, retry, expire, minttl uint32
}

// defaultSOA is Consul's: refresh 3600, retry 600, expire 86400, min_ttl 0.
var defaultSOA = soaTimers{refresh: 3600, retry: 600, expire: 86400}

// readSOA reads DebugConfig's DNSSOA; a field missing or out of range
// keeps Consul's default.
func readSOA(v map[string]any) soaTimers {
	soa := defaultSOA
	for key, field := range map[string]*uint32{"Refresh": &soa.refresh, "Retry": &soa.retry,
		"Expire": &soa.expire, "Minttl": &soa.minttl} {
		if n, ok := v[key].(float64); ok && n >= 0 && n <= math.MaxUint32 {
			*field = uint32(n)
		}
	}
	return soa
}
