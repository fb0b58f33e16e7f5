package dnswire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// mustMsg is a reply to qname/qtype with the records given in zone-file
// form (";" starts the authority section, "|" the additional one).
func mustMsg(tb testing.TB, qname string, qtype uint16, records ...string) *dns.Msg {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.Id, m.Response, m.RecursionAvailable = 0x4242, true, true
	section := &m.Answer
	for _, l := range records {
		switch l {
		case ";":
			section = &m.Ns
			continue
		case "|":
			section = &m.Extra
			continue
		}
		rr, err := dns.NewRR(l)
		if err != nil {
			tb.Fatalf("%q: %v", l, err)
		}
		*section = append(*section, rr)
	}
	return m
}

func pack(tb testing.TB, m *dns.Msg, compress bool) []byte {
	tb.Helper()
	m.Compress = compress
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// mustParse is raw read by Msg.Parse, which must take it.
func mustParse(tb testing.TB, raw []byte) *Msg {
	tb.Helper()
	var m Msg
	if err := m.Parse(raw); err != nil {
		tb.Fatalf("parse: %v", err)
	}
	return &m
}

// rebuild writes every record of raw again with the Builder.
func rebuild(tb testing.TB, raw []byte) []byte {
	tb.Helper()
	m := mustParse(tb, raw)
	var b Builder
	b.Start(m.ID, m.Flags)
	if m.QDCount == 1 {
		var q [MaxNameLen]byte
		b.Question(m.Question(q[:0]), m.QType, m.QClass)
	}
	for i := range m.Len() {
		b.Record(m.SectionOf(i), m, i)
	}
	if _, err := b.Finish(); err != nil {
		tb.Fatal(err)
	}
	return b.AppendTo(nil)
}

// The Builder packs what miekg/dns packs, byte for byte: whatever
// compression the bytes it reads came with, names in rdata of every
// layout, names that share suffixes in any letter case.
func TestBuilderPacksAsMiekg(t *testing.T) {
	msgs := []*dns.Msg{
		mustMsg(t, "www.example.com.", dns.TypeA, "www.example.com. 300 IN A 192.0.2.1", "www.example.com. 300 IN A 192.0.2.2"),
		mustMsg(t, "WWW.Example.com.", dns.TypeA, "www.example.com. 300 IN CNAME edge.Example.COM.", "edge.Example.COM. 20 IN A 192.0.2.1"),
		mustMsg(t, "example.com.", dns.TypeMX, "example.com. 300 IN MX 10 mail.example.com.", "example.com. 300 IN MX 20 mail2.example.com.",
			";", "example.com. 300 IN NS ns1.example.com.", "|", "mail.example.com. 300 IN A 192.0.2.25", "ns1.example.com. 300 IN AAAA 2001:db8::53"),
		mustMsg(t, "_x._tcp.example.com.", dns.TypeSRV, "_x._tcp.example.com. 300 IN SRV 1 2 80 host.example.com.", "|", "host.example.com. 30 IN A 192.0.2.9"),
		mustMsg(t, "nx.example.com.", dns.TypeA, ";", "example.com. 3600 IN SOA ns1.example.com. hostmaster.example.com. 1 2 3 4 60"),
		mustMsg(t, "a.b.old.example.", dns.TypeA, "old.example. 60 IN DNAME new.example.", "a.b.old.example. 60 IN CNAME a.b.new.example.", "a.b.new.example. 60 IN A 192.0.2.1"),
		mustMsg(t, "t.example.", dns.TypeTXT, `t.example. 60 IN TXT "hello" "world"`, `t.example. 60 IN TXT ""`),
		mustMsg(t, "s.example.", dns.TypeA, "s.example. 60 IN A 192.0.2.1",
			"s.example. 60 IN RRSIG A 8 2 60 20300101000000 20200101000000 1 example. AAAA"),
		mustMsg(t, "n.example.", dns.TypeNAPTR, `n.example. 60 IN NAPTR 100 10 "S" "SIP+D2U" "" _sip._udp.example.`),
		mustMsg(t, "r.example.", dns.TypePTR, `r.example. 60 IN PTR a\.b.example.`, "r.example. 60 IN TYPE65280 \\# 3 010203"),
		mustMsg(t, ".", dns.TypeNS, ". 60 IN NS a.root-servers.net.", ". 60 IN NS b.root-servers.net."),
	}
	for i, m := range msgs {
		m.SetEdns0(1232, true)
		want := pack(t, m, true)
		for _, compress := range []bool{false, true} {
			if got := rebuild(t, pack(t, m, compress)); !bytes.Equal(got, want) {
				t.Errorf("message %d (input compressed %v):\n got %x\nwant %x", i, compress, got, want)
			}
		}
	}
}

// Names in rdata a server compressed where RFC 2782 says not to (an SRV
// target) are read back whole: the copy carries no pointer into the
// message it came from.
func TestBuilderDecompressesRData(t *testing.T) {
	m := mustMsg(t, "_x._tcp.example.com.", dns.TypeSRV, "_x._tcp.example.com. 300 IN SRV 1 2 80 host.example.com.")
	raw := pack(t, m, true)
	// Point the SRV target's "example.com." at the question's.
	v := mustParse(t, raw)
	rr := *v.RR(0)
	target := int(rr.Data) + 6
	forged := append([]byte(nil), raw[:target]...)
	forged = append(forged, 4, 'h', 'o', 's', 't', 0xC0, 12+1+2+1+4) // -> "example.com." in the question
	binary16 := func(b []byte, at int, v int) { b[at], b[at+1] = byte(v>>8), byte(v) }
	binary16(forged, int(rr.Data)-2, len(forged)-int(rr.Data))
	want := new(dns.Msg)
	if err := want.Unpack(forged); err != nil {
		t.Fatalf("forged reply does not unpack: %v", err)
	}
	got := new(dns.Msg)
	if err := got.Unpack(rebuild(t, forged)); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

// What Parse refuses, miekg/dns refuses too; what it reads as checked,
// miekg/dns reads.
func TestParseRefuses(t *testing.T) {
	good := pack(t, mustMsg(t, "www.example.com.", dns.TypeA, "www.example.com. 300 IN A 192.0.2.1"), true)
	cut := func(n int) []byte { return append([]byte(nil), good[:len(good)-n]...) }
	loop := append([]byte(nil), good...)
	loop[len(good)-16], loop[len(good)-15] = 0xC0, byte(len(good)-16) // the owner points at itself
	for name, raw := range map[string][]byte{
		"header cut":       good[:11],
		"rdata cut":        cut(1),
		"record cut":       cut(14),
		"pointer loop":     loop,
		"two questions":    append(append([]byte(nil), good[:5]...), append([]byte{2}, good[6:]...)...),
		"extended label":   append(append([]byte(nil), good[:12]...), append([]byte{0x40}, good[13:]...)...),
		"A of three bytes": func() []byte { b := cut(1); b[len(b)-4-1] = 3; return b }(),
	} {
		var m Msg
		if err := m.Parse(raw); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	var m Msg
	if err := m.Parse(append(append([]byte(nil), good...), 1, 2, 3)); err != nil {
		t.Errorf("trailing bytes: %v (miekg/dns ignores them)", err)
	}
}

func TestNames(t *testing.T) {
	wire := func(s string) []byte { b, _ := AppendWireName(nil, s); return b }
	if !EqualName(wire("WwW.Example."), wire("www.example.")) || EqualName(wire("www.example."), wire("ww.example.")) {
		t.Error("EqualName")
	}
	for _, c := range []struct {
		name, zone string
		in         bool
	}{{"a.b.example.", "example.", true}, {"example.", "Example.", true}, {"xexample.", "example.", false},
		{"a.example.", ".", true}, {"example.", "a.example.", false}} {
		if got := InZone(wire(c.name), wire(c.zone)); got != c.in {
			t.Errorf("InZone(%s, %s) = %v", c.name, c.zone, got)
		}
	}
	m := mustMsg(t, `A\.b\032c\255.Example.`, dns.TypeA)
	raw := pack(t, m, false)
	v := mustParse(t, raw)
	unpacked := new(dns.Msg)
	if err := unpacked.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	if got, want := string(AppendText(nil, v.Question(nil), true)), dns.CanonicalName(unpacked.Question[0].Name); got != want {
		t.Errorf("AppendText %q, want %q", got, want)
	}
	if PlainLabels(v.Question(nil)) || !PlainLabels(wire("a-b._c.example.")) {
		t.Error("PlainLabels")
	}
}

// FuzzParse holds the view to miekg/dns: a message Parse reads with every
// record checked unpacks, and the Builder's copy of it unpacks to the same
// message; a message miekg/dns unpacks whole, Parse reads.
func FuzzParse(f *testing.F) {
	for _, m := range []*dns.Msg{
		mustMsg(f, "www.example.com.", dns.TypeA, "www.example.com. 300 IN CNAME a.example.com.", "a.example.com. 30 IN A 192.0.2.1",
			";", "example.com. 300 IN NS ns.example.com.", "|", "ns.example.com. 30 IN A 192.0.2.53"),
		mustMsg(f, "nx.example.", dns.TypeAAAA, ";", "example. 60 IN SOA ns.example. h.example. 1 2 3 4 5"),
		mustMsg(f, "srv.example.", dns.TypeSRV, "srv.example. 60 IN SRV 1 1 1 t.example.", `srv.example. 60 IN TXT "a" "b"`),
	} {
		m.SetEdns0(1232, false)
		f.Add(pack(f, m, true))
		f.Add(pack(f, m, false))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var v Msg
		err := v.Parse(raw)
		mm := new(dns.Msg)
		merr := mm.Unpack(raw)
		if err != nil {
			if merr == nil && errorsIsNotLie(raw, mm) && v.QDCount <= 1 && len(mm.Question) == int(v.QDCount) {
				t.Fatalf("Parse refused (%v) what miekg/dns unpacks:\n%v", err, mm)
			}
			return
		}
		checked := true
		for i := range v.Len() {
			checked = checked && v.RR(i).Checked
		}
		if checked && merr != nil {
			t.Fatalf("Parse read as checked what miekg/dns refuses: %v", merr)
		}
		if merr != nil {
			return
		}
		again := new(dns.Msg)
		if err := again.Unpack(rebuild(t, raw)); err != nil {
			t.Fatalf("the Builder's copy does not unpack: %v", err)
		}
		if again.String() != mm.String() {
			t.Fatalf("the Builder's copy differs:\n%v\nwant\n%v", again, mm)
		}
	})
}

// errorsIsNotLie reports whether raw's header counts match the records
// miekg/dns found: it reads a message that ends early on a record's
// boundary as the records there are, which Parse refuses on purpose.
func errorsIsNotLie(raw []byte, m *dns.Msg) bool {
	if len(raw) < 12 {
		return false
	}
	if len(m.Question) == 1 {
		// miekg/dns also reads a question cut after its name or its type.
		if _, next, err := ReadName(raw, 12, nil); err != nil || next+4 > len(raw) {
			return false
		}
	}
	count := func(at int) int { return int(raw[at])<<8 | int(raw[at+1]) }
	return count(6) == len(m.Answer) && count(8) == len(m.Ns) && count(10) == len(m.Extra)
}

// Generated replies of many names sharing suffixes: the Builder's bytes
// are miekg/dns's.
func TestBuilderGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 22))
	labels := []string{"a", "b", "example", "Example", "com", "COM", "ns1", "x-y", "_srv"}
	name := func() string {
		var s strings.Builder
		for range 1 + rng.IntN(4) {
			s.WriteString(labels[rng.IntN(len(labels))] + ".")
		}
		return s.String()
	}
	for i := range 2000 {
		var records []string
		for j := range rng.IntN(12) {
			switch rng.IntN(5) {
			case 0:
				records = append(records, fmt.Sprintf("%s 60 IN CNAME %s", name(), name()))
			case 1:
				records = append(records, fmt.Sprintf("%s 60 IN A 192.0.2.%d", name(), j))
			case 2:
				records = append(records, fmt.Sprintf("%s 60 IN MX %d %s", name(), j, name()))
			case 3:
				records = append(records, fmt.Sprintf("%s 60 IN SRV 1 1 %d %s", name(), j, name()))
			default:
				records = append(records, fmt.Sprintf("%s 60 IN SOA %s %s 1 2 3 4 5", name(), name(), name()))
			}
		}
		m := mustMsg(t, name(), dns.TypeA, records...)
		want := pack(t, m, true)
		if got := rebuild(t, pack(t, m, rng.IntN(2) == 0)); !bytes.Equal(got, want) {
			t.Fatalf("message %d:\n%v\n got %x\nwant %x", i, m, got, want)
		}
	}
}

