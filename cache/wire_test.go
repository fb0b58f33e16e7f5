package cache

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// wireReply builds what the resolver's fast path sends: a header, the
// question as the client spelt it, and the records AppendFresh writes.
func wireReply(t testing.TB, c *Cache, k Key, clientName string, limit int) (*dns.Msg, WireHit, bool) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(clientName, k.Type)
	q.Question[0].Qclass = k.Class
	head, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	out, hit, ok := c.AppendFresh(head, []byte(k.Name), k.Type, k.Class, k.DO, k.CD, limit, 0)
	if !ok {
		if len(out) != len(head) {
			t.Fatalf("AppendFresh reported a miss but wrote %d bytes", len(out)-len(head))
		}
		return nil, hit, false
	}
	binary.BigEndian.PutUint16(out[6:], hit.Answer)
	binary.BigEndian.PutUint16(out[8:], hit.Ns)
	binary.BigEndian.PutUint16(out[10:], hit.Extra)
	m := new(dns.Msg)
	if err := m.Unpack(out); err != nil {
		t.Fatalf("fast reply does not unpack: %v", err)
	}
	return m, hit, true
}

// sameRecords compares sections by presentation, owner names folded: the
// fast reply's names may point into the client's spelling of the question.
func sameRecords(a, b []dns.RR) bool {
	str := func(rrs []dns.RR) []string {
		out := make([]string, len(rrs))
		for i, rr := range rrs {
			out[i] = strings.ToLower(rr.String())
		}
		return out
	}
	return slices.Equal(str(a), str(b))
}

func TestAppendFreshMatchesGet(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("www.example.com.")
	m := reply(t, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 300 IN CNAME a.example.com.", "a.example.com. 120 IN A 192.0.2.1"},
		ns:     []string{"example.com. 600 IN NS ns1.example.com."},
		extra:  []string{"ns1.example.com. 600 IN A 192.0.2.53"},
	})
	m.AuthenticatedData = true
	mustSet(t, c, k, m)
	clock.Advance(5300 * time.Millisecond)

	got, hit, ok := wireReply(t, c, k, "WwW.Example.COM.", dns.MaxMsgSize)
	if !ok {
		t.Fatal("fresh entry not served by AppendFresh")
	}
	want, _ := c.Get(k)
	if !sameRecords(got.Answer, want.Msg.Answer) || !sameRecords(got.Ns, want.Msg.Ns) || !sameRecords(got.Extra, want.Msg.Extra) {
		t.Errorf("fast records\n%v\nwant as Get\n%v", got, want.Msg)
	}
	for _, rr := range append(append(got.Answer, got.Ns...), got.Extra...) {
		if rr.Header().Ttl != 115 {
			t.Errorf("%v: TTL %d, want 115 (120 stored, 5.3 s later)", rr, rr.Header().Ttl)
		}
	}
	if hit.Answer != 2 || hit.Ns != 1 || hit.Extra != 1 || !hit.AuthenticatedData || hit.Rcode != dns.RcodeSuccess {
		t.Errorf("hit = %+v, want 2/1/1 records with AD", hit)
	}
	if hit.TTL != 120*time.Second || hit.Remaining != 120*time.Second-5300*time.Millisecond {
		t.Errorf("hit TTL %v remaining %v", hit.TTL, hit.Remaining)
	}
	if s := c.Stats(); s.Hits != 2 || s.Misses != 0 {
		t.Errorf("Stats = %+v, want 2 hits (AppendFresh and Get)", s)
	}
}

