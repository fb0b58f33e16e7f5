package doctor

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// dnssecPath is what one server of zone "." answered doctor's DNSSEC
// probes (issue 39), asked as towerd's validator asks, with DO and CD:
// the trust anchor's DNSKEY set must come with its signatures, and a DS
// question (com.'s under the root anchor) with a signed DS set or a
// signed denial. A server that strips either makes every signed name
// bogus once dnssec.mode is enforce.
type dnssecPath struct {
	Server string
	Mode   string // dnssec.mode
	// Err: the server did not answer the DNSKEY question.
	Err error
	// Signed: the DNSKEY set came with an RRSIG; DS: the DS question was
	// answered with signatures (DSName "" = not asked).
	Signed, DS bool
	DSName     string
}

// maxDNSSECChecks bounds the servers doctor probes: zone "." may list
// many, and doctor must end.
const maxDNSSECChecks = 4

// readDNSSECPath probes the plain DNS servers of zone ".", each question
// within timeout.
func readDNSSECPath(ctx context.Context, cfg config.Config, timeout time.Duration) []dnssecPath {
	anchor := "."
	if rrs, err := cfg.DNSSEC.ReadAnchors(); err == nil {
		anchor = dns.CanonicalName(rrs[0].Header().Name)
	}
	dsName := ""
	if anchor == "." {
		dsName = "com." // signed by the root, with a DS set of its own
	}
	var out []dnssecPath
	for _, z := range cfg.MergedZones() {
		if dns.CanonicalName(z.Name) != "." {
			continue
		}
		for _, s := range z.Servers {
			if strings.Contains(s, "://") || len(out) == maxDNSSECChecks {
				continue
			}
			out = append(out, probeDNSSEC(ctx, s, anchor, dsName, cfg.DNSSEC.Mode, timeout))
		}
	}
	return out
}

func probeDNSSEC(ctx context.Context, server, anchor, dsName, mode string, timeout time.Duration) dnssecPath {
	p := dnssecPath{Server: server, Mode: mode, DSName: dsName}
	addr := server
	if _, _, err := net.SplitHostPort(server); err != nil {
		addr = net.JoinHostPort(strings.Trim(server, "[]"), "53")
	}
	keys, err := askDNSSEC(ctx, addr, anchor, dns.TypeDNSKEY, timeout)
	if err != nil {
		p.Err = err
		return p
	}
	p.Signed = signs(keys.Answer, dns.TypeDNSKEY)
	if dsName != "" {
		if ds, err := askDNSSEC(ctx, addr, dsName, dns.TypeDS, timeout); err == nil {
			p.DS = signs(ds.Answer, dns.TypeDS) || signs(ds.Ns, dns.TypeNSEC) || signs(ds.Ns, dns.TypeNSEC3)
		}
	}
	return p
}

// askDNSSEC asks name and qtype with DO and CD, over TCP when the UDP
// reply is truncated.
func askDNSSEC(ctx context.Context, addr, name string, qtype uint16, timeout time.Duration) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, true)
	m.CheckingDisabled = true
	c := &dns.Client{Timeout: timeout, UDPSize: 1232}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, addr)
	}
	if err == nil && r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		err = errors.New("answered " + dns.RcodeToString[r.Rcode])
	}
	return r, err
}

// signs reports whether section carries an RRSIG over type t.
func signs(section []dns.RR, t uint16) bool {
	for _, rr := range section {
		if s, ok := rr.(*dns.RRSIG); ok && s.TypeCovered == t {
			return true
		}
	}
	return false
}

// checkDNSSECPath reports servers of zone "." through which validation
// cannot work: a problem with dnssec.mode enforce (every signed name is
// then bogus), a warning before.
func checkDNSSECPath(n *Node) []Finding {
	var out []Finding
	for _, p := range n.DNSSECPath {
		sev := Warning
		if p.Mode == "enforce" {
			sev = Problem
		}
		switch {
		case p.Err != nil:
			out = append(out, newFinding("towerd-dnssec-path", sev, "zone ., %s: no answer to a DNSKEY question with DO: %s", p.Server, oneLineErr(p.Err)))
		case !p.Signed:
			out = append(out, newFinding("towerd-dnssec-path", sev, "zone ., %s: DNSKEY answered without signatures (DO set): it strips RRSIGs", p.Server))
		case p.DSName != "" && !p.DS:
			out = append(out, newFinding("towerd-dnssec-path", sev, "zone ., %s: %s DS answered without signatures", p.Server, p.DSName))
		}
	}
	return out
}
