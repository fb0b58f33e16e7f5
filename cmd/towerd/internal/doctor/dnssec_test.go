package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/test/dnstest"
)

// dnssecServer answers DNSKEY and DS questions, with an RRSIG over each
// unless it strips them (its signatures need not verify: doctor looks
// for their presence, as a path that strips them removes them).
func dnssecServer(t *testing.T, strip bool) string {
	t.Helper()
	pc, l := dnstest.ListenPair(t)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		name, qtype := q.Question[0].Name, q.Question[0].Qtype
		var rrs []dns.RR
		switch qtype {
		case dns.TypeDNSKEY:
			rrs = append(rrs, &dns.DNSKEY{Hdr: dns.RR_Header{Name: name, Rrtype: qtype, Class: dns.ClassINET, Ttl: 300},
				Flags: 257, Protocol: 3, Algorithm: dns.ED25519, PublicKey: "AAAA"})
		case dns.TypeDS:
			rrs = append(rrs, &dns.DS{Hdr: dns.RR_Header{Name: name, Rrtype: qtype, Class: dns.ClassINET, Ttl: 300},
				KeyTag: 1, Algorithm: dns.ED25519, DigestType: dns.SHA256, Digest: strings.Repeat("00", 32)})
		}
		if len(rrs) > 0 && !strip {
			rrs = append(rrs, &dns.RRSIG{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeRRSIG, Class: dns.ClassINET, Ttl: 300},
				TypeCovered: qtype, Algorithm: dns.ED25519, SignerName: ".", Signature: "AAAA"})
		}
		r.Answer = rrs
		_ = w.WriteMsg(r)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// TestDNSSECPath: a server of zone "." that passes signatures is no
// finding; one that strips them is a warning in audit and a problem in
// enforce; one that does not answer says so.
func TestDNSSECPath(t *testing.T) {
	t.Parallel()
	anchors := filepath.Join(t.TempDir(), "root.ds")
	if err := os.WriteFile(anchors, []byte(". 300 IN DS 1 15 2 "+strings.Repeat("00", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good, stripping := dnssecServer(t, false), dnssecServer(t, true)
	dead := dnstest.NewUpstream(t)
	dead.Stop()
	for _, mode := range []string{"audit", "enforce"} {
		cfg := config.DefaultConfig()
		cfg.DNSSEC.Mode, cfg.DNSSEC.TrustAnchorFile = mode, anchors
		cfg.Zones = []config.ZoneConfig{{Name: ".", Servers: []string{good, stripping, dead.Addr}}}
		n := &Node{DNSSECPath: readDNSSECPath(context.Background(), cfg, 500*time.Millisecond)}
		if len(n.DNSSECPath) != 3 {
			t.Fatalf("%s: probed %d servers, want 3", mode, len(n.DNSSECPath))
		}
		sev := "warning"
		if mode == "enforce" {
			sev = "problem"
		}
		r := Report{Findings: checkDNSSECPath(n)}
		expectFindings(t, r, "towerd-dnssec-path:"+sev, "towerd-dnssec-path:"+sev)
		var saw []string
		for _, f := range r.Findings {
			saw = append(saw, f.Saw)
		}
		all := strings.Join(saw, "\n")
		if !strings.Contains(all, stripping+": DNSKEY answered without signatures") || !strings.Contains(all, dead.Addr+": no answer") {
			t.Errorf("%s: saw\n%s", mode, all)
		}
		if strings.Contains(all, good) {
			t.Errorf("%s: the server that passes signatures is reported:\n%s", mode, all)
		}
	}
}
