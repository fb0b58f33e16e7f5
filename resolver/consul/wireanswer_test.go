package consul

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/resolver/dnswire"
)

// wireWatcher is a watcher of n instances of "web" at distinct IPv4
// addresses (tags "v1" on all, "primary" on the first, node meta on
// every other node), and of "v6" with IPv6 ones, both watched, in dc1.
func wireWatcher(t testing.TB, n int, info *agentInfo) *Watcher {
	t.Helper()
	w, err := New(Config{Address: "127.0.0.1:1", MaxStale: 30 * time.Second, AnswerTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.clock = newFakeClock()
	w.info.Store(info)
	var web, v6 []instance
	for i := range n {
		in := instance{ServiceID: fmt.Sprint("web", i), Node: fmt.Sprint("VM", i),
			NodeAddr: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 80 + i, Weight: 1, Tags: []string{"v1"}}
		if i == 0 {
			in.Tags = append(in.Tags, "primary")
		}
		if i%2 == 1 {
			in.MetaTXT = []string{"rack=r1", "zone=z9"}
		}
		web = append(web, in)
		v6 = append(v6, instance{ServiceID: fmt.Sprint("v6", i), Node: fmt.Sprint("vm", i),
			NodeAddr: fmt.Sprintf("2001:db8::%x", i+1), Port: 80, Weight: 1})
	}
	w.store.set("web", web, nil)
	w.store.set("v6", v6, nil)
	markWatched(w, "web", "v6")
	return w
}

// wireQuery is a packed query for name and qtype, as the fast path hands
// it to AppendAnswer: header and question, nothing after.
func wireQuery(t testing.TB, name string, qtype uint16) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// appended is what AppendAnswer wrote for name, as a message (its header's
// counts set from what it said), and whether it answered.
func appended(t *testing.T, w *Watcher, name string, qtype uint16, staleTTL uint32) ([]byte, bool, bool) {
	t.Helper()
	pkt := wireQuery(t, name, qtype)
	out, counts, stale, _, why, ok := w.AppendAnswer(pkt, []byte(strings.ToLower(name)), qtype, 65535, staleTTL, 0)
	if !ok {
		if len(out) != len(pkt) {
			t.Errorf("%s: declined but wrote %d bytes", name, len(out)-len(pkt))
		}
		return nil, false, false
	}
	if why != WhyWatch {
		t.Errorf("%s: why %q, want %q", name, why, WhyWatch)
	}
	dnswire.Header{QDCount: 1, ANCount: counts[0], NSCount: counts[1], ARCount: counts[2]}.Put(out)
	return out, stale, true
}

// generalBytes is the general path's packing of Answer's message for the
// question as the client spelled it (resolver/spelling.go's spelled, then
// the reply's pack), every TTL at most staleTTL when stale: what the fast
// path's bytes must equal.
func generalBytes(t *testing.T, w *Watcher, name string, qtype uint16, staleTTL uint32) ([]byte, bool, bool) {
	t.Helper()
	m, stale, _, ok := w.Answer(question(name, qtype))
	if !ok {
		return nil, false, false
	}
	m.Compress = true
	raw, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	asked, _ := dnswire.AppendWireName(nil, name)
	copy(raw[dnswire.HeaderLen:], asked)
	spelled := new(dns.Msg)
	if err := spelled.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	if stale {
		for _, rrs := range [][]dns.RR{spelled.Answer, spelled.Ns, spelled.Extra} {
			for _, rr := range rrs {
				rr.Header().Ttl = min(rr.Header().Ttl, staleTTL)
			}
		}
	}
	spelled.Id, spelled.Compress = 0, true
	out, err := spelled.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return out, stale, true
}

// wireForms are the question forms the watch holds, with the letter cases
// clients send.
var wireForms = []struct {
	name  string
	qtype uint16
}{
	{"web.service.consul.", dns.TypeA},
	{"Web.Service.Consul.", dns.TypeA},
	{"web.service.consul.", dns.TypeSRV},
	{"WEB.service.CONSUL.", dns.TypeSRV},
	{"web.service.consul.", dns.TypeAAAA}, // NODATA, with the SOA
	{"Web.Service.Consul.", dns.TypeAAAA},
	{"v6.service.consul.", dns.TypeAAAA},
	{"v6.service.consul.", dns.TypeSRV},
	{"v6.service.consul.", dns.TypeA}, // NODATA
	{"v1.web.service.consul.", dns.TypeA},
	{"V1.Web.Service.Consul.", dns.TypeSRV},
	{"primary.web.service.consul.", dns.TypeSRV},
	{"primary.web.service.consul.", dns.TypeAAAA},
	{"_web._v1.service.consul.", dns.TypeSRV},
	{"_web._tcp.service.consul.", dns.TypeSRV},
	{"_Web._Primary.consul.", dns.TypeSRV},
	{"web.service.dc1.consul.", dns.TypeA},
	{"Web.Service.DC1.Consul.", dns.TypeSRV},
	{"web.service.dc1.dc.consul.", dns.TypeSRV},
	{"web.service.dc1.consul.", dns.TypeAAAA},
}

// Every answer the watch holds is written by AppendAnswer as the general
// path packs Answer's message, byte for byte, letter case included: every
// form, A, AAAA, SRV (with node meta TXT) and NODATA, fresh and stale,
// with one draw of the shuffle for both.
func TestAppendAnswerBytesAreGeneralPaths(t *testing.T) {
	for _, n := range []int{1, 3, 7} {
		for _, info := range []*agentInfo{
			{datacenter: "dc1", domain: "consul.", nodeMetaTXT: true, soa: soaTimers{refresh: 3600, retry: 600, expire: 86400}},
			{datacenter: "dc1", domain: "consul.", aRecordLimit: 2},
		} {
			w := wireWatcher(t, n, info)
			for _, stale := range []bool{false, true} {
				if stale {
					w.store.contact("web", true, w.clock.Now())
					w.store.contact("v6", true, w.clock.Now())
				}
				for _, f := range wireForms {
					w.intN = rand.New(rand.NewPCG(1, 2)).IntN
					want, wantStale, wantOK := generalBytes(t, w, f.name, f.qtype, 3)
					w.intN = rand.New(rand.NewPCG(1, 2)).IntN
					got, gotStale, gotOK := appended(t, w, f.name, f.qtype, 3)
					what := fmt.Sprintf("%d instances, limit %d, stale %v: %s %s", n, info.aRecordLimit, stale, f.name, dns.TypeToString[f.qtype])
					if !wantOK || !gotOK || gotStale != stale || wantStale != stale {
						t.Errorf("%s: Answer %v (stale %v), AppendAnswer %v (stale %v)", what, wantOK, wantStale, gotOK, gotStale)
						continue
					}
					if !bytes.Equal(got, want) {
						g, w := new(dns.Msg), new(dns.Msg)
						t.Errorf("%s: bytes differ\nfast    %x\ngeneral %x\n%v %v\n%v %v", what, got, want, g.Unpack(got), g, w.Unpack(want), w)
					}
				}
			}
		}
	}
}

// What the watch does not hold is Answer's, or the cache's: AppendAnswer
// declines it and writes nothing.
func TestAppendAnswerDeclines(t *testing.T) {
	w := wireWatcher(t, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
	for _, tc := range []struct {
		name  string
		qtype uint16
	}{
		{"web.service.consul.", dns.TypeTXT},
		{"nope.web.service.consul.", dns.TypeA}, // no instance has the tag
		{"web.service.dc2.consul.", dns.TypeA},  // another datacenter
		{"db.service.consul.", dns.TypeA},       // not watched
		{"vm0.node.consul.", dns.TypeA},
		{"web.service.example.", dns.TypeA},
		{"_web._v1.consul.", dns.TypeA}, // RFC 2782's form is SRV's only
	} {
		if _, _, ok := appended(t, w, tc.name, tc.qtype, 30); ok {
			t.Errorf("%s %s: answered by AppendAnswer", tc.name, dns.TypeToString[tc.qtype])
		}
	}
	// Lost with the agent longer ago than the maximum stale age.
	w.store.contact("web", true, w.clock.Now())
	w.clock.(interface{ Advance(time.Duration) }).Advance(time.Minute)
	if _, _, ok := appended(t, w, "web.service.consul.", dns.TypeA, 30); ok {
		t.Error("records lost past MaxStale answered by AppendAnswer")
	}
}

// Covers is true for the names the watch holds and for names that must
// reach Answer to ask for a watch, false for the rest of the domain.
func TestCoversWhatTheWatchHolds(t *testing.T) {
	w := wireWatcher(t, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
	w.cands.keepOut("gone", w.clock.Now(), time.Hour)
	for name, want := range map[string]bool{
		"web.service.consul.":           true,
		"v1.web.service.consul.":        true,
		"primary.web.service.consul.":   true,
		"nope.web.service.consul.":      false, // no instance has the tag
		"_web._v1.service.consul.":      true,
		"_web._v1.consul.":              true,
		"web.service.dc1.consul.":       true,
		"web.service.dc2.consul.":       false,
		"db.service.consul.":            true,  // not watched: its questions ask for a watch
		"gone.service.consul.":          false, // kept out: a first read found no instance
		"vm0.node.consul.":              false,
		"webq.query.consul.":            false,
		"consul.":                       false,
		"web.service.consul.example.":   false,
		"a.b.web.service.dc1.consul.":   false, // tag "a.b": none has it
		"web.service.dc1.dc.consul.":    true,
		"web.service.dc1.x.consul.":     false,
		"0a000001.addr.dc1.consul.":     false,
		"web.connect.consul.":           false,
		"service.consul.":               false,
		"web.virtual.consul.":           false,
		"v6.service.consul.":            true,
		"x.v6.service.consul.":          false,
		"db.service.dc1.consul.":        true,
		"db.service.dc2.consul.":        false,
		"_db._tcp.service.consul.":      true,
		"big.web.service.dc1.consul.x.": false,
	} {
		if got := w.Covers([]byte(name)); got != want {
			t.Errorf("Covers(%s) = %v, want %v", name, got, want)
		}
	}
	w.store.contact("web", true, w.clock.Now())
	w.clock.(interface{ Advance(time.Duration) }).Advance(time.Minute)
	if w.Covers([]byte("web.service.consul.")) {
		t.Error("Covers a service lost past MaxStale")
	}
}

// The answer is encoded when the watch delivers the records, not at a
// question; a new set is a new encoding.
func TestWatchedAnswerEncodedOnDelivery(t *testing.T) {
	w := wireWatcher(t, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
	sl := &serviceLoop{name: "db", cancel: func() {}}
	w.mu.Lock()
	w.watches["db"] = sl
	w.publish()
	w.deliverService(sl, "db", []instance{{ServiceID: "x", Node: "n", NodeAddr: "192.0.2.9", Port: 80, Weight: 1}})
	w.mu.Unlock()
	if svc := w.store.get("db"); svc == nil || svc.wire.Load() == nil {
		t.Fatal("delivered records not encoded")
	}
	got, _, ok := appended(t, w, "db.service.consul.", dns.TypeA, 30)
	m := new(dns.Msg)
	if !ok || m.Unpack(got) != nil || len(m.Answer) != 1 || m.Answer[0].String() != "db.service.consul.\t5\tIN\tA\t192.0.2.9" {
		t.Errorf("after delivery: %v %v", ok, m)
	}
}

// A watched answer costs no allocation (issue 34): A, SRV with its
// additional records, a tag's, NODATA, stale.
func TestAppendAnswerAllocates(t *testing.T) {
	w := wireWatcher(t, 3, &agentInfo{datacenter: "dc1", domain: "consul.", nodeMetaTXT: true})
	dst := make([]byte, 0, 2048)
	for _, f := range wireForms {
		pkt := wireQuery(t, f.name, f.qtype)
		name := []byte(strings.ToLower(f.name))
		dst = append(dst[:0], pkt...)
		if n := testing.AllocsPerRun(200, func() {
			if _, _, _, _, _, ok := w.AppendAnswer(dst, name, f.qtype, 2048, 30, 0); !ok {
				t.Fatalf("%s declined", f.name)
			}
		}); n != 0 {
			t.Errorf("%s %s: %v allocations per watched answer, want 0", f.name, dns.TypeToString[f.qtype], n)
		}
	}
}

func BenchmarkAppendAnswer(b *testing.B) {
	for _, qtype := range []uint16{dns.TypeA, dns.TypeSRV} {
		b.Run(dns.TypeToString[qtype], func(b *testing.B) {
			w := wireWatcher(b, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
			pkt := wireQuery(b, "web.service.consul.", qtype)
			name := []byte("web.service.consul.")
			dst := make([]byte, 0, 2048)
			b.ReportAllocs()
			for b.Loop() {
				w.AppendAnswer(append(dst[:0], pkt...), name, qtype, 2048, 30, 0)
			}
		})
	}
}

// The count of records a UDP client without EDNS keeps (Consul's cut,
// udp_answer_limit) is decided when the answer is encoded (issue 34): a
// question asked with its tag gets that many, shuffled, without an
// allocation; one of another name length, another tag, or none gets the
// whole answer for the resolver to cut.
func TestAppendAnswerNarrow(t *testing.T) {
	info := &agentInfo{datacenter: "dc1", domain: "consul.", udpAnswer: 3}
	w := wireWatcher(t, 12, info)
	tag := consulcut.NarrowTag(3)
	for _, tc := range []struct {
		name  string
		qtype uint16
		cut   uint16
		want  int
		done  bool
	}{
		{"web.service.consul.", dns.TypeA, tag, 3, true},
		{"v6.service.consul.", dns.TypeAAAA, tag, 3, true},
		{"v1.web.service.consul.", dns.TypeA, tag, 3, true},
		{"web.service.consul.", dns.TypeA, 0, 12, false},
		{"web.service.consul.", dns.TypeA, consulcut.NarrowTag(5), 12, false},
		{"web.service.dc1.consul.", dns.TypeA, tag, 12, false}, // another length: cut per question
		// SRV: three groups, each target's address once, whatever the
		// order (twelve nodes, their addresses alike in size).
		{"web.service.consul.", dns.TypeSRV, tag, 3, true},
		{"web.service.dc1.consul.", dns.TypeSRV, tag, 12, false},
	} {
		pkt := wireQuery(t, tc.name, tc.qtype)
		name := []byte(tc.name)
		_, counts, _, done, _, ok := w.AppendAnswer(pkt, name, tc.qtype, 65535, 30, tc.cut)
		if done && tc.qtype == dns.TypeSRV && counts[2] != counts[0] {
			t.Errorf("%s SRV: %d additional records for %d SRV records, want each target's address", tc.name, counts[2], counts[0])
		}
		if !ok || int(counts[0]) != tc.want || done != tc.done {
			t.Errorf("%s %s tag %d: answered %v, %d records, cut %v; want %d, cut %v", tc.name,
				dns.TypeToString[tc.qtype], tc.cut, ok, counts[0], done, tc.want, tc.done)
		}
		if !tc.done {
			continue
		}
		dst := make([]byte, 0, 2048)
		if n := testing.AllocsPerRun(100, func() {
			w.AppendAnswer(append(dst[:0], pkt...), name, tc.qtype, 2048, 30, tc.cut)
		}); n != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, n)
		}
	}
}

// A watched SRV answer's narrow cut is consulcut's cut of the whole
// answer under the same shuffle, byte for byte: each kept target's
// address once, instances sharing an address (one target) included,
// node meta dropped (issue 34).
func TestAppendAnswerNarrowSRVIsTheCut(t *testing.T) {
	info := &agentInfo{datacenter: "dc1", domain: "consul.", udpAnswer: 3, nodeMetaTXT: true}
	w := wireWatcher(t, 1, info)
	var pair []instance
	for i := range 8 {
		pair = append(pair, instance{ServiceID: fmt.Sprint("pair", i), Node: fmt.Sprint("vm", i/2),
			NodeAddr: fmt.Sprintf("10.1.0.%d", i/2+1), Port: 80 + i, Weight: 1, MetaTXT: []string{"rack=r1"}})
	}
	w.store.set("pair", pair, nil)
	markWatched(w, "pair")
	name := []byte("pair.service.consul.")
	pkt := wireQuery(t, string(name), dns.TypeSRV)
	for seed := range uint64(40) {
		draw := func() { rng := rand.New(rand.NewPCG(seed, 1)); w.intN = rng.IntN }
		draw()
		whole, counts, _, done, _, ok := w.AppendAnswer(append([]byte(nil), pkt...), name, dns.TypeSRV, 65535, 30, 0)
		if !ok || done {
			t.Fatalf("whole answer: %v, cut %v", ok, done)
		}
		dnswire.Header{QDCount: 1, ANCount: counts[0], NSCount: counts[1], ARCount: counts[2]}.Put(whole)
		var v dnswire.Msg
		var cut consulcut.Cut
		var b dnswire.Builder
		if v.Parse(whole) != nil || !cut.Plan(&v, consulcut.Narrow(3)) {
			t.Fatal("the whole answer does not plan")
		}
		if _, err := cut.Write(&b, &v); err != nil {
			t.Fatal(err)
		}
		want := b.AppendTo(nil)
		draw()
		got, counts, _, done, _, ok := w.AppendAnswer(append([]byte(nil), pkt...), name, dns.TypeSRV, 65535, 30, consulcut.NarrowTag(3))
		if !ok || !done {
			t.Fatalf("seed %d: narrow answer %v, cut %v", seed, ok, done)
		}
		dnswire.Header{QDCount: 1, ANCount: counts[0], NSCount: counts[1], ARCount: counts[2]}.Put(got)
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: narrow answer\n%x\nwant consulcut's cut of the whole one\n%x", seed, got, want)
		}
	}
}