// What AppendFresh declines, it must not count: the caller takes the general
// path, which counts the query once.
func TestAppendFreshDeclinesWithoutCounting(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("www.example.com.")
	mustSet(t, c, k, aReply(t, "www.example.com.", 60, "192.0.2.1"))

	if _, _, ok := wireReply(t, c, keyA("other.example."), "other.example.", dns.MaxMsgSize); ok {
		t.Error("miss served")
	}
	if _, _, ok := wireReply(t, c, k, "www.example.com.", 40); ok {
		t.Error("served past the size limit")
	}
	doKey := NewKey("www.example.com.", dns.TypeA, dns.ClassINET, true, false)
	if _, _, ok := wireReply(t, c, doKey, "www.example.com.", dns.MaxMsgSize); ok {
		t.Error("served the entry of another DO bit")
	}
	clock.Advance(time.Minute)
	if _, _, ok := wireReply(t, c, k, "www.example.com.", dns.MaxMsgSize); ok {
		t.Error("expired entry served as fresh")
	}
	if s := c.Stats(); s != (Stats{Stored: 1}) {
		t.Errorf("Stats = %+v, want only the store counted", s)
	}
}

// The key's question is what the records are packed behind, whatever the
// upstream's reply carried, so a reply to another spelling or none at all
// still yields valid compression pointers.
func TestAppendFreshReplyWithOtherQuestion(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	k := keyA("svc.example.")
	m := aReply(t, "svc.example.", 60, "192.0.2.7")
	m.Question = []dns.Question{{Name: "a-much-longer-name.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	mustSet(t, c, k, m)
	got, _, ok := wireReply(t, c, k, "SVC.example.", dns.MaxMsgSize)
	if !ok || len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "192.0.2.7" ||
		!strings.EqualFold(got.Answer[0].Header().Name, "svc.example.") {
		t.Fatalf("got %v", got)
	}
}

// The entry keeps where its answer starts and every record's TTL field;
// a message cut anywhere makes none.
func TestEntryLayout(t *testing.T) {
	m := reply(t, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 1 IN A 192.0.2.1", "www.example.com. 2 IN A 192.0.2.2"},
		ns:     []string{"example.com. 3 IN NS ns1.example.com."},
		extra:  []string{"ns1.example.com. 4 IN AAAA 2001:db8::53"},
	})
	p, reason := prepare(m, ttlBounds{})
	if reason != "" {
		t.Fatal(reason)
	}
	if p.answerAt != uint16(12+len("www.example.com.")+1+4) {
		t.Errorf("answerAt = %d", p.answerAt)
	}
	var ttls []uint32
	wire := p.wire()
	for offsets := p.data[p.wireLen:]; len(offsets) >= 2; offsets = offsets[2:] {
		ttls = append(ttls, binary.BigEndian.Uint32(wire[binary.BigEndian.Uint16(offsets):]))
	}
	if !slices.Equal(ttls, []uint32{1, 2, 3, 4}) {
		t.Errorf("TTLs at the offsets = %v, want 1 2 3 4", ttls)
	}
	packed, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{5, int(p.answerAt), len(packed) - 1} {
		if _, reason := prepareAnswer(keyA("www.example.com."), packed[:cut], ttlBounds{}); reason != reasonMalformed {
			t.Errorf("message cut at %d bytes: %q, want %q", cut, reason, reasonMalformed)
		}
	}
}

func BenchmarkAppendFresh(b *testing.B) {
	c, err := New(Config{Capacity: 100})
	if err != nil {
		b.Fatal(err)
	}
	k := keyA("www.example.com.")
	mustSet(b, c, k, aReply(b, "www.example.com.", 300, "192.0.2.1"))
	name := []byte(k.Name)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := c.AppendFresh(buf[:0], name, k.Type, k.Class, false, false, 512, 0); !ok {
			b.Fatal("miss")
		}
	}
}

