package resolver

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/upstream"
)

// named is an upstream that is never asked; routing only looks at names.
type named string

func (n named) StartWire(*upstream.WireCall, upstream.WireQuery, upstream.WireReceiver) {
	panic("not used")
}
func (n named) AllDown() bool                  { return false }
func (n named) AllDownSignal() <-chan struct{} { return nil }
func (n named) RecoveredSince(time.Time) bool  { return false }
func (n named) Address() string                { return string(n) }

func TestRouteLongestSuffix(t *testing.T) {
	r, err := newRouter([]Zone{
		{Name: ".", Upstream: named("root")},
		{Name: "Consul.", Upstream: named("consul")},
		{Name: "corp.example.", Upstream: named("corp")},
		{Name: "db.corp.example.", Upstream: named("db")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"example.org.", "root"},
		{"x.service.consul.", "consul"},
		{"X.SERVICE.CONSUL", "consul"},
		{"consul.", "consul"},
		{"notconsul.", "root"},
		{"a.corp.example.", "corp"},
		{"A.CoRp.ExAmple.", "corp"},
		{"x.db.corp.example.", "db"},
		{"xdb.corp.example.", "corp"},
		{".", "root"},
	} {
		if got := r.route(tc.name).Upstream.Address(); got != tc.want {
			t.Errorf("route(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRouterNeedsRootAndUniqueZones(t *testing.T) {
	if _, err := newRouter([]Zone{{Name: "consul.", Upstream: named("c")}}); err == nil {
		t.Error("no root zone accepted")
	}
	if _, err := newRouter([]Zone{{Name: ".", Upstream: named("a")}, {Name: ".", Upstream: named("b")}}); err == nil {
		t.Error("duplicate zone accepted")
	}
}

func TestAcceptRequest(t *testing.T) {
	const qr, update = 1 << 15, dns.OpcodeUpdate << 11
	for _, tc := range []struct {
		name string
		h    dns.Header
		want dns.MsgAcceptAction
	}{
		{"query", dns.Header{Qdcount: 1}, dns.MsgAccept},
		{"no question", dns.Header{Qdcount: 0}, dns.MsgReject},
		{"two questions", dns.Header{Qdcount: 2}, dns.MsgReject},
		{"update", dns.Header{Bits: update, Qdcount: 1}, dns.MsgRejectNotImplemented},
		{"response", dns.Header{Bits: qr, Qdcount: 1}, dns.MsgIgnore},
	} {
		if got := AcceptRequest(tc.h); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.UDPAddr{IP: net.ParseIP("127.0.0.1")}, true},
		{&net.TCPAddr{IP: net.ParseIP("::1")}, true},
		{&net.UDPAddr{IP: net.ParseIP("::ffff:127.0.0.9")}, true},
		{&net.UDPAddr{IP: net.ParseIP("192.0.2.1")}, false},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1")}, false},
	} {
		// As ServeDNS reads a client: its address off the writer
		// (request.fromMsg), then admission's allow-list check.
		_, tcp := tc.addr.(*net.TCPAddr)
		var r request
		r.fromMsg(new(dns.Msg), &memWriter{tcp: tcp, remote: tc.addr})
		if got := allowedAddr(allow, r.client); got != tc.want {
			t.Errorf("allowedAddr(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
}
