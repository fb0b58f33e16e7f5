package dnswire

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"
)

// Every reply the encoder closes is byte for byte what miekg/dns packs for
// the same reply: error replies with and without a question, with OPT,
// with an EDE, with an extended rcode (BADVERS), and an answer of records.
func TestReplyMatchesMiekg(t *testing.T) {
	question := AppendQuestion(nil, mustWire(t, "Www.Example."), dns.TypeAAAA, dns.ClassINET)
	for _, tc := range []struct {
		name   string
		reply  Reply
		noQ    bool
		expect func() *dns.Msg
	}{
		{"FORMERR without question or OPT", Reply{ID: 7, Flags: FlagQR | FlagRD, Rcode: dns.RcodeFormatError}, true,
			func() *dns.Msg {
				m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: 7, Response: true, RecursionDesired: true, Rcode: dns.RcodeFormatError}}
				return m
			}},
		{"FORMERR with OPT, DO", Reply{ID: 7, Flags: FlagQR, Rcode: dns.RcodeFormatError, EDNS: true, UDPSize: 1232, DO: true}, true,
			func() *dns.Msg {
				m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: 7, Response: true, Rcode: dns.RcodeFormatError}}
				m.SetEdns0(1232, true)
				return m
			}},
		{"REFUSED", Reply{ID: 0xfffe, Flags: FlagQR | FlagRA | FlagRD | FlagCD, Rcode: dns.RcodeRefused, Questions: 1}, false,
			func() *dns.Msg {
				m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: 0xfffe, Response: true, RecursionAvailable: true, RecursionDesired: true,
					CheckingDisabled: true, Rcode: dns.RcodeRefused}}
				m.Question = []dns.Question{{Name: "Www.Example.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}}
				return m
			}},
		{"SERVFAIL with OPT and EDE 22", Reply{ID: 1, Flags: FlagQR | FlagRA, Rcode: dns.RcodeServerFailure, Questions: 1,
			EDNS: true, UDPSize: 1232, EDE: dns.ExtendedErrorCodeNoReachableAuthority}, false,
			func() *dns.Msg {
				m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: 1, Response: true, RecursionAvailable: true, Rcode: dns.RcodeServerFailure}}
				m.Question = []dns.Question{{Name: "Www.Example.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}}
				m.SetEdns0(1232, false)
				opt := m.IsEdns0()
				opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNoReachableAuthority})
				return m
			}},
		{"BADVERS", Reply{ID: 2, Flags: FlagQR | FlagRA, Rcode: dns.RcodeBadVers, Questions: 1, EDNS: true, UDPSize: 1232}, false,
			func() *dns.Msg {
				m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: 2, Response: true, RecursionAvailable: true, Rcode: dns.RcodeBadVers}}
				m.Question = []dns.Question{{Name: "Www.Example.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}}
				m.SetEdns0(1232, false)
				return m
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := question
			if tc.noQ {
				q = nil
			}
			got := AppendEmptyReply([]byte{0xAA}, q, tc.reply)[1:]
			want, err := tc.expect().Pack()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoder wrote\n% x\nmiekg/dns packs\n% x", got, want)
			}
		})
	}
}

// Close frames records written after StartReply as miekg/dns frames them:
// counts, the AD bit, the OPT record after the additional records.
func TestReplyCloseAroundRecords(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("x.example.", dns.TypeA)
	m.Id, m.Response, m.AuthenticatedData, m.Rcode = 9, true, true, dns.RcodeSuccess
	a := func(ip byte) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: []byte{192, 0, 2, ip}}
	}
	m.Answer = []dns.RR{a(1), a(2)}
	m.Extra = []dns.RR{a(3)}
	m.SetEdns0(1232, true)
	want, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	view := mustParse(t, want)
	dst, at := StartReply([]byte("prefix"), want[HeaderLen:view.QEnd])
	from, _ := view.Range(Answer)
	dst = append(dst, want[view.QEnd:view.RR(from+3).Name]...) // the three A records (no names compressed to before them)
	r := Reply{ID: 9, Flags: FlagQR | FlagRD | FlagAD, Questions: 1, Answer: 2, Additional: 1, EDNS: true, UDPSize: 1232, DO: true}
	dst = r.Close(dst, at)
	if string(dst[:6]) != "prefix" || !bytes.Equal(dst[6:], want) {
		t.Fatalf("closed\n% x\nmiekg/dns packs\n% x", dst[6:], want)
	}
}

// A query is what miekg/dns packs for it, with and without EDNS.
func TestAppendQueryMatchesMiekg(t *testing.T) {
	for _, edns := range []bool{false, true} {
		m := new(dns.Msg)
		m.SetQuestion("Name.Example.", dns.TypeSRV)
		m.Id, m.RecursionDesired, m.CheckingDisabled = 0x4242, true, true
		if edns {
			m.SetEdns0(1232, true)
		}
		want, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		got := AppendQuery(nil, 0x4242, FlagRD|FlagCD, mustWire(t, "Name.Example."), dns.TypeSRV, dns.ClassINET, edns, 1232, true)
		if !bytes.Equal(got, want) {
			t.Errorf("edns %v: AppendQuery wrote\n% x\nmiekg/dns packs\n% x", edns, got, want)
		}
	}
}

func mustWire(t *testing.T, text string) []byte {
	t.Helper()
	name, ok := AppendWireName(nil, text)
	if !ok {
		t.Fatalf("%q is no name", text)
	}
	return name
}
