package consul

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
)

// This file builds the records Consul v1.14's DNS server builds for a service
// lookup (agent/dns.go: serviceNodeRecords, serviceSRVRecords,
// nodeServiceRecords, makeRecordFromIP, makeRecordFromServiceNode,
// generateMeta), from the same catalog data, so that a client cannot tell
// whether towerd or the agent answered. Only the local datacenter is served,
// so none of Consul's WAN address translation applies.

// instance is one healthy service instance, reduced to the fields Consul's
// DNS reads. Two results with equal instances give equal records, which is
// how an unchanged result is recognised and dropped.
type instance struct {
	ServiceID string // only orders instances
	Node      string // node name, letter case kept
	NodeAddr  string
	NodeV4    string // the node's tagged lan_ipv4 address
	NodeV6    string // the node's tagged lan_ipv6 address
	SvcAddr   string
	SvcV4     string // the service's tagged lan_ipv4 address
	SvcV6     string // the service's tagged lan_ipv6 address
	Port      int
	Weight    int      // SRV weight from the aggregated check status
	Tags      []string // lower case: Consul's tag filter ignores case
	MetaTXT   []string // the node's meta as RFC 1464 strings, sorted
}

// instancesFrom keeps the entries Consul's DNS would answer with — no
// critical check, and with onlyPassing (dns_config.only_passing) no
// warning either (structs.CheckServiceNodes.Filter) — in a stable order.
func instancesFrom(service string, entries []*api.ServiceEntry, onlyPassing bool) []instance {
	out := make([]instance, 0, len(entries))
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil || !healthy(e.Checks, onlyPassing) {
			continue
		}
		in := instance{
			ServiceID: e.Service.ID,
			Node:      e.Node.Node,
			NodeAddr:  e.Node.Address,
			NodeV4:    e.Node.TaggedAddresses["lan_ipv4"],
			NodeV6:    e.Node.TaggedAddresses["lan_ipv6"],
			SvcAddr:   e.Service.Address,
			SvcV4:     e.Service.TaggedAddresses["lan_ipv4"].Address,
			SvcV6:     e.Service.TaggedAddresses["lan_ipv6"].Address,
			Port:      e.Service.Port,
			Weight:    weight(service, e),
		}
		for _, t := range e.Service.Tags {
			in.Tags = append(in.Tags, strings.ToLower(t))
		}
		for k, v := range e.Node.Meta {
			in.MetaTXT = append(in.MetaTXT, metaTXT(k, v))
		}
		slices.Sort(in.MetaTXT)
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b instance) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ServiceID, b.ServiceID))
	})
	return out
}

func healthy(checks api.HealthChecks, onlyPassing bool) bool {
	for _, c := range checks {
		if c.Status == api.HealthCritical || (onlyPassing && c.Status != api.HealthPassing) {
			return false
		}
	}
	return true
}

// weight is Consul's findWeight: the service's passing or warning weight by
// the aggregated status of its own and its node's checks; 1 by default.
func weight(service string, e *api.ServiceEntry) int {
	w := e.Service.Weights
	if w.Passing == 0 && w.Warning == 0 {
		w = api.AgentWeights{Passing: 1, Warning: 1}
	}
	var checks api.HealthChecks
	for _, c := range e.Checks {
		if c.ServiceName == service || c.ServiceName == "" {
			checks = append(checks, c)
		}
	}
	switch checks.AggregatedStatus() {
	case api.HealthWarning:
		return w.Warning
	case api.HealthPassing:
		return w.Passing
	case api.HealthMaint, api.HealthCritical:
		return 0
	}
	return 1
}

var (
	leadingSpaces  = regexp.MustCompile("^ +")
	trailingSpaces = regexp.MustCompile(" +$")
)

