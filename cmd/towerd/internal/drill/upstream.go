package drill

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
	"github.com/towerd/towerd/resolver/dnslisten"
	"github.com/towerd/towerd/test/faultproxy"
)

// nameLabel sits between a generated name's number and its zone, so the
// names of zone "." do not fall into another configured zone.
const nameLabel = "towerd-drill"

// standIn is the loopback copy of one of the node's zones: an authoritative
// server of generated names under the zone, and one fault proxy in front of
// it for each server the node forwards the zone to, so towerd's retries
// across servers and their health work as on the node.
type standIn struct {
	zone     NodeZone
	names    []string
	upstream *upstream
	proxies  []*faultproxy.Proxy
}

// standIns are every zone's stand-ins; the drill switches their faults
// together.
type standIns []*standIn

// startStandIns starts one stand-in per zone. The names are shared out
// over the zones (at least one each) as nNNNNN.towerd-drill.<zone>, each
// with one A record from 10.0.0.0/8, distinct across zones, so a wrong or
// misrouted answer shows; want receives them.
func startStandIns(zones []NodeZone, names int, ttl time.Duration, f faultproxy.Faults, seed uint64, want map[string]string) (standIns, error) {
	var all standIns
	k := 0
	for zi, z := range zones {
		s := &standIn{zone: z}
		zoneWant := map[string]string{}
		suffix := nameLabel + "." + z.Name
		if z.Name == "." {
			suffix = nameLabel + "."
		}
		share := names / len(zones)
		if zi < names%len(zones) {
			share++
		}
		for i := range max(share, 1) {
			name := fmt.Sprintf("n%05d.%s", i, suffix)
			s.names = append(s.names, name)
			zoneWant[name] = fmt.Sprintf("10.%d.%d.%d", (k>>16)&255, (k>>8)&255, k&255)
			want[name] = zoneWant[name]
			k++
		}
		up, err := startUpstream(zoneWant, ttl)
		if err != nil {
			all.close()
			return nil, fmt.Errorf("zone %s: upstream: %w", z.Name, err)
		}
		s.upstream = up
		all = append(all, s)
		for range max(1, len(z.Servers)) {
			p, err := faultproxy.New(faultproxy.Options{Target: up.addr, Faults: f, Seed: seed + uint64(len(all.proxies()))})
			if err != nil {
				all.close()
				return nil, fmt.Errorf("zone %s: %w", z.Name, err)
			}
			s.proxies = append(s.proxies, p)
		}
	}
	return all, nil
}

// proxies lists every fault proxy, zone by zone.
func (all standIns) proxies() []*faultproxy.Proxy {
	var ps []*faultproxy.Proxy
	for _, s := range all {
		ps = append(ps, s.proxies...)
	}
	return ps
}

// forwardZones are the zones towerd forwards: each to its proxies.
func (all standIns) forwardZones() []config.ZoneConfig {
	var zs []config.ZoneConfig
	for _, s := range all {
		z := config.ZoneConfig{Name: s.zone.Name}
		for _, p := range s.proxies {
			z.Servers = append(z.Servers, p.Addr())
		}
		zs = append(zs, z)
	}
	return zs
}

// setBlackhole black-holes every proxy, or ends it.
func (all standIns) setBlackhole(on bool) {
	for _, p := range all.proxies() {
		p.SetBlackhole(on)
	}
}

// stats adds up what the proxies did.
func (all standIns) stats() faultproxy.Stats {
	var sum faultproxy.Stats
	for _, p := range all.proxies() {
		st := p.Stats()
		sum.Queries += st.Queries
		sum.Forwarded += st.Forwarded
		sum.LostQueries += st.LostQueries
		sum.LostReplies += st.LostReplies
		sum.ServFails += st.ServFails
		sum.Blackholed += st.Blackholed
	}
	return sum
}

func (all standIns) close() {
	for _, s := range all {
		for _, p := range s.proxies {
			p.Close()
		}
		if s.upstream != nil {
			s.upstream.close()
		}
	}
}

// upstream is the loopback authoritative server of one zone's names.
type upstream struct {
	addr    string
	servers []*dns.Server
}

func startUpstream(want map[string]string, ttl time.Duration) (*upstream, error) {
	pc, ln, err := dnslisten.Pair("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
		} else if addr, ok := want[dns.CanonicalName(r.Question[0].Name)]; !ok {
			m.Rcode = dns.RcodeNameError
		} else if r.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: uint32(ttl / time.Second)},
				A:   net.ParseIP(addr),
			}}
		}
		_ = w.WriteMsg(m)
	})
	u := &upstream{addr: pc.LocalAddr().String()}
	u.servers = []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	}
	var started sync.WaitGroup
	for _, s := range u.servers {
		started.Add(1)
		s.NotifyStartedFunc = started.Done
		go func() { _ = s.ActivateAndServe() }()
	}
	started.Wait()
	return u, nil
}

func (u *upstream) close() {
	for _, s := range u.servers {
		_ = s.Shutdown()
	}
}
