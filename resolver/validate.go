package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnssec"
	"github.com/towerd/towerd/upstream"
)

// DNSSEC validation on the miss path (issue 39, docs/resolving.md
// "DNSSEC"). One hook: a flight whose question is validated (dnssecFor)
// asks its upstream with DO (and, in enforce, CD: a site resolver then
// passes bogus data through instead of hiding it as SERVFAIL), and its
// reply goes to a worker goroutine, where the validator may fetch DS and
// DNSKEY records through the zone's upstreams, before settle: the verdict
// travels in the cache entry (AD), so a validated hit costs what any hit
// costs. A bogus answer in enforce is a failed resolution: never cached,
// answered SERVFAIL with the verdict's Extended DNS Error.

// DNSSECMode is [dnssec] mode.
type DNSSECMode uint8

const (
	// DNSSECOff: nothing validated; DO, CD and AD pass through as before.
	DNSSECOff DNSSECMode = iota
	// DNSSECAudit: answers unchanged; every verdict counted, bogus logged.
	DNSSECAudit
	// DNSSECEnforce: bogus answers refused (SERVFAIL with EDE), secure
	// ones carry AD.
	DNSSECEnforce
)

// DNSSECConfig is validation's share of Config.
type DNSSECConfig struct {
	Mode DNSSECMode
	// Anchors are the trust anchors' DS or DNSKEY records.
	Anchors []dns.RR
	// NegativeAnchors: names nothing at or below is validated; every
	// configured zone other than "." is one as well (its servers are a
	// private namespace's: consul., site zones).
	NegativeAnchors []string
	// CacheSize, Limits: the validator's key cache and work per question
	// (dnssec.Config).
	CacheSize int
	Limits    dnssec.Limits
}

// newValidator is cfg's validator over the zones of r, nil when off.
func newValidator(cfg Config, r *router) (*dnssec.Validator, error) {
	d := cfg.DNSSEC
	if d.Mode == DNSSECOff {
		return nil, nil
	}
	negative := append([]string(nil), d.NegativeAnchors...)
	for _, z := range cfg.Zones {
		if dns.CanonicalName(z.Name) != "." {
			negative = append(negative, z.Name)
		}
	}
	return dnssec.New(dnssec.Config{
		Anchors: d.Anchors, NegativeAnchors: negative, CacheSize: d.CacheSize, Limits: d.Limits,
		Fetch: func(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
			return fetchDNSSEC(ctx, r.route(name), name, qtype)
		},
	})
}

// fetchDNSSEC asks zone's upstreams for a DS or DNSKEY RRset, with DO and
// CD, as the validator needs it.
func fetchDNSSEC(ctx context.Context, zone Zone, name string, qtype uint16) (*dns.Msg, error) {
	key := cache.Key{Name: dns.CanonicalName(name), Type: qtype, Class: dns.ClassINET, DO: true, CD: true}
	deadline, _ := ctx.Deadline()
	wr, err := upstream.Wait(zone.Upstream, upstream.WireQuery{Ctx: ctx, Packed: appendUpstreamQuery(nil, key),
		Deadline: deadline, Below: zone.below})
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	if err := m.Unpack(wr.Raw); err != nil {
		return nil, fmt.Errorf("unpacking %s %s: %w", name, dns.TypeToString[qtype], err)
	}
	return m, nil
}

// validates reports whether key's answer is validated: a mode other than
// off, a client that did not set CD, a name an anchor covers and no
// negative anchor does.
func (s *settings) validates(key cache.Key) bool {
	return s.validator != nil && !key.CD && s.validator.Covers(key.Name)
}

// upstreamKey is the question the upstream is asked for key: a validated
// one with DO (signatures and proofs) and, in enforce, CD.
func (s *settings) upstreamKey(key cache.Key, validate bool) cache.Key {
	if validate {
		key.DO = true
		key.CD = s.DNSSEC.Mode == DNSSECEnforce
	}
	return key
}

// BogusError is a resolution whose answer failed validation in enforce.
type BogusError struct{ Result dnssec.Result }

func (e *BogusError) Error() string { return "DNSSEC bogus: " + e.Result.Reason }

