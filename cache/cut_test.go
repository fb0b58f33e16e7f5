package cache

import (
	"bytes"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// An entry's cut answer (issue 34) is stored with it and written by a
// hit asked with its tag, fresh and stale, TTLs counted down as the
// whole answer's; a hit asked with another tag, or none, writes the
// whole answer; the cut counts against the cache's bytes.
func TestCutAnswer(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("web.service.consul.")
	var answer []string
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		answer = append(answer, "web.service.consul. 60 IN A "+ip)
	}
	a, reason := c.PrepareAnswer(k, packReply(t, k.Name, dns.TypeA, dns.RcodeSuccess, answer, nil, true, true))
	if reason != "" {
		t.Fatal(reason)
	}
	cut := packReply(t, k.Name, dns.TypeA, dns.RcodeSuccess, answer[:2], nil, false, true)
	cut[0], cut[1] = 0, 0 // ID 0, as an entry's
	if a.SetCut(0, cut) {
		t.Error("a cut stored under tag 0")
	}
	if !a.SetCut(4, cut) || a.SetCut(5, cut) {
		t.Fatal("SetCut: want the first cut stored, a second refused")
	}
	if ok, reason := c.SetWire(k, &a); !ok {
		t.Fatal(reason)
	}
	clock.Advance(10 * time.Second)
	for _, tc := range []struct {
		tag   uint16
		want  int
		isCut bool
	}{{0, 4, false}, {3, 4, false}, {4, 2, true}} {
		out, hit, ok := c.AppendFresh(nil, []byte(k.Name), k.Type, k.Class, false, false, 65535, tc.tag)
		if !ok || int(hit.Answer) != tc.want || hit.Cut != tc.isCut {
			t.Errorf("tag %d: hit %v %+v, want %d records, cut %v", tc.tag, ok, hit, tc.want, tc.isCut)
			continue
		}
		if len(out) != tc.want*16 || !bytes.Equal(out[6:10], []byte{0, 0, 0, 50}) {
			t.Errorf("tag %d: records %x, want %d A records with TTL 50", tc.tag, out, tc.want)
		}
	}
	if _, hit, ok := c.AppendFresh(nil, []byte(k.Name), k.Type, k.Class, false, false, 2*16-1, 4); ok {
		t.Errorf("a cut answer written past its limit: %+v", hit)
	}
	clock.Advance(time.Minute)
	out, st, found := c.AppendStale(nil, []byte(k.Name), k.Type, k.Class, false, false, 65535, 30, 4)
	if found != StaleWritten || st.Answer != 2 || !st.Cut || !bytes.Equal(out[6:10], []byte{0, 0, 0, 30}) {
		t.Errorf("stale: %v %+v %x; want the cut answer, TTL 30", found, st, out)
	}
	c.mu.Lock()
	it, _ := c.lru.Peek(k)
	c.mu.Unlock()
	if len(it.data) < int(it.wireLen)+2*4+len(cut)+2*2 {
		t.Errorf("entry data %d bytes: the cut is not counted in it", len(it.data))
	}
}
