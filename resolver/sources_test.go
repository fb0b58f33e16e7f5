package resolver

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/resolver/local"
)

type sourceLog struct {
	mu      sync.Mutex
	sources []string
}

func (l *sourceLog) ObserveQuery(q Query) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sources = append(l.sources, q.Source+"/"+dns.RcodeToString[q.Rcode])
}

// A Chain asks its sources in order and names the one that answered;
// local answers, NXDOMAIN included, are answers and never enter the cache.
func TestChainAnswersInOrderWithLabels(t *testing.T) {
	obs := &sourceLog{}
	chain := Chain{{RecordSource: diffLocal, Label: SourceLocal}, {RecordSource: diffRecords{}, Label: SourceRecords}}
	h, _ := diffHandlerWith(t, obs, func(c *Config) { c.Records = chain })
	for _, q := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"printer.lan.", dns.TypeA, "local/NOERROR"},
		{"foo.", dns.TypeA, "local/NXDOMAIN"},
		{"6.1.168.192.in-addr.arpa.", dns.TypePTR, "local/NXDOMAIN"},
		{"5.1.168.192.in-addr.arpa.", dns.TypePTR, "local/NOERROR"}, // from the A record
		{"web.service.consul.", dns.TypeA, "consul/NOERROR"},
		{"foo.", dns.TypeMX, "upstream/NOERROR"}, // domain_needed keeps A and AAAA only
	} {
		obs.sources = nil
		pkt := variant{name: q.name, qtype: q.qtype, edns: true, size: 1232}.pack(t)
		reply := new(dns.Msg)
		if err := reply.Unpack(generalReply(h, pkt)); err != nil {
			t.Fatal(err)
		}
		if len(obs.sources) != 1 || obs.sources[0] != q.want {
			t.Errorf("%s %s: observed %q, want %q", q.name, dns.TypeToString[q.qtype], obs.sources, q.want)
		}
	}
	if !chain.Covers([]byte("printer.lan.")) || !chain.Covers([]byte("db.service.consul.")) || chain.Covers([]byte("www.example.")) {
		t.Error("a Chain covers the union of its sources' names, and nothing else")
	}
	// Only the forwarded question (foo. MX) reached the cache.
	if n := h.cache.Len(); n != 1 {
		t.Errorf("the cache holds %d entries, want 1: local and pushed answers are not cached", n)
	}
}

// BenchmarkAnswerPacketHitLocalChain is BenchmarkAnswerPacketHit with the
// daemon's Records: local data of 10,000 hosts names with domain_needed and
// bogus_priv, then a pushed source. Covers runs on every packet: the
// target stays 0 allocations.
func BenchmarkAnswerPacketHitLocalChain(b *testing.B) {
	var hosts strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&hosts, "10.%d.%d.1 host%d.lan host%d\n", i/256, i%256, i, i)
	}
	path := filepath.Join(b.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(hosts.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	src, err := local.New(local.Options{HostsFiles: []string{path}, DomainNeeded: true, BogusPriv: true,
		Addresses: []local.Address{{Domain: "ads.test.", Addrs: []netip.Addr{netip.MustParseAddr("0.0.0.0")}}}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h, _ := diffHandlerWith(b, m, func(c *Config) {
		c.Records = Chain{{RecordSource: src, Label: SourceLocal}, {RecordSource: diffRecords{}, Label: SourceRecords}}
	})
	benchHit(b, h)
}
