package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/faultproxy"
)

// consulForm is one question form of the differential test.
type consulForm struct {
	name  string
	qtype uint16
	// watched: the watch answers it from memory (a service of the pinned
	// set, type A, AAAA or SRV, local datacenter); else it is forwarded to
	// the agent's DNS on every path.
	watched bool
	// trimmed: the agent's UDP answer is cut to fit 1232 bytes, keeping
	// a shuffled subset of the records: compared by count and shape.
	trimmed bool
}

func (f consulForm) String() string { return f.name + " " + dns.TypeToString[f.qtype] }

// consulForms are the question forms asked on every path: services
// tagged and not, RFC 2782, the datacenter forms, a node, a prepared
// query, a service whose instances are all critical, missing names and
// tags, upper and mixed case, and the types the watch does not keep.
func consulForms(node string) []consulForm {
	return []consulForm{
		{"web.service.consul.", dns.TypeA, true, false},
		{"web.service.consul.", dns.TypeAAAA, true, false}, // NODATA: no IPv6 instance
		{"web.service.consul.", dns.TypeSRV, true, false},
		{"web.service.consul.", dns.TypeTXT, false, false},
		{"web.service.consul.", dns.TypeANY, false, false},
		{"web.service.consul.", dns.TypeMX, false, false},
		{"v1.web.service.consul.", dns.TypeA, true, false},
		{"primary.web.service.consul.", dns.TypeSRV, true, false},
		{"_web._v1.service.consul.", dns.TypeSRV, true, false},
		{"_web._tcp.service.consul.", dns.TypeSRV, true, false},
		{"web.service.dc1.consul.", dns.TypeA, true, false},
		{"web.service.dc1.consul.", dns.TypeSRV, true, false},
		{"db.service.consul.", dns.TypeAAAA, true, false},
		{"db.service.consul.", dns.TypeA, true, false}, // NODATA: no IPv4 instance
		{"big.service.consul.", dns.TypeA, true, false},
		{"big.service.consul.", dns.TypeSRV, true, true}, // trimmed by the agent to 1232 bytes
		{node + ".node.consul.", dns.TypeA, false, false},
		{node + ".node.consul.", dns.TypeTXT, false, false},
		{"webq.query.consul.", dns.TypeA, false, false},
		{"webq.query.consul.", dns.TypeSRV, false, false},
		{"crit.service.consul.", dns.TypeA, false, false}, // all critical: NXDOMAIN
		{"nope.service.consul.", dns.TypeA, false, false}, // no such service: NXDOMAIN
		{"nope.web.service.consul.", dns.TypeA, false, false},
		{"WEB.SERVICE.CONSUL.", dns.TypeA, true, false},
		{"Web.Service.Consul.", dns.TypeSRV, true, false},
		{"Web.Service.DC1.Consul.", dns.TypeSRV, true, false},
	}
}

// TestConsulAnswersOnEveryPath is the differential test of issue 23: a
// real agent with node meta and the question forms above, each asked on
// every path towerd answers by — forwarded to the agent's DNS (a towerd
// without the watch), watched (a towerd with the services pinned), from
// the cache, and stale with the agent stopped; and on the general path
// (ServeDNS) and over TCP — and compared record for record with the
// agent's own answer to the same question, and byte for byte, names in
// their letter case, with the same question's answer on every other path
// (issue 34: the byte path's answers are ServeDNS's; wireForm says what
// may differ: the ID, TTLs, the stale EDE, a shuffle's order). Once with
// Consul's default TTL 0, once with dns_config.service_ttl and node_ttl
// at 2 s, so that the cache answers too.
func TestConsulAnswersOnEveryPath(t *testing.T) {
	t.Parallel()
	for _, ttl := range []uint32{0, 2} {
		t.Run(fmt.Sprintf("ttl=%ds", ttl), func(t *testing.T) {
			t.Parallel()
			consulPaths(t, ttl)
		})
	}
}

