package dnswire

import (
	"testing"

	"github.com/miekg/dns"
)

// oneAnswer is a reply to x.example./A with one A record, TTL 60, and
// the records more adds (in mustMsg's form).
func oneAnswer(tb testing.TB, more ...string) *dns.Msg {
	tb.Helper()
	return mustMsg(tb, "x.example.", dns.TypeA, append([]string{"x.example. 60 IN A 192.0.2.1"}, more...)...)
}

// The header encoder writes what miekg/dns reads, and reads what it
// writes.
func TestHeaderRoundTrip(t *testing.T) {
	m := oneAnswer(t)
	m.Id, m.Response, m.Truncated, m.RecursionDesired, m.Rcode = 0xbeef, true, true, true, dns.RcodeNameError
	m.SetEdns0(1232, false)
	raw := pack(t, m, false)
	h, ok := ReadHeader(raw)
	if !ok || h.ID != 0xbeef || h.QDCount != 1 || h.ANCount != 1 || h.NSCount != 0 || h.ARCount != 1 ||
		h.Rcode() != dns.RcodeNameError || h.Flags&FlagTC == 0 || h.Flags&FlagQR == 0 || !Truncated(raw) {
		t.Fatalf("ReadHeader = %+v, %v", h, ok)
	}
	out := h.Append([]byte{0xff})
	if len(out) != 1+HeaderLen || string(out[1:]) != string(raw[:HeaderLen]) {
		t.Fatalf("Append wrote % x, want % x", out[1:], raw[:HeaderLen])
	}
	SetID(out[1:], 0x1234)
	if h2, _ := ReadHeader(out[1:]); h2.ID != 0x1234 {
		t.Errorf("SetID: ID %#x", h2.ID)
	}
	if _, ok := ReadHeader(raw[:HeaderLen-1]); ok || Truncated(raw[:3]) {
		t.Error("a message shorter than a header read as one")
	}
}

// SetTTL writes the TTL miekg/dns reads.
func TestSetTTL(t *testing.T) {
	m := oneAnswer(t)
	raw := pack(t, m, false)
	v := mustParse(t, raw)
	SetTTL(raw, int(v.RR(0).TTLAt), 86400)
	if err := m.Unpack(raw); err != nil || m.Answer[0].Header().Ttl != 86400 {
		t.Fatalf("TTL %d (%v), want 86400", m.Answer[0].Header().Ttl, err)
	}
}

// CapTTL only lowers; SetSOASerial writes the serial miekg/dns reads,
// whatever the SOA's names.
func TestCapTTLAndSOASerial(t *testing.T) {
	m := oneAnswer(t, ";", "example. 30 IN SOA ns.example. hostmaster.x.example. 1 2 3 4 5")
	raw := pack(t, m, false)
	v := mustParse(t, raw)
	CapTTL(raw, int(v.RR(0).TTLAt), 90) // above: unchanged
	CapTTL(raw, int(v.RR(1).TTLAt), 10) // below: lowered
	SetSOASerial(raw, int(v.RR(1).TTLAt), 1765000000)
	if err := m.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	soa := m.Ns[0].(*dns.SOA)
	if m.Answer[0].Header().Ttl != 60 || soa.Hdr.Ttl != 10 || soa.Serial != 1765000000 ||
		soa.Refresh != 2 || soa.Retry != 3 || soa.Expire != 4 || soa.Minttl != 5 {
		t.Fatalf("A TTL %d, SOA %v; want 60 and TTL 10, serial 1765000000, the rest unchanged", m.Answer[0].Header().Ttl, soa)
	}
}
