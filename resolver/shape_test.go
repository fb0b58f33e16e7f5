package resolver

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// TestFirstAnswerLikeCacheHit: the client's first answer (from upstream)
// carries the TTLs a later hit shows (issue 11, one reply shape), for
// huge TTLs, a TTL with the top bit set (RFC 2181 §8: 0) and NODATA's SOA
// (RFC 2308: min(TTL, MINIMUM)), over UDP and TCP.
func TestFirstAnswerLikeCacheHit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		qtype   uint16
		answer  []string
		ns      []string
		wantTTL uint32
	}{
		{"A 2147483647", dns.TypeA, []string{"big.example. 2147483647 IN A 192.0.2.1"}, nil, 86400},
		{"A 4294967280", dns.TypeA, []string{"big.example. 4294967280 IN A 192.0.2.1"}, nil, 0},
		{"NODATA SOA", dns.TypeAAAA, nil, []string{"example. 3600 IN SOA ns.example. h.example. 1 3600 600 86400 30"}, 30},
	} {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(tc.name+"/"+network, func(t *testing.T) {
				e := newZonesEnv(t, map[string]dns.HandlerFunc{".": answerWith(t, dns.RcodeSuccess, tc.answer, tc.ns...)},
					cache.Config{MaxTTL: 24 * time.Hour, MaxStaleAge: time.Hour}, nil)
				m := new(dns.Msg)
				m.SetQuestion("big.example.", tc.qtype)
				m.SetEdns0(1232, false)
				first, _ := e.exchange(t, network, m)
				e.clock.Advance(300 * time.Millisecond) // within the second: the same TTLs
				second, _ := e.exchange(t, network, m)
				for i, r := range []*dns.Msg{first, second} {
					rrs := append(append([]dns.RR(nil), r.Answer...), r.Ns...)
					if len(rrs) == 0 {
						t.Fatalf("answer %d empty: %v", i+1, r)
					}
					for _, rr := range rrs {
						if rr.Header().Ttl != tc.wantTTL {
							t.Errorf("answer %d: %v has TTL %d, want %d", i+1, rr, rr.Header().Ttl, tc.wantTTL)
						}
					}
				}
			})
		}
	}
}

// TestFirstAnswerCompressedLikeHit: the miss's answer has the bytes of the
// hit's (names compressed on every path), over UDP and TCP.
func TestFirstAnswerCompressedLikeHit(t *testing.T) {
	e := newZonesEnv(t, map[string]dns.HandlerFunc{".": func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for i := range 12 {
			m.Answer = append(m.Answer, mustRRs(t, fmt.Sprintf("%s 300 IN A 192.0.2.%d", r.Question[0].Name, i+1))...)
		}
		w.WriteMsg(m)
	}}, cache.Config{MaxStaleAge: time.Hour}, nil)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(network+".many.records.example.", dns.TypeA)
			_, missSize := e.exchange(t, network, m)
			hit, hitSize := e.exchange(t, network, m)
			uncompressed := hit.Copy()
			uncompressed.Compress = false
			plain, _ := uncompressed.Pack()
			if missSize != hitSize || missSize >= len(plain) {
				t.Fatalf("miss %d bytes, hit %d bytes, uncompressed %d: want miss = hit < uncompressed", missSize, hitSize, len(plain))
			}
		})
	}
}

// TestADForwardedUpstream: a query with AD and no DO (glibc's trust-ad)
// reaches the upstream with AD=1 (RFC 6840 §5.7), and the client gets the
// upstream's AD; a client that asked with neither AD nor DO does not.
func TestADForwardedUpstream(t *testing.T) {
	var sawAD, sawDO atomic.Int32
	e := newZonesEnv(t, map[string]dns.HandlerFunc{".": func(w dns.ResponseWriter, r *dns.Msg) {
		if r.AuthenticatedData {
			sawAD.Add(1)
		}
		if opt := r.IsEdns0(); opt != nil && opt.Do() {
			sawDO.Add(1)
		}
		m := new(dns.Msg)
		m.SetReply(r)
		m.AuthenticatedData = r.AuthenticatedData // a validating upstream
		m.Answer = mustRRs(t, r.Question[0].Name+" 300 IN A 192.0.2.1")
		w.WriteMsg(m)
	}}, cache.Config{MaxStaleAge: time.Hour}, nil)

	m := new(dns.Msg)
	m.SetQuestion("signed.example.", dns.TypeA)
	m.AuthenticatedData = true
	r, _ := e.exchange(t, "udp", m)
	if sawAD.Load() != 1 || sawDO.Load() != 0 {
		t.Fatalf("upstream saw AD %d times, DO %d times; want AD once, no DO", sawAD.Load(), sawDO.Load())
	}
	if !r.AuthenticatedData {
		t.Error("client that asked with AD did not get the upstream's AD")
	}
	m.AuthenticatedData = false
	if r, _ := e.exchange(t, "udp", m); r.AuthenticatedData {
		t.Error("client that asked with neither AD nor DO got AD (RFC 6840 §5.8)")
	}
}