func consulPaths(t *testing.T, ttl uint32) {
	const node = "Site-Node"
	agent := consultest.Start(t, consultest.Options{Node: node, HCL: []string{
		`node_meta { rack = "r1" zone = "z9" }`,
		fmt.Sprintf(`dns_config { service_ttl { "*" = "%ds" } node_ttl = "%ds" }`, ttl, ttl),
	}})
	c := agent.Client("")
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Tags: []string{"primary", "v1"},
		Address: "127.0.0.10", Port: 8080, Weights: &api.AgentWeights{Passing: 5, Warning: 1}})
	register(t, c, &api.AgentServiceRegistration{ID: "web2", Name: "web", Tags: []string{"v1"}, Port: 8081})
	register(t, c, &api.AgentServiceRegistration{ID: "db1", Name: "db", Address: "::1", Port: 5432})
	register(t, c, &api.AgentServiceRegistration{ID: "crit1", Name: "crit", Port: 9,
		Check: &api.AgentServiceCheck{TTL: "10m", Status: api.HealthCritical}})
	for i := range 25 {
		register(t, c, &api.AgentServiceRegistration{ID: fmt.Sprintf("big%d", i), Name: "big",
			Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8000 + i})
	}
	if _, _, err := c.PreparedQuery().Create(&api.PreparedQueryDefinition{Name: "webq",
		Service: api.ServiceQuery{Service: "web"}}, nil); err != nil {
		t.Fatalf("creating the prepared query: %v", err)
	}
	forms := consulForms(node)

	// The agent's own answers, asked at its DNS directly.
	own := map[string]*dns.Msg{}
	for _, f := range forms {
		m, err := ask(agent.DNSAddr, f.name, f.qtype)
		if err != nil {
			t.Fatalf("%v from the agent: %v", f, err)
		}
		own[f.String()] = m
	}
	// The whole of a trimmed answer, over TCP, where the agent cuts
	// nothing.
	whole := map[string]*dns.Msg{}
	for _, f := range forms {
		if f.trimmed {
			whole[f.String()] = mustExchange(t, agent.DNSAddr, "tcp", query(f.name, f.qtype, true))
		}
	}
	if m := own["crit.service.consul. A"]; m.Rcode != dns.RcodeNameError {
		t.Fatalf("the agent answers the all-critical service %v; the catalog is not as registered", m)
	}

	// Two towerds, each with the fault proxy (a transparent one, counting
	// names) in front of the agent's DNS: one forwards everything, one
	// watches the services.
	proxyF := startConsulDNSProxy(t, agent.DNSAddr, faultproxy.Faults{}, 1)
	proxyW := startConsulDNSProxy(t, agent.DNSAddr, faultproxy.Faults{}, 2)
	fwd := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0", "-upstream", deadPort(t), "-consul-dns", proxyF.Addr())
	watched := startConsulTowerd(t, agent, proxyW.Addr(), "-config", writeConfig(t, "[consul]\n"+pins("web", "db", "big", "crit")))

	// spelling is each case form's first answer, which every path must
	// spell alike.
	spelling := map[string]*dns.Msg{}
	// check asks d f and compares its answer with the agent's, shaped
	// for the path; with countdown, towerd's TTLs may be anything up to
	// the shaped ones (a cache hit counts down) and are compared no
	// further.
	// bytesOf is each form's first reply reduced to its bytes (wireForm),
	// and the path it came by: every other path's must be the same bytes.
	type firstBytes struct {
		path string
		form wireForm
	}
	bytesOf := map[string]firstBytes{}
	// sameBytes compares reply, d's answer to f by path, with f's first
	// reply on any path, byte for byte (wireForm.differs).
	sameBytes := func(path string, f consulForm, reply []byte) {
		t.Helper()
		form, err := wireFormOf(reply)
		if err != nil {
			t.Errorf("%s: %v: unreadable reply: %v", path, f, err)
			return
		}
		first, ok := bytesOf[f.String()]
		if !ok {
			bytesOf[f.String()] = firstBytes{path, form}
			return
		}
		if d := first.form.differs(form, f.trimmed); d != "" {
			t.Errorf("%s: %v: not the bytes of the %s answer: %s", path, f, first.path, d)
		}
	}
	// askBytes asks d f by path over network (a generalQuery when
	// general) and returns the reply, its bytes compared by sameBytes.
	askBytes := func(path string, d *towerd, f consulForm, network string, general bool) *dns.Msg {
		t.Helper()
		q, addr := query(f.name, f.qtype, true), d.UDP
		if general {
			q = generalQuery(f.name, f.qtype)
		}
		if network == "tcp" {
			addr = d.TCP
		}
		reply, err := askWire(addr, network, q)
		if err != nil {
			t.Errorf("%s: %v: %v", path, f, err)
			return nil
		}
		got := new(dns.Msg)
		if err := got.Unpack(reply); err != nil {
			t.Errorf("%s: %v: %v", path, f, err)
			return nil
		}
		if network == "udp" || !f.trimmed { // over TCP the agent cuts nothing
			sameBytes(path, f, reply)
		}
		return got
	}
	// others asks d f on the general path and over TCP: the same bytes
	// as every other path's, from the same cache entry or watched set.
	others := func(path string, d *towerd, f consulForm) {
		t.Helper()
		askBytes(path+", general path", d, f, "udp", true)
		askBytes(path+", TCP", d, f, "tcp", false)
	}
	check := func(path string, d *towerd, f consulForm, shape func(*dns.Msg) *dns.Msg, countdown, stale bool) {
		t.Helper()
		got := askBytes(path, d, f, "udp", false)
		if got == nil {
			return
		}
		want, all := shape(own[f.String()]), whole[f.String()]
		if all != nil {
			all = shape(all)
		}
		if countdown {
			if most := maxTTL(got); most > maxTTL(want) {
				t.Errorf("%s: %v: TTL %d above the agent's %d", path, f, most, maxTTL(want))
			}
			got, want = withTTLs(got, 0), withTTLs(want, 0)
			if all != nil {
				all = withTTLs(all, 0)
			}
		}
		if !got.RecursionAvailable || got.Authoritative {
			t.Errorf("%s: %v: flags ra=%v aa=%v, want ra and not aa on every path", path, f, got.RecursionAvailable, got.Authoritative)
		}
		if got.Truncated {
			t.Errorf("%s: %v: TC set; the agent trims its answer to fit instead", path, f)
		}
		g, w := recordsOf(got), recordsOf(want)
		if f.name != strings.ToLower(f.name) {
			// Spelled for the client: the names DNS compression points
			// into the question as it asked, the rest as the agent wrote
			// them for towerd's lower-case question; the same on every
			// path (compared below), the records the agent's.
			if !ownersAre(got, f.name) {
				t.Errorf("%s: %v: answer owners not spelled as asked: %v", path, f, got.Answer)
			}
			if first, ok := spelling[f.String()]; !ok {
				spelling[f.String()] = got
			} else if a, b := recordsOf(withTTLs(first, 0)), recordsOf(withTTLs(got, 0)); !a.equal(b) {
				t.Errorf("%s: %v: spelled otherwise than on the first path:\nnow   %v\nfirst %v", path, f, b, a)
			}
			g, w = g.folded(), w.folded()
		}
		if f.trimmed {
			if err := sameTrim(got, want, all); err != nil {
				t.Errorf("%s: %v: %v", path, f, err)
			}
		} else if !g.equal(w) {
			t.Errorf("%s: %v:\ntowerd %v\nagent  %v", path, f, g, w)
		}
		if isStale := slices.Contains(ede(got), edeStaleAnswer); isStale != stale {
			t.Errorf("%s: %v: EDE %v, want stale=%v", path, f, ede(got), stale)
		}
	}
	same := func(m *dns.Msg) *dns.Msg { return m }

	for _, f := range forms {
		check("forwarded", fwd, f, same, false, false)
		check("watched", watched, f, same, false, false)
		others("watched", watched, f)
	}
	// A client without EDNS: the agent cuts to udp_answer_limit (3)
	// records without TC, and so does towerd on every path (here, and
	// cached and stale below), each answer a shuffled subset: compared
	// with the agent's by count and record, and with every other path's
	// by its header and question bytes.
	cutForms := []consulForm{{"big.service.consul.", dns.TypeA, true, true}, {"big.service.consul.", dns.TypeSRV, true, true}}
	cutWant, cutWhole, cutBytes := map[string]*dns.Msg{}, map[string]*dns.Msg{}, map[string]firstBytes{}
	for _, f := range cutForms {
		want, err := exchange(agent.DNSAddr, "udp", query(f.name, f.qtype, false))
		if err != nil {
			t.Fatal(err)
		}
		cutWant[f.String()] = withTTLs(want, 0)
		cutWhole[f.String()] = withTTLs(mustExchange(t, agent.DNSAddr, "tcp", query(f.name, f.qtype, true)), 0)
	}
	checkCut := func(path string, d *towerd, f consulForm) {
		t.Helper()
		reply, err := askWire(d.UDP, "udp", query(f.name, f.qtype, false))
		got := new(dns.Msg)
		if err == nil {
			err = got.Unpack(reply)
		}
		if err != nil {
			t.Errorf("%s: %v without EDNS: %v", path, f, err)
			return
		}
		want := cutWant[f.String()]
		if got.Truncated || len(got.Answer) != len(want.Answer) || len(got.Extra) != len(want.Extra) {
			t.Errorf("%s: %v without EDNS: TC %v, %d answer and %d additional records; the agent: TC %v, %d and %d",
				path, f, got.Truncated, len(got.Answer), len(got.Extra), want.Truncated, len(want.Answer), len(want.Extra))
		}
		if err := sameTrim(withTTLs(got, 0), want, cutWhole[f.String()]); err != nil {
			t.Errorf("%s: %v without EDNS: %v", path, f, err)
		}
		form, err := wireFormOf(reply)
		if err != nil {
			t.Errorf("%s: %v without EDNS: %v", path, f, err)
			return
		}
		if first, ok := cutBytes[f.String()]; !ok {
			cutBytes[f.String()] = firstBytes{path, form}
		} else if d := first.form.differs(form, true); d != "" {
			t.Errorf("%s: %v without EDNS: not the bytes of the %s answer: %s", path, f, first.path, d)
		}
	}
	for _, f := range cutForms {
		checkCut("forwarded", fwd, f)
		checkCut("watched", watched, f)
	}

	// Asked again: from the cache where the TTL allows (counted down, so
	// at most the agent's), else forwarded again.
	before := map[string]int{}
	for _, f := range forms {
		before[f.String()] = proxyF.CountQuestion(f.name, f.qtype)
	}
	for _, f := range forms {
		check("cached", fwd, f, same, true, false)
		others("cached", fwd, f)
	}
	for _, f := range forms {
		// A NODATA's TTL is the SOA's minimum, which is Consul's
		// dns_config.soa.min_ttl (0): only answers with records are kept.
		positive := len(own[f.String()].Answer) > 0
		if ttl > 0 && positive && proxyF.CountQuestion(f.name, f.qtype) != before[f.String()] {
			t.Errorf("cached: %v reached the agent again within its %d s TTL", f, ttl)
		}
		if n := proxyW.CountQuestion(f.name, f.qtype); f.watched && n != 0 {
			t.Errorf("watched: %v reached the agent's DNS %d times, want 0 (answered from memory)", f, n)
		}
	}

	for _, f := range cutForms {
		checkCut("cached", fwd, f)
		checkCut("watched again", watched, f)
	}

	// The agent stops. Once the cache's entries have expired, every name
	// that had an answer is answered stale (EDE 3) with the one stale TTL:
	// serve_stale.answer_ttl (30 s), never more than the answer's own.
	agent.Stop(t)
	time.Sleep(time.Duration(ttl+1) * time.Second) // the entries' TTL runs out; not a synchronisation
	staleTTL := min(staleAnswerTTL, ttl)
	for _, f := range forms {
		if own[f.String()].Rcode == dns.RcodeNameError {
			// NXDOMAIN is never cached: nothing to be stale with.
			for _, d := range []*towerd{fwd, watched} {
				if m, err := ask(d.UDP, f.name, f.qtype); err != nil || m.Rcode != dns.RcodeServerFailure {
					t.Errorf("stale: %v: %v %v; want SERVFAIL (NXDOMAIN is never cached)", f, m, err)
				}
			}
			continue
		}
		shape := func(m *dns.Msg) *dns.Msg { return withTTLAtMost(m, staleTTL) }
		check("stale, forwarded before", fwd, f, shape, false, true)
		check("stale, watched before", watched, f, shape, false, true)
		askBytes("stale, forwarded before, general path", fwd, f, "udp", true)
		askBytes("stale, watched before, general path", watched, f, "udp", true)
	}
	for _, f := range cutForms {
		checkCut("stale, forwarded before", fwd, f)
		checkCut("stale, watched before", watched, f)
	}
}

