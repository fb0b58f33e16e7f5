// Package resolver answers DNS queries: request checks, routing to a zone's
// upstream, the cache with serve-stale and prefetch, coalescing of identical
// misses, and answer shaping. It is straight code, not a plugin chain:
// ServeDNS → checks → route → cache → coalesce → upstream → store → write.
package resolver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// Where an answer came from, for metrics and logs.
const (
	SourceCache    = "cache"    // fresh cache hit
	SourceStale    = "stale"    // expired entry served because refreshing failed
	SourceUpstream = "upstream" // the upstream's reply (or SERVFAIL after it failed)
	SourceLocal    = "local"    // decided by towerd itself: REFUSED, BADVERS
	SourceRecords  = "consul"   // pushed records (Config.Records), fresh
)

// Handler is towerd's dns.Handler.
type Handler struct {
	cache    *cache.Cache
	settings atomic.Pointer[settings]
	flights  *flights
	log      *slog.Logger
	obs      Observer
}

// Observer receives one call per answered query; metrics implement it.
type Observer interface {
	ObserveQuery(q Query)
}

// Query describes one answered query for an Observer.
type Query struct {
	Proto    string // "udp" or "tcp"
	Qtype    uint16
	Zone     string
	Source   string // SourceCache, SourceStale, SourceUpstream, SourceLocal
	Rcode    int
	Duration time.Duration
	Prefetch bool // a prefetch was started by this hit
}

// NewHandler returns a handler answering from c and cfg's zones. log and obs
// may be nil.
func NewHandler(cfg Config, c *cache.Cache, log *slog.Logger, obs Observer) (*Handler, error) {
	s, err := newSettings(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cache: c, flights: newFlights(), log: log, obs: obs}
	h.settings.Store(s)
	return h, nil
}

// Reconfigure swaps in a new configuration. Queries already running finish
// with the old one; the cache is kept.
func (h *Handler) Reconfigure(cfg Config) error {
	s, err := newSettings(cfg)
	if err != nil {
		return err
	}
	h.settings.Store(s)
	return nil
}

// Inflight returns how many upstream resolutions are running.
func (h *Handler) Inflight() int { return h.flights.count() }

// InflightRejections returns how many queries and prefetches found the
// in-flight cap full since the handler started.
func (h *Handler) InflightRejections() uint64 { return h.flights.rejections() }

// InflightCap returns the in-flight cap of the running configuration.
func (h *Handler) InflightCap() int { return h.settings.Load().MaxInflight }

// ZoneOf returns the zone the running configuration routes qname to.
func (h *Handler) ZoneOf(qname string) string { return h.settings.Load().router.route(qname).Name }

// Close abandons running upstream resolutions and waits for them. Call it
// after the listeners have drained.
func (h *Handler) Close() { h.flights.close() }

// ServeDNS implements dns.Handler. The request has passed AcceptRequest, so it
// is a QUERY whose header counts one question.
func (h *Handler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	s := h.settings.Load()
	start := s.Now()
	a := answer{w: w, req: r, s: s}
	if len(r.Question) != 1 {
		// A header that promises a question the packet does not carry parses
		// without error in miekg/dns; answer it like QDCOUNT 0.
		if h.obs != nil {
			h.obs.ObserveQuery(Query{Proto: a.proto(), Source: SourceLocal, Rcode: dns.RcodeFormatError,
				Duration: s.Now().Sub(start)})
		}
		a.rcode(dns.RcodeFormatError)
		return
	}
	q := r.Question[0]
	zone := s.router.route(q.Name)

	// Every answer is observed just before it is written, so a client that
	// has its answer is already counted: /metrics never lags behind it.
	record := func(source string, rcode int, prefetch bool) {
		if h.obs != nil {
			h.obs.ObserveQuery(Query{Proto: a.proto(), Qtype: q.Qtype, Zone: zone.Name, Source: source,
				Rcode: rcode, Duration: s.Now().Sub(start), Prefetch: prefetch})
		}
	}

	if rcode, refuse := h.check(s, w, r); refuse {
		record(SourceLocal, rcode, false)
		a.rcode(rcode)
		return
	}

	if s.Records != nil {
		if m, stale, ok := s.Records.Lookup(q); ok {
			source := SourceRecords
			if stale {
				source = SourceStale
			}
			// Pushed records carry their own TTLs; a stale source keeps them
			// (they are the last known truth) but the answer is marked stale.
			record(source, m.Rcode, false)
			a.records(m, stale)
			return
		}
	}

	opt := r.IsEdns0()
	key := cache.NewKey(q.Name, q.Qtype, q.Qclass, opt != nil && opt.Do(), r.CheckingDisabled)
	res, found := h.cache.Get(key)
	if found && res.Fresh {
		prefetch := s.wantsPrefetch(res.TTL, res.Remaining)
		if prefetch {
			// join starts at most one refresh per key: a running flight is reused.
			h.flights.join(key, s.MaxInflight, h.resolver(s, zone, key))
		}
		record(SourceCache, res.Msg.Rcode, prefetch)
		a.msg(res.Msg, false)
		return
	}
	var stale *dns.Msg
	if found && s.ServeStale {
		stale = res.Msg
	}

	// RFC 8767 §4: after a failed refresh, keep answering stale for a while
	// without asking the upstream again, so a dead upstream is not hammered.
	if stale != nil && !res.RefreshFailedAt.IsZero() && start.Sub(res.RefreshFailedAt) < s.FailureRecheck {
		h.fail(a, stale, record)
		return
	}

	fl, _, ok := h.flights.join(key, s.MaxInflight, h.resolver(s, zone, key))
	if !ok {
		h.log.Debug("in-flight cap reached", "max_inflight", s.MaxInflight, "name", q.Name)
		h.fail(a, stale, record)
		return
	}

	wait := s.QueryTimeout
	var zoneDown <-chan struct{} // nil, never ready, unless a stale answer waits
	if stale != nil {
		wait = min(wait, s.StaleClientTimeout)
		zoneDown = downSignal(zone.Upstream)
		if knownDown(zone.Upstream) {
			// Every server of the zone has failed repeatedly: waiting out the
			// client response timer would only delay the stale answer it
			// will get anyway. The refresh still runs, as a probe.
			wait = 0
		}
	}
	if wait == 0 && stale != nil {
		// Immediate mode: the refresh goes on in the background.
		h.fail(a, stale, record)
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-fl.done:
	case <-timer.C:
		h.fail(a, stale, record)
		return
	case <-zoneDown:
		// The zone's last server was marked down while this client waited:
		// as above, the stale answer is due now.
		h.fail(a, stale, record)
		return
	}
	if fl.err != nil {
		h.fail(a, stale, record)
		return
	}
	record(SourceUpstream, fl.msg.Rcode, false)
	a.msg(fl.msg, false)
}