// bogusEDE is the Extended DNS Error of a failure, 0 unless it is bogus.
func bogusEDE(err error) uint16 {
	var b *BogusError
	if errors.As(err, &b) {
		return b.Result.EDE
	}
	return 0
}

// validated judges raw, the reply for key, and returns what settle gets:
// in enforce, AD set as the verdict says, or a BogusError; in audit the
// reply as it came. Either way a client without DO gets no signatures or
// proofs it did not ask for (RFC 4035 §3.2.1): towerd asked with DO.
func (h *Handler) validated(ctx context.Context, s *settings, key cache.Key, raw []byte) ([]byte, error) {
	m := new(dns.Msg)
	if err := m.Unpack(raw); err != nil {
		return raw, nil // the entry builder refuses it as it would anyway
	}
	r := s.validator.Validate(ctx, key.Name, key.Type, m)
	h.countVerdict(s, key, r)
	if s.DNSSEC.Mode == DNSSECEnforce {
		if r.Verdict == dnssec.Bogus {
			return nil, &BogusError{r}
		}
		m.AuthenticatedData = r.Verdict == dnssec.Secure
		if r.Verdict == dnssec.Secure && r.TTL > 0 {
			capTTL(m.Answer, r.TTL)
			capTTL(m.Ns, r.TTL)
		}
	}
	if !key.DO {
		m.Answer = withoutDNSSEC(m.Answer, key.Type)
		m.Ns = withoutDNSSEC(m.Ns, key.Type)
	}
	m.Compress = true
	return m.Pack()
}

// capTTL lowers every TTL of rrs to at most ttl: a secure answer is not
// kept as one past its signatures (RFC 4035 §5.3.3).
func capTTL(rrs []dns.RR, ttl uint32) {
	for _, rr := range rrs {
		if h := rr.Header(); h.Ttl > ttl {
			h.Ttl = ttl
		}
	}
}

// withoutDNSSEC drops the RRSIG, NSEC and NSEC3 records of a section,
// but not those of the type asked.
func withoutDNSSEC(rrs []dns.RR, qtype uint16) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		switch t := rr.Header().Rrtype; t {
		case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3:
			if t != qtype {
				continue
			}
		}
		out = append(out, rr)
	}
	return out
}

// dnssecStats counts verdicts for towerd_dnssec_verdicts_total.
type dnssecStats struct {
	secure, insecure, bogus atomic.Uint64
	bogusLines              lineRate
}

// bogusLogRate is the most bogus-answer log lines a second: a forged
// flood must not flood the journal.
const bogusLogRate = 5

func (h *Handler) countVerdict(s *settings, key cache.Key, r dnssec.Result) {
	st := &h.dnssecStats
	switch r.Verdict {
	case dnssec.Secure:
		st.secure.Add(1)
	case dnssec.Insecure:
		st.insecure.Add(1)
	case dnssec.Bogus:
		st.bogus.Add(1)
		if st.bogusLines.take(s.Now(), bogusLogRate) {
			h.log.Warn("DNSSEC bogus answer", "name", key.Name, "type", dns.TypeToString[key.Type],
				"ede", r.EDE, "reason", r.Reason, "refused", s.DNSSEC.Mode == DNSSECEnforce)
		}
	}
}

// dnssecCollector exposes the verdicts at scrape time.
type dnssecCollector struct{ h *Handler }

var dnssecVerdictsDesc = prometheus.NewDesc("towerd_dnssec_verdicts_total",
	"Answers validated (dnssec.mode audit or enforce), by verdict: secure, insecure (unsigned, or no anchor covers the name), bogus (refused in enforce, answered in audit).",
	[]string{"verdict"}, nil)

func (c dnssecCollector) Describe(ch chan<- *prometheus.Desc) { ch <- dnssecVerdictsDesc }

func (c dnssecCollector) Collect(ch chan<- prometheus.Metric) {
	st := &c.h.dnssecStats
	for _, v := range []struct {
		name string
		n    *atomic.Uint64
	}{{"secure", &st.secure}, {"insecure", &st.insecure}, {"bogus", &st.bogus}} {
		ch <- prometheus.MustNewConstMetric(dnssecVerdictsDesc, prometheus.CounterValue, float64(v.n.Load()), v.name)
	}
}