// metaTXT is Consul's encodeKVasRFC1464; keys starting "rfc1035-" carry
// their value as is.
func metaTXT(key, value string) string {
	if strings.HasPrefix(strings.ToLower(key), "rfc1035-") {
		return value
	}
	key = strings.ReplaceAll(key, "`", "``")
	key = strings.ReplaceAll(key, "=", "`=")
	key = leadingSpaces.ReplaceAllStringFunc(key, func(s string) string { return strings.Repeat("` ", len(s)) })
	key = trailingSpaces.ReplaceAllStringFunc(key, func(s string) string { return strings.Repeat("` ", len(s)) })
	return key + "=" + strings.ReplaceAll(value, "`", "``")
}

// lookup is one question about a service, as Consul's DNS parses it.
type lookup struct {
	name       string // the question's name, letter case kept (owner of answers)
	qtype      uint16
	datacenter string // the datacenter label of the query, else the agent's
	domain     string // the domain as written in the question (Consul's respDomain)
}

// builder turns instances into records.
type builder struct {
	ttl          uint32
	aRecordLimit int  // dns_config.a_record_limit; 0 = no limit
	nodeMetaTXT  bool // dns_config.enable_additional_node_meta_txt
}

// records builds the answer and additional sections for q. ok is false when
// an instance's address is a host name: Consul then answers with a CNAME and
// its own recursive resolution, which this package leaves to Consul.
func (b builder) records(q lookup, instances []instance) (answer, extra []dns.RR, ok bool) {
	if q.qtype == dns.TypeSRV {
		return b.srvRecords(q, instances)
	}
	seen := map[string]bool{}
	count := 0
	for _, in := range instances {
		rrs, _, ok := b.instanceRecords(q, in)
		if !ok {
			return nil, nil, false
		}
		if len(rrs) == 0 {
			continue
		}
		// Two instances with the same address give one record.
		if key := rrs[0].String(); seen[key] {
			continue
		} else {
			seen[key] = true
		}
		answer = append(answer, rrs...)
		if count++; count == b.aRecordLimit {
			break
		}
	}
	return answer, nil, true
}

func (b builder) srvRecords(q lookup, instances []instance) (answer, extra []dns.RR, ok bool) {
	seen := map[string]bool{}
	for _, in := range instances {
		// One SRV record per node, address and port.
		svcAddr := translate(acceptAny, in.SvcAddr, in.SvcV4, in.SvcV6)
		key := fmt.Sprintf("%s:%s:%d", in.Node, svcAddr, in.Port)
		if seen[key] {
			continue
		}
		seen[key] = true
		rrs, add, ok := b.instanceRecords(q, in)
		if !ok {
			return nil, nil, false
		}
		answer = append(answer, rrs...)
		extra = append(extra, add...)
		if b.nodeMetaTXT {
			owner := nodeName(in.Node, q)
			for _, txt := range in.MetaTXT {
				extra = append(extra, &dns.TXT{Hdr: b.header(owner, dns.TypeTXT), Txt: []string{txt}})
			}
		}
	}
	return answer, extra, true
}

// Address families a query accepts (Consul's TranslateAddressAccept).
type accept int

const (
	acceptV4 accept = 1 << iota
	acceptV6
	acceptAny = acceptV4 | acceptV6
)

// translate is Consul's translateAddressAccept for the local datacenter: a
// tagged address of the wanted family, else the default address. (Consul
// tests "accept&Any > 0", true for every accept, so the default always wins
// over the family check that follows it there.)
func translate(a accept, def, v4, v6 string) string {
	switch {
	case a&acceptV6 != 0 && v6 != "":
		return v6
	case a&acceptV4 != 0 && v4 != "":
		return v4
	}
	return def
}