// AppendStale writes an expired entry within MaxStaleAge as Get gives it
// stale, every TTL the caller's, with Get's expiry and failure time; it
// says what it found otherwise (fresh, too big, nothing), drops an entry
// too old to serve as Get does, and counts nothing.
func TestAppendStaleMatchesGet(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("www.example.com.")
	m := reply(t, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 300 IN CNAME a.example.com.", "a.example.com. 120 IN A 192.0.2.1"},
		ns:     []string{"example.com. 600 IN NS ns1.example.com."},
	})
	mustSet(t, c, k, m)
	appendStale := func(limit int) ([]byte, StaleHit, Stale) {
		return c.AppendStale(nil, []byte(k.Name), k.Type, k.Class, k.DO, k.CD, limit, 30, 0)
	}
	if _, _, found := appendStale(dns.MaxMsgSize); found != StaleFresh {
		t.Fatalf("fresh entry: %v, want StaleFresh", found)
	}
	clock.Advance(150 * time.Second)
	c.MarkRefreshFailed(k, clock.Now())
	before := c.Stats()
	out, st, found := appendStale(dns.MaxMsgSize)
	if found != StaleWritten {
		t.Fatalf("stale entry: %v, want StaleWritten", found)
	}
	if got := c.Stats(); got != before {
		t.Errorf("AppendStale counted: %+v, before %+v", got, before)
	}
	want, _ := c.Get(k)
	if st.Expired != want.Expired || !st.RefreshFailedAt.Equal(want.RefreshFailedAt) || st.TTL != want.TTL ||
		st.Answer != 2 || st.Ns != 1 || st.Extra != 0 {
		t.Errorf("stale hit %+v, want Get's expiry %s, failure %s, TTL %s, 2/1/0 records",
			st, want.Expired, want.RefreshFailedAt, want.TTL)
	}
	// The bytes behind a header and question: Get's records, TTL 30.
	q := new(dns.Msg).SetQuestion(k.Name, k.Type)
	head, _ := q.Pack()
	full, _, _ := c.AppendStale(head, []byte(k.Name), k.Type, k.Class, k.DO, k.CD, dns.MaxMsgSize, 30, 0)
	binary.BigEndian.PutUint16(full[6:], st.Answer)
	binary.BigEndian.PutUint16(full[8:], st.Ns)
	got := new(dns.Msg)
	if err := got.Unpack(full); err != nil {
		t.Fatal(err)
	}
	setTTLs(30, want.Msg.Answer, want.Msg.Ns)
	if !sameRecords(got.Answer, want.Msg.Answer) || !sameRecords(got.Ns, want.Msg.Ns) {
		t.Errorf("stale records\n%v\nwant as Get with TTL 30\n%v", got, want.Msg)
	}
	if _, _, found := appendStale(len(out) - 1); found != StaleTooBig {
		t.Errorf("short limit: %v, want StaleTooBig", found)
	}
	clock.Advance(time.Hour) // past MaxStaleAge
	if _, _, found := appendStale(dns.MaxMsgSize); found != StaleNone || c.Has(k) {
		t.Errorf("too old: %v, kept %v; want StaleNone, removed", found, c.Has(k))
	}
}

// A stale answer's TTL is never more than the entry had fresh (the one
// stale TTL, issue 23): a name stored with TTL 0 goes out stale with 0, one
// stored with 10 s with 10 under a stale answer TTL of 30.
func TestAppendStaleTTLAtMostStored(t *testing.T) {
	for _, tc := range []struct {
		ttl  uint32
		want uint32
	}{{0, 0}, {10, 10}, {300, 30}} {
		c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
		k := keyA("ttl.example.")
		mustSet(t, c, k, reply(t, dns.RcodeSuccess, sections{
			answer: []string{fmt.Sprintf("ttl.example. %d IN A 192.0.2.1", tc.ttl)},
		}))
		clock.Advance(time.Duration(tc.ttl+1) * time.Second)
		q := new(dns.Msg).SetQuestion(k.Name, k.Type)
		head, _ := q.Pack()
		full, st, found := c.AppendStale(head, []byte(k.Name), k.Type, k.Class, k.DO, k.CD, dns.MaxMsgSize, 30, 0)
		if found != StaleWritten {
			t.Fatalf("TTL %d: %v, want StaleWritten", tc.ttl, found)
		}
		binary.BigEndian.PutUint16(full[6:], st.Answer)
		got := new(dns.Msg)
		if err := got.Unpack(full); err != nil {
			t.Fatal(err)
		}
		if len(got.Answer) != 1 || got.Answer[0].Header().Ttl != tc.want {
			t.Errorf("stored with TTL %d: stale answer %v, want TTL %d", tc.ttl, got.Answer, tc.want)
		}
	}
}
