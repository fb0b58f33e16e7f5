package test

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAllowList: a client outside `allow` gets REFUSED, over UDP and TCP,
// and its query never reaches an upstream.
func TestAllowList(t *testing.T) {
	t.Parallel()
	def, consul := newTestUpstream(t), newTestUpstream(t)
	def.Add(t, "allowed.example. 300 IN A 192.0.2.40")
	cfg := writeConfig(t, fmt.Sprintf(`allow = ["10.0.0.0/8"]

[[zone]]
name = "."
servers = [%q]

[[zone]]
name = "consul."
servers = [%q]
`, def.Addr, consul.Addr))
	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0")

	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			reply := mustExchange(t, d.UDP, network, query("allowed.example.", dns.TypeA, true))
			if reply.Rcode != dns.RcodeRefused || len(reply.Answer) != 0 {
				t.Errorf("rcode %s with %d records, want REFUSED and none", dns.RcodeToString[reply.Rcode], len(reply.Answer))
			}
		})
	}
	// A client that is refused everything must not be able to do anything
	// else either, least of all stop the daemon.
	t.Run("header-only packet", func(t *testing.T) {
		rawUDP(t, d.UDP, header(0x2001, 0x0100, 1, 0, 0, 0), 500*time.Millisecond)
		reply, err := exchange(d.UDP, "udp", query("allowed.example.", dns.TypeA, true))
		if err != nil || reply.Rcode != dns.RcodeRefused {
			t.Errorf("query after a header-only packet: %v, %v; want REFUSED (towerd running: %v)", reply, err, d.running())
		}
	})
	if got := def.Count("allowed.example.", dns.TypeA); got != 0 {
		t.Errorf("upstream saw %d queries from a refused client, want 0", got)
	}
}

// A packet that ends right after a header counting one question parses in
// miekg/dns as a message with no question and no error; it once reached
// Handler.ServeDNS's r.Question[0] and took the daemon down, before the
// allow-list check. It must get FORMERR.

// noReply stands for "towerd sends nothing back" among expected rcodes.
const noReply = -1

// TestMalformedRequests sends hand-made packets over UDP. Each gets the
// rcode the DNS rules ask for (or no reply), and a normal query still
// answers correctly after each: nothing a client sends may crash or wedge
// towerd.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	s.def.Add(t, "ok.example. 300 IN A 192.0.2.1")

	tests := []struct {
		name   string
		packet []byte
		want   []int // acceptable outcomes: rcodes, or noReply
	}{
		{"truncated header (5 bytes)", header(0x1001, 0x0100, 1, 0, 0, 0)[:5], []int{noReply}},
		{"QDCOUNT 0", packed(t, func(m *dns.Msg) { m.Question = nil }), []int{dns.RcodeFormatError}},
		{"QDCOUNT 2", packed(t, func(m *dns.Msg) {
			m.Question = append(m.Question, dns.Question{Name: "two.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
		}), []int{dns.RcodeFormatError}},
		// Observed: the header is fine, the question does not parse: FORMERR.
		{"label running past the end", append(header(0x1004, 0x0100, 1, 0, 0, 0), 63, 'a', 'b', 'c'), []int{dns.RcodeFormatError}},
		// A header that promises a question the packet does not hold.
		{"QDCOUNT 1 with no question bytes", header(0x1005, 0x0100, 1, 0, 0, 0), []int{dns.RcodeFormatError}},
		{"UPDATE opcode", packed(t, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate }), []int{dns.RcodeNotImplemented}},
		{"AXFR over UDP", packed(t, func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAXFR }), []int{dns.RcodeRefused}},
		{"IXFR over UDP", packed(t, func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeIXFR }), []int{dns.RcodeRefused}},
		{"class CHAOS", packed(t, func(m *dns.Msg) {
			m.Question[0] = dns.Question{Name: "version.bind.", Qtype: dns.TypeTXT, Qclass: dns.ClassCHAOS}
		}), []int{dns.RcodeRefused}},
		// RFC 6891 §6.1.3.
		{"EDNS version 1", packed(t, func(m *dns.Msg) { m.SetEdns0(1232, false).IsEdns0().SetVersion(1) }), []int{dns.RcodeBadVers}},
		// A response is never answered: that would make towerd a reflector.
		{"QR bit set", packed(t, func(m *dns.Msg) { m.Response = true }), []int{noReply}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wait := 2 * time.Second
			if slices.Equal(tc.want, []int{noReply}) {
				wait = 500 * time.Millisecond // how long silence is given to prove itself
			}
			got := noReply
			if raw := rawUDP(t, s.d.UDP, tc.packet, wait); raw != nil {
				reply := new(dns.Msg)
				if err := reply.Unpack(raw); err != nil {
					t.Fatalf("unparsable reply %x: %v", raw, err)
				}
				if id := binary.BigEndian.Uint16(tc.packet); reply.Id != id {
					t.Errorf("reply ID %#x, want the query's %#x", reply.Id, id)
				}
				if !reply.Response {
					t.Errorf("reply without QR")
				}
				got = reply.Rcode
			}
			t.Logf("outcome: %s", outcome(got))
			if !slices.Contains(tc.want, got) {
				var want []string
				for _, w := range tc.want {
					want = append(want, outcome(w))
				}
				t.Errorf("outcome %s, want one of %v", outcome(got), want)
			}

			reply, err := exchange(s.d.UDP, "udp", query("ok.example.", dns.TypeA, true))
			if err != nil {
				t.Fatalf("normal query after the bad packet: %v (towerd running: %v)", err, s.d.running())
			}
			if reply.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(reply.Answer), []string{"192.0.2.1"}) {
				t.Errorf("normal query after the bad packet: rcode %s, answer %v; want NOERROR 192.0.2.1",
					dns.RcodeToString[reply.Rcode], reply.Answer)
			}
		})
	}
}

// header builds a 12-byte DNS header.
func header(id, flags, qd, an, ns, ar uint16) []byte {
	h := make([]byte, 12)
	for i, v := range []uint16{id, flags, qd, an, ns, ar} {
		binary.BigEndian.PutUint16(h[2*i:], v)
	}
	return h
}

// packed returns the wire form of "ok.example. IN A" (RD set, random ID)
// after edit has changed it.
func packed(t *testing.T, edit func(*dns.Msg)) []byte {
	t.Helper()
	m := query("ok.example.", dns.TypeA, false)
	edit(m)
	wire, err := m.Pack()
	if err != nil {
		t.Fatalf("packing test packet: %v", err)
	}
	return wire
}

func outcome(rcode int) string {
	switch rcode {
	case noReply:
		return "no reply"
	case dns.RcodeBadVers: // shares 16 with BADSIG, the name miekg/dns prints
		return "BADVERS"
	}
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return fmt.Sprintf("rcode %d", rcode)
}