// instanceRecords is Consul's nodeServiceRecords for one instance.
func (b builder) instanceRecords(q lookup, in instance) (answer, extra []dns.RR, ok bool) {
	a := acceptAny
	switch q.qtype {
	case dns.TypeA:
		a = acceptV4
	case dns.TypeAAAA:
		a = acceptV6
	}
	svcAddr := translate(a, in.SvcAddr, in.SvcV4, in.SvcV6)
	nodeAddr := translate(a, in.NodeAddr, in.NodeV4, in.NodeV6)
	if svcAddr == "" && nodeAddr == "" {
		return nil, nil, true
	}
	nodeIP, svcIP := net.ParseIP(nodeAddr), net.ParseIP(svcAddr)
	switch {
	case svcAddr == "" && nodeIP != nil && in.NodeAddr != nodeAddr:
		// A tagged address stands in for the node's: named by address.
		answer, extra = b.fromIP(q, in, nodeIP)
	case svcAddr == "" && nodeIP != nil:
		answer, extra = b.fromNode(q, in, nodeIP)
	case svcIP != nil:
		answer, extra = b.fromIP(q, in, svcIP)
	case dns.Fqdn(svcAddr) == q.name && nodeIP != nil:
		answer, extra = b.fromNode(q, in, nodeIP)
	default:
		return nil, nil, false // a host name: Consul answers with a CNAME
	}
	return answer, extra, true
}

// fromNode: an SRV record targets <node>.node.<dc>.<domain>.
func (b builder) fromNode(q lookup, in instance, ip net.IP) (answer, extra []dns.RR) {
	return b.addressRecords(q, in, ip, nodeName(in.Node, q))
}

// fromIP: an SRV record targets <hex address>.addr.<dc>.<domain>.
func (b builder) fromIP(q lookup, in instance, ip net.IP) (answer, extra []dns.RR) {
	s := hex.EncodeToString(ip)
	if ip.To4() != nil {
		s = s[len(s)-net.IPv4len*2:]
	}
	return b.addressRecords(q, in, ip, s+".addr."+q.datacenter+"."+q.domain)
}

func (b builder) addressRecords(q lookup, in instance, ip net.IP, target string) (answer, extra []dns.RR) {
	if q.qtype != dns.TypeSRV {
		rr := b.address(q.name, q.qtype, ip)
		if rr == nil {
			return nil, nil
		}
		return []dns.RR{rr}, nil
	}
	srv := &dns.SRV{Hdr: b.header(q.name, dns.TypeSRV), Priority: 1,
		Weight: uint16(in.Weight), Port: uint16(in.Port), Target: target}
	return []dns.RR{srv}, []dns.RR{b.address(target, dns.TypeSRV, ip)}
}

// address is Consul's makeARecord: A for an IPv4 address, AAAA for IPv6, and
// nothing when the question asks for the other family.
func (b builder) address(owner string, qtype uint16, ip net.IP) dns.RR {
	if v4 := ip.To4(); v4 != nil {
		if qtype == dns.TypeA || qtype == dns.TypeSRV {
			return &dns.A{Hdr: b.header(owner, dns.TypeA), A: v4}
		}
		return nil
	}
	if qtype == dns.TypeAAAA || qtype == dns.TypeSRV {
		return &dns.AAAA{Hdr: b.header(owner, dns.TypeAAAA), AAAA: ip}
	}
	return nil
}

func (b builder) header(owner string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: rrtype, Class: dns.ClassINET, Ttl: b.ttl}
}

// soa is the authority record of a NODATA answer, as Consul's soa(): the
// agent's dns_config.soa timers, its minimum (the negative-caching TTL,
// RFC 2308) also the record's TTL, owned by the domain in lower case.
func soa(domain string, serial uint32, t soaTimers) *dns.SOA {
	return &dns.SOA{Hdr: dns.RR_Header{Name: domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: t.minttl},
		Ns: "ns." + domain, Mbox: "hostmaster." + domain, Serial: serial,
		Refresh: t.refresh, Retry: t.retry, Expire: t.expire, Minttl: t.minttl}
}

func nodeName(node string, q lookup) string {
	return node + ".node." + q.datacenter + "." + q.domain
}