// Respell writes the client's spelling over a packed question, and with
// it over every name compressed into it, as miekg/dns would pack the
// message asked in that spelling.
func TestRespellMatchesMiekg(t *testing.T) {
	pack := func(qname string) []byte {
		m := new(dns.Msg)
		m.SetQuestion(qname, dns.TypeA)
		m.Id, m.Compress = 1, true
		m.Answer = []dns.RR{&dns.CNAME{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 5},
			Target: "t." + qname}}
		raw, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	raw, want := pack("www.example."), pack("WwW.ExAmple.")
	if !Respell(raw, mustWire(t, "WwW.ExAmple.")) || !bytes.Equal(raw, want) {
		t.Fatalf("respelled\n% x\nmiekg/dns packs\n% x", raw, want)
	}
	if Respell(raw, mustWire(t, "other.example.")) || !bytes.Equal(raw, want) {
		t.Fatal("another name was written over the question")
	}
}

// SameRecord says what miekg/dns's IsDuplicate says, whatever the
// compression and the letter case of the names in owner and rdata.
func TestSameRecordMatchesIsDuplicate(t *testing.T) {
	rrs := []string{
		"a.example. 60 IN A 192.0.2.1", "A.Example. 300 IN A 192.0.2.1", "a.example. 60 IN A 192.0.2.2",
		"a.example. 60 IN CNAME t.example.", "a.example. 60 IN CNAME T.EXAMPLE.", "a.example. 60 IN CNAME u.example.",
		"a.example. 60 IN TXT \"Hello\"", "a.example. 60 IN TXT \"hello\"", "a.example. 60 CH TXT \"Hello\"",
		"a.example. 60 IN MX 10 mail.example.", "a.example. 60 IN MX 10 MAIL.example.", "a.example. 60 IN MX 20 mail.example.",
		"b.example. 60 IN SRV 1 2 3 t.example.", "B.example. 60 IN SRV 1 2 3 t.Example.",
	}
	parsed := make([]dns.RR, len(rrs))
	for i, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		parsed[i] = rr
	}
	pack := func(compress bool, rrs ...dns.RR) *Msg {
		m := new(dns.Msg)
		m.SetQuestion("example.", dns.TypeANY)
		m.Compress = compress
		m.Answer = rrs
		raw, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return mustParse(t, raw)
	}
	a, b := pack(true, parsed...), pack(false, parsed...)
	for i := range parsed {
		for j := range parsed {
			want := dns.IsDuplicate(parsed[i], parsed[j])
			if got := SameRecord(a, i, b, j); got != want {
				t.Errorf("SameRecord(%q, %q) = %v, IsDuplicate %v", rrs[i], rrs[j], got, want)
			}
		}
	}
}

// The question's section and its name in place are the bytes miekg/dns
// packed them to; a compressed question name is not in place.
func TestQuestionInPlace(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("Www.Example.", dns.TypeAAAA)
	raw, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	v := mustParse(t, raw)
	name, ok := v.QuestionInPlace()
	if !ok || string(name) != string(mustWire(t, "Www.Example.")) ||
		string(v.QuestionSection()) != string(raw[HeaderLen:]) {
		t.Fatalf("in place %q %v, section % x", name, ok, v.QuestionSection())
	}
	// A question whose name is a pointer to "x." after it.
	compressed := append(append([]byte(nil), raw[:HeaderLen]...), 0xC0, HeaderLen+6, 0, 1, 0, 1, 1, 'x', 0)
	if err := v.ParseQuestion(compressed); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.QuestionInPlace(); ok || !v.QuestionIs(mustWire(t, "X.")) {
		t.Error("a compressed question name read as in place")
	}
}