// fail answers a query that gets no fresh upstream reply (the refresh failed,
// is not due, or is not waited for): stale when there is something to serve,
// else SERVFAIL.
func (h *Handler) fail(a answer, stale *dns.Msg, record func(string, int, bool)) {
	if stale != nil {
		record(SourceStale, stale.Rcode, false)
		a.msg(stale, true)
		return
	}
	record(SourceUpstream, dns.RcodeServerFailure, false)
	a.rcode(dns.RcodeServerFailure)
}

// resolver returns the function a flight runs for key: ask the zone's
// upstream, then apply the store policy.
func (h *Handler) resolver(s *settings, zone Zone, key cache.Key) resolveFunc {
	return func(ctx context.Context) (*dns.Msg, error) {
		ctx, cancel := context.WithTimeout(ctx, s.UpstreamTimeout)
		defer cancel()
		reply, err := zone.Upstream.Exchange(ctx, upstreamQuery(key))
		if err == nil {
			switch reply.Rcode {
			case dns.RcodeSuccess:
				if stored, reason := h.cache.Set(key, reply); !stored {
					h.log.Debug("not cached", "name", key.Name, "type", dns.TypeToString[key.Type], "reason", reason)
				}
				return reply, nil
			case dns.RcodeNameError:
				// NXDOMAIN is an answer, not a failure: it is passed on and
				// never cached, and an old entry for the name must not come
				// back later as stale (the name is gone).
				h.cache.Remove(key)
				return reply, nil
			default:
				err = errUpstreamRcode{reply.Rcode}
			}
		}
		h.cache.MarkRefreshFailed(key)
		if !errors.Is(err, context.Canceled) {
			h.log.Debug("upstream failed", "zone", zone.Name, "name", key.Name,
				"type", dns.TypeToString[key.Type], "err", err)
		}
		return nil, err
	}
}

// downReporter is implemented by upstreams that track health (upstream.Group).
type downReporter interface{ AllDown() bool }

func knownDown(u upstream.Upstream) bool {
	d, ok := u.(downReporter)
	return ok && d.AllDown()
}

// downSignal returns upstream.Group.AllDownSignal's channel, nil for an
// upstream that does not track health.
func downSignal(u upstream.Upstream) <-chan struct{} {
	d, ok := u.(interface{ AllDownSignal() <-chan struct{} })
	if !ok {
		return nil
	}
	return d.AllDownSignal()
}

type errUpstreamRcode struct{ rcode int }

func (e errUpstreamRcode) Error() string {
	return "upstream answered " + dns.RcodeToString[e.rcode]
}

// upstreamQuery builds the question towerd sends for key: recursion desired,
// the client's DO and CD bits, and an EDNS buffer of 1232 bytes (the DNS flag
// day 2020 value, which avoids IP fragmentation).
func upstreamQuery(key cache.Key) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(key.Name, key.Type)
	m.Question[0].Qclass = key.Class
	m.CheckingDisabled = key.CD
	m.SetEdns0(advertisedUDPSize, key.DO)
	return m
}

// check applies the request rules that need no upstream. It returns the rcode
// to answer with and true when the query must not go further.
func (h *Handler) check(s *settings, w dns.ResponseWriter, r *dns.Msg) (int, bool) {
	if !allowed(s.Allow, w.RemoteAddr()) {
		return dns.RcodeRefused, true
	}
	if opt := r.IsEdns0(); opt != nil && opt.Version() != 0 {
		return dns.RcodeBadVers, true // RFC 6891 §6.1.3
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		return dns.RcodeRefused, true
	}
	switch q.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		// towerd holds no zones to transfer; refusing also keeps an open
		// TCP stream from being turned into an amplifier.
		return dns.RcodeRefused, true
	}
	return dns.RcodeSuccess, false
}

// allowed reports whether the client address is inside the allow-list.
func allowed(allow []netip.Prefix, remote net.Addr) bool {
	var ip netip.Addr
	switch a := remote.(type) {
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		return false
	}
	return allowedAddr(allow, ip)
}
