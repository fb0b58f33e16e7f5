package resolver

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consul"
	"github.com/towerd/towerd/resolver/local"
)

// The Consul watch is the resolver's RecordSource. The check lives here
// because resolver/consul must not import the resolver; renaming Covers or
// Answer there breaks this package's tests at compile time.
var _ RecordSource = (*consul.Watcher)(nil)

// The watch writes its answers as bytes for the fast path
// (issue 34): renaming AppendAnswer would silently send them to ServeDNS.
var _ RecordAppender = (*consul.Watcher)(nil)

// Local data (issue 15) is a RecordSource too, for the same reason kept
// out of resolver/local; the daemon chains it before the Consul watch.
var _ RecordSource = (*local.Source)(nil)

// wrappedHandler is a handler that wraps towerd's, as a middleware would.
// Embedding *Handler keeps its packetAnswerer side.
type wrappedHandler struct{ *Handler }

var _ packetAnswerer = wrappedHandler{}

// A UDP socket bound to one address gets the fast path whenever the handler
// is a packetAnswerer, *Handler itself or a wrapper embedding it, and not
// otherwise: a fast-path hit counts in the cache's Hits without going
// through ServeDNS, which the wrapper would see.
func TestServerFindsTheFastPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(*Handler) dns.Handler
		fast bool
	}{
		{"handler", func(h *Handler) dns.Handler { return h }, true},
		{"embedding wrapper", func(h *Handler) dns.Handler { return wrappedHandler{h} }, true},
		{"plain wrapper", func(h *Handler) dns.Handler { return dns.HandlerFunc(h.ServeDNS) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := diffHandler(t, nil)
			srv := &Server{Handler: tc.h(h)}
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv.AddPacketConn(pc)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			})
			u, ok := srv.servers[0].(*udpServer)
			if !ok {
				t.Fatalf("socket served by %T, want towerd's UDP reader", srv.servers[0])
			}
			if got := u.fast != nil; got != tc.fast {
				t.Errorf("fast path %v, want %v", got, tc.fast)
			}
		})
	}
}

// Every Observer call of a fast-path hit and of ServeDNS carries the same
// Query for the same question (one observe call, one request value).
func TestFastAndGeneralObserveTheSame(t *testing.T) {
	var got []Query
	obs := observerFunc(func(q Query) { got = append(got, q) })
	h, _ := diffHandler(t, obs)
	pkt := variant{name: "www.example.", qtype: dns.TypeA, edns: true, size: 1232}.pack(t)
	generalReply(h, pkt) // miss
	generalReply(h, pkt) // general hit
	var q plainQuery
	if _, ok := h.answerPacket(nil, pkt, netip.MustParseAddrPort("127.0.0.1:53000"), false, &q); !ok {
		t.Fatal("fast path declined a warm hit")
	}
	if len(got) != 3 {
		t.Fatalf("%d observations, want 3", len(got))
	}
	general, fast := got[1], got[2]
	general.Duration, fast.Duration = 0, 0
	if general != fast || fast.Source != SourceCache || fast.Proto != "udp" || fast.Qtype != dns.TypeA || fast.Zone != "." {
		t.Errorf("general %+v, fast %+v", general, fast)
	}
}

type observerFunc func(Query)

func (f observerFunc) ObserveQuery(q Query) { f(q) }
