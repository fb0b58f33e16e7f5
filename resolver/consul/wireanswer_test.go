package consul

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// wireWatcher is a watcher of n instances of "web" at distinct IPv4
// addresses, and of "v6" with IPv6 ones, both watched, in dc1.
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
		web = append(web, instance{ServiceID: fmt.Sprint("web", i), Node: fmt.Sprint("vm", i),
			NodeAddr: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 80, Weight: 1})
		v6 = append(v6, instance{ServiceID: fmt.Sprint("v6", i), Node: fmt.Sprint("vm", i),
			NodeAddr: fmt.Sprintf("2001:db8::%x", i+1), Port: 80, Weight: 1})
	}
	web = append(web, web[0]) // the same address twice: one record
	w.store.set("web", web)
	w.store.set("v6", v6)
	markWatched(w, "web", "v6")
	return w
}

// appendedSet is the answer records AppendAnswer wrote for name, as
// presentation strings sorted, and how many it said it wrote.
func appendedSet(t *testing.T, w *Watcher, name string, qtype uint16) ([]string, bool) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	out, n, why, ok := w.AppendAnswer(pkt, []byte(name), qtype, 65535)
	if !ok {
		if len(out) != len(pkt) {
			t.Errorf("%s: declined but wrote %d bytes", name, len(out)-len(pkt))
		}
		return nil, false
	}
	if why != WhyWatch {
		t.Errorf("%s: why %q, want %q", name, why, WhyWatch)
	}
	out[7] = byte(n) // ANCOUNT
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil {
		t.Fatalf("%s: the appended answer does not parse: %v", name, err)
	}
	return answerSet(r), true
}

// The fast path's watched answer is Answer's records, as a set (both
// shuffle), for A and AAAA of the plain service name; every other form is
// left to Answer.
func TestAppendAnswerIsAnswers(t *testing.T) {
	w := wireWatcher(t, 5, &agentInfo{datacenter: "dc1", domain: "consul."})
	for _, tc := range []struct {
		name  string
		qtype uint16
		fast  bool
	}{
		{"web.service.consul.", dns.TypeA, true},
		{"v6.service.consul.", dns.TypeAAAA, true},
		{"web.service.consul.", dns.TypeAAAA, false}, // NODATA: its SOA carries the time
		{"web.service.consul.", dns.TypeSRV, false},
		{"web.service.dc1.consul.", dns.TypeA, false},
		{"v1.web.service.consul.", dns.TypeA, false},
		{"db.service.consul.", dns.TypeA, false}, // not watched
		{"vm0.node.consul.", dns.TypeA, false},
		{"web.service.example.", dns.TypeA, false},
	} {
		got, ok := appendedSet(t, w, tc.name, tc.qtype)
		if ok != tc.fast {
			t.Errorf("%s %s: appended %v, want %v", tc.name, dns.TypeToString[tc.qtype], ok, tc.fast)
			continue
		}
		if !ok {
			continue
		}
		m, _, _, answered := w.Answer(question(tc.name, tc.qtype))
		if !answered || !slices.Equal(got, answerSet(m)) {
			t.Errorf("%s %s: appended %v, Answer %v", tc.name, dns.TypeToString[tc.qtype], got, m)
		}
	}
	// Shuffled: over many questions the first record is not always the same.
	firsts := map[string]bool{}
	for range 200 {
		out, _, _, _ := w.AppendAnswer(nil, []byte("web.service.consul."), dns.TypeA, 65535)
		firsts[string(out[12:16])] = true
	}
	if len(firsts) < 2 {
		t.Error("the appended answer is never shuffled")
	}
}

// a_record_limit cuts the shuffled answer, as Answer's; records lost with
// the agent (stale) and a new record set are Answer's again, then encoded
// anew.
func TestAppendAnswerLimitStaleAndChange(t *testing.T) {
	w := wireWatcher(t, 5, &agentInfo{datacenter: "dc1", domain: "consul.", aRecordLimit: 2})
	got, ok := appendedSet(t, w, "web.service.consul.", dns.TypeA)
	if !ok || len(got) != 2 {
		t.Fatalf("a_record_limit 2: %v %v, want 2 records", ok, got)
	}
	w.store.contact("web", true, w.clock.Now())
	if _, ok := appendedSet(t, w, "web.service.consul.", dns.TypeA); ok {
		t.Error("records lost with the agent answered by AppendAnswer (Answer marks them stale)")
	}
	w.store.set("web", []instance{{ServiceID: "x", Node: "n", NodeAddr: "192.0.2.9", Port: 80, Weight: 1}})
	got, ok = appendedSet(t, w, "web.service.consul.", dns.TypeA)
	if !ok || !slices.Equal(got, []string{"web.service.consul. 5 IN A 192.0.2.9"}) {
		t.Errorf("after the set changed: %v %v, want the new record", ok, got)
	}
}

// A watched answer costs no allocation (issue 34).
func TestAppendAnswerAllocates(t *testing.T) {
	w := wireWatcher(t, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
	name := []byte("web.service.consul.")
	dst := make([]byte, 0, 512)
	w.AppendAnswer(dst, name, dns.TypeA, 512) // encodes the set
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, _, ok := w.AppendAnswer(dst, name, dns.TypeA, 512); !ok {
			t.Fatal("declined")
		}
	}); n != 0 {
		t.Errorf("%v allocations per watched answer, want 0", n)
	}
}

func BenchmarkAppendAnswer(b *testing.B) {
	w := wireWatcher(b, 3, &agentInfo{datacenter: "dc1", domain: "consul."})
	name := []byte("web.service.consul.")
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		w.AppendAnswer(dst, name, dns.TypeA, 512)
	}
}
