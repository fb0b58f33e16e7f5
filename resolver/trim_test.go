package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consulcut"
)

// bigSRV is Consul's answer for a service of n instances with addresses
// of their own: an SRV record each, then in the additional section each
// target's address and its node's meta (three TXT records).
func bigSRV(t *testing.T, n int) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("big.service.consul.", dns.TypeSRV)
	for i := range n {
		target := fmt.Sprintf("0a0000%02x.addr.dc1.consul.", i+1)
		for _, s := range []string{
			fmt.Sprintf("big.service.consul. 0 IN SRV 1 1 %d %s", 8000+i, target),
		} {
			rr, _ := dns.NewRR(s)
			m.Answer = append(m.Answer, rr)
		}
		for _, s := range []string{
			fmt.Sprintf("%s 0 IN A 10.0.0.%d", target, i+1),
			`node.node.dc1.consul. 0 IN TXT "rack=r1"`, `node.node.dc1.consul. 0 IN TXT "zone=z9"`,
		} {
			rr, _ := dns.NewRR(s)
			m.Extra = append(m.Extra, rr)
		}
	}
	return m
}

// Consul's trimUDPResponse, as towerd does it: without EDNS the answer
// limit (and each SRV target's first additional record); with EDNS as many
// records as fit, counted compressed, with room for the reply core's OPT;
// whatever remains keeps at least one record and carries no TC.
func TestTrimLikeConsul(t *testing.T) {
	for _, tc := range []struct {
		limit       int
		edns        bool
		answerLimit int
		room        int
		want        int // answer records
	}{
		{512, false, 3, 0, 3},
		{512, false, 20, 0, -1}, // at most Consul's maxUDPAnswerLimit, 8, counted uncompressed
		{1232, true, 3, 11, -1},
		{512, true, 3, 11, -1}, // EDNS at 512: the answer limit applies too
	} {
		out := bigSRV(t, 25)
		cutMsgLikeConsul(out, consulcut.Class{Limit: tc.limit, EDNS: tc.edns, AnswerLimit: tc.answerLimit, Room: tc.room})
		n := len(out.Answer)
		if n > consulcut.MaxAnswers && !tc.edns {
			t.Errorf("%+v: %d answer records without EDNS, want at most %d", tc, n, consulcut.MaxAnswers)
		}
		if tc.want >= 0 && n != tc.want {
			t.Errorf("%+v: %d answer records, want %d", tc, n, tc.want)
		}
		if n < 1 || n == 25 || out.Len() > tc.limit-tc.room || out.Truncated {
			t.Errorf("%+v: %d records, %d bytes, TC %v; want fewer than 25 that fit %d bytes, no TC", tc, n, out.Len(), out.Truncated, tc.limit-tc.room)
		}
		// The additional section: one address per target, no node meta.
		if len(out.Extra) != n {
			t.Errorf("%+v: %d additional records for %d SRV records, want one address each", tc, len(out.Extra), n)
		}
		for i, rr := range out.Extra {
			if a, ok := rr.(*dns.A); !ok || a.Hdr.Name != out.Answer[i].(*dns.SRV).Target {
				t.Errorf("%+v: additional record %d is %v, want the address of %s", tc, i, rr, out.Answer[i].(*dns.SRV).Target)
			}
		}
	}
	// An answer that fits is left alone, additional section included.
	out := bigSRV(t, 2)
	cutMsgLikeConsul(out, consulcut.Class{Limit: 1232, EDNS: true, AnswerLimit: 3, Room: 11})
	if len(out.Answer) != 2 || len(out.Extra) != 6 {
		t.Errorf("an answer that fits: %d answer and %d additional records, want 2 and 6", len(out.Answer), len(out.Extra))
	}
}

// An answer is spelled as a cache hit's bytes spell it: the names that
// compression points into the question (its own, and the tails it shares
// with it) follow the client's letter case, the others (an SRV target,
// never compressed, and the name compressed onto it) the upstream's.
func TestSpelled(t *testing.T) {
	body := bigSRV(t, 1)
	meta, _ := dns.NewRR(`meta.service.consul. 0 IN TXT "x"`)
	body.Extra = append(body.Extra, meta)
	got := spelled(body, []dns.Question{{Name: "BIG.Service.Consul.", Qtype: dns.TypeSRV, Qclass: dns.ClassINET}})
	if got == body {
		t.Fatal("not spelled for a question in another case")
	}
	if name := got.Answer[0].Header().Name; name != "BIG.Service.Consul." {
		t.Errorf("answer owner %q, want the client's spelling", name)
	}
	if target := got.Answer[0].(*dns.SRV).Target; target != "0a000001.addr.dc1.consul." {
		t.Errorf("SRV target %q, want the upstream's spelling (never compressed)", target)
	}
	for i, want := range []string{"0a000001.addr.dc1.consul.", "node.node.dc1.consul.", "node.node.dc1.consul.", "meta.Service.Consul."} {
		// The first three compress onto the SRV target's spelling, the
		// last onto the question's "service.consul.".
		if name := got.Extra[i].Header().Name; name != want {
			t.Errorf("additional owner %d %q, want %q", i, name, want)
		}
	}
	if same := spelled(body, body.Question); same != body {
		t.Error("a question already spelled so made a copy")
	}
	if body.Answer[0].Header().Name != "big.service.consul." {
		t.Error("spelled changed its argument")
	}
}
