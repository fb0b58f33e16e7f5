package resolver

import (
	"net"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
	"github.com/towerd/towerd/upstream"
)

// Trace answers m the way ServeDNS answers a client at client over TCP (so
// no UDP size limit cuts the answer), and returns the reply with its
// observation: the source (cache, stale, upstream, consul, local), the
// upstream server that replied, the rcode, the time taken, and what decided
// (Query.Rule, Passed, Entry), recorded as the answer was made, never
// worked out beside it (issue 25). The query is real: it is counted, may
// fill the cache and appears in the query log. `towerd lookup` explains an
// answer with it (issue 15). The reply is nil when the handler wrote none.
func (h *Handler) Trace(m *dns.Msg, client netip.Addr) (*dns.Msg, Query) {
	w := &traceWriter{remote: &net.TCPAddr{IP: client.AsSlice(), Port: 0}}
	var q Query
	h.serve(w, m, &q)
	return w.reply, q
}

// traceWriter keeps the reply ServeDNS writes.
type traceWriter struct {
	remote net.Addr
	reply  *dns.Msg
}

var traceLocal = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}

func (w *traceWriter) LocalAddr() net.Addr  { return traceLocal }
func (w *traceWriter) RemoteAddr() net.Addr { return w.remote }
func (w *traceWriter) WriteMsg(m *dns.Msg) error {
	w.reply = m.Copy()
	return nil
}
func (w *traceWriter) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return 0, err
	}
	w.reply = m
	return len(b), nil
}
func (w *traceWriter) Close() error        { return nil }
func (w *traceWriter) TsigStatus() error   { return nil }
func (w *traceWriter) TsigTimersOnly(bool) {}
func (w *traceWriter) Hijack()             {}

// RecordsCover reports whether the running configuration's RecordSource
// (the Consul watch) may answer name, and whether there is one at all.
func (h *Handler) RecordsCover(name string) (covered, on bool) {
	s := h.settings.Load()
	if s.Records == nil {
		return false, false
	}
	return s.Records.Covers([]byte(dns.CanonicalName(name))), true
}

// ScopeOf is what the servers of the zone the running configuration
// routes name to are believed about (the scrubber's scope: the zone less
// the zones configured below it), and that zone's name.
func (h *Handler) ScopeOf(name string) (zone string, scope upstream.Scope) {
	z := h.settings.Load().router.route(name)
	wire, _ := dnswire.AppendWireName(nil, z.Name)
	return z.Name, upstream.Scope{Zone: wire, Below: z.below}
}