// withTTLAtMost is a copy of m whose TTLs are at most ttl.
func withTTLAtMost(m *dns.Msg, ttl uint32) *dns.Msg {
	cp := m.Copy()
	for _, section := range [][]dns.RR{cp.Answer, cp.Ns, cp.Extra} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl = min(h.Ttl, ttl)
			}
		}
	}
	return cp
}

// withTTLs is a copy of m with every TTL (OPT aside) set to ttl.
func withTTLs(m *dns.Msg, ttl uint32) *dns.Msg {
	cp := m.Copy()
	for _, section := range [][]dns.RR{cp.Answer, cp.Ns, cp.Extra} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl = ttl
			}
		}
	}
	return cp
}

// maxTTL is the largest TTL in m (OPT aside).
func maxTTL(m *dns.Msg) uint32 {
	var most uint32
	for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				most = max(most, h.Ttl)
			}
		}
	}
	return most
}

// sameTrim compares got with want, an answer the agent trimmed to fit:
// as many answer records, each one of whole's (the answer untrimmed), and
// the address of every SRV target got names in its additional section,
// as the agent's trimming keeps them.
func sameTrim(got, want, whole *dns.Msg) error {
	if got.Rcode != want.Rcode || len(got.Answer) != len(want.Answer) {
		return fmt.Errorf("rcode %s with %d answer records, want %s with %d (the agent's trimmed answer)",
			dns.RcodeToString[got.Rcode], len(got.Answer), dns.RcodeToString[want.Rcode], len(want.Answer))
	}
	all := recordsOf(whole)
	for _, rr := range recordsOf(got).Answer {
		if !slices.Contains(all.Answer, rr) {
			return fmt.Errorf("answer record %s is none of the agent's", rr)
		}
	}
	for _, rr := range got.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		if !slices.ContainsFunc(got.Extra, func(x dns.RR) bool {
			return x.Header().Rrtype == dns.TypeA && dns.CanonicalName(x.Header().Name) == dns.CanonicalName(srv.Target)
		}) {
			return fmt.Errorf("no address for the SRV target %s in the additional section", srv.Target)
		}
	}
	return nil
}
