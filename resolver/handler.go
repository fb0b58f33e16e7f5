package resolver

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// Where an answer came from, for metrics and logs.
const (
	SourceCache    = "cache"    // fresh cache hit
	SourceStale    = "stale"    // expired entry served because refreshing failed
	SourceUpstream = "upstream" // the upstream's reply (or SERVFAIL after it failed)
	SourceLocal    = "local"    // decided by towerd itself: REFUSED, BADVERS, local data (Chain)
	SourceRecords  = "consul"   // pushed records (Config.Records), fresh
	SourceSearch   = "search"   // a search-list try's NXDOMAIN the client did not wait for (searchahead.go)
)

// Handler is towerd's dns.Handler.
type Handler struct {
	cache    *cache.Cache
	settings atomic.Pointer[settings]
	flights  *flights
	log      *slog.Logger
	obs      Observer

	// The search-list rules (searchahead.go): the NXDOMAINs they hold and
	// their counters.
	held        *heldTable
	searchStats searchStats

	// The query log (querylog.go): off by default, switched at runtime,
	// at most Config.QueryLogRate lines a second.
	logQueries atomic.Bool
	queryLog   *slog.Logger
	queryLines lineRate

	// DNSSEC verdicts (validate.go).
	dnssecStats dnssecStats

	// failures are the questions whose resolution failed lately
	// (failures.go, RFC 9520).
	failures *failureMemory
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
	Source   string // SourceCache, SourceStale, SourceUpstream, SourceLocal, SourceRecords, SourceSearch
	Server   string // host:port of the upstream server whose reply was relayed; "" otherwise
	Rcode    int
	Duration time.Duration
	Prefetch bool // a prefetch was started by this hit

	// What decided, for `towerd lookup` (Handler.Trace, issue 25); filled
	// on the general path. Rule is the why of the record source that
	// answered (RecordSource: "hosts FILE", "record", "address DOMAIN",
	// "local DOMAIN", "domain_needed", "bogus_priv", "watch"), or
	// RuleRequest for towerd's own REFUSED, FORMERR, NOTIMP or BADVERS.
	// Passed is why the source the name belongs to (the Consul watch) left
	// it to the cache and the upstreams. Entry, for an answer from the
	// cache (Source cache, or stale with no Rule), is how the entry came
	// into the cache.
	Rule   string
	Passed string
	Entry  cache.Origin
}

// RuleRequest is Query.Rule for an answer the request checks gave
// (admit): the client outside allow, an AXFR, a malformed query.
const RuleRequest = "request"

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
	h := &Handler{cache: c, flights: newFlights(c, s.Clock), log: log, obs: obs, queryLog: newQueryLog(log), held: newHeldTable(),
		failures: newFailureMemory()}
	h.flights.onPanic = func(v any, stack []byte) {
		log.Error("upstream resolution panicked", "panic", fmt.Sprint(v), "stack", string(stack))
	}
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

// ServeDNS implements dns.Handler: the general path of every route but the
// fast path's (see the package doc).
func (h *Handler) ServeDNS(w dns.ResponseWriter, m *dns.Msg) { h.serve(w, m, nil) }

// serve is ServeDNS; a non-nil trace receives the query's observation.
func (h *Handler) serve(w dns.ResponseWriter, m *dns.Msg, trace *Query) {
	s := h.settings.Load()
	start := s.Now()
	var r request
	r.fromMsg(m, w)
	r.trace = trace
	a := s.answer(w, m, &r)
	if rcode, ok := admit(s, &r); !ok {
		zone := ""
		if len(m.Question) == 1 {
			zone = s.router.route(m.Question[0].Name).Name
		}
		r.rule = RuleRequest
		h.observe(s, &r, zone, SourceLocal, rcode, start, false)
		a.rcode(rcode)
		return
	}
	q := m.Question[0]
	zone := s.router.route(q.Name)
	record := func(source string, rcode int, prefetch bool) {
		h.observe(s, &r, zone.Name, source, rcode, start, prefetch)
	}

	body, bodyStale, source, why, answered := lookupRecords(s.Records, q)
	if answered {
		r.rule = why
		if bodyStale {
			source = SourceStale
		}
		// Pushed and local records carry their own TTLs; a stale source
		// keeps them (they are the last known truth) but the answer is
		// marked stale. They never enter the cache.
		record(source, body.Rcode, false)
		a.records(body, bodyStale)
		return
	}
	r.passed = why

	key := cache.NewKey(q.Name, q.Qtype, q.Qclass, r.do, r.cd())
	res, found := h.cache.Get(key)
	r.entry = res.Origin
	if found && res.Fresh {
		prefetch := h.prefetch(s, zone, key, res.TTL, res.Remaining)
		record(SourceCache, res.Msg.Rcode, prefetch)
		a.msg(res.Msg, false)
		return
	}
	var stale *dns.Msg
	if found && s.ServeStale {
		stale = res.Msg
		a.entryTTL = res.TTL
	}

	fl, plan := joinedFlight(w), missWait
	if fl == nil {
		search := searchNone
		if !found {
			search = s.searchRoleOf(key) // a name with an entry existed: its lookup ends there
		}
		fl, plan = h.planMiss(s, zone, key, stale != nil, res.RefreshFailedAt, start, planStart, search)
	}
	if plan == missFallback {
		h.fail(a, stale, record)
		return
	}

	wait := s.QueryTimeout
	var zoneDown <-chan struct{} // nil, never ready, unless a stale answer waits
	if stale != nil {
		zoneDown = zone.Upstream.AllDownSignal()
		if wait = s.staleWait(fl, zone, res.TTL, res.Expired); wait == 0 {
			// Immediate mode: the refresh goes on in the background.
			h.fail(a, stale, record)
			return
		}
	}
	// The client waits as every waiter does (deadlines.go): woken when the
	// flight ends or its deadline passes.
	if w := h.flights.wait(fl, h.flights.clock.Now().Add(wait)); w != nil {
		select {
		case timedOut := <-w.woken:
			release(w)
			if timedOut {
				h.fail(a, stale, record)
				return
			}
		case <-zoneDown:
			// The zone's last server was marked down while this client
			// waited: as above, the stale answer is due now.
			h.flights.leave(w)
			h.fail(a, stale, record)
			return
		}
	}
	if fl.err != nil {
		if stale == nil {
			r.upstream = fl.server // the server whose SERVFAIL or REFUSED ended it, if any
		}
		a.sh.failEDE = bogusEDE(fl.err)
		h.fail(a, stale, record)
		return
	}
	r.upstream = fl.server
	msg := fl.message()
	record(fl.answerSource(), msg.Rcode, false)
	a.msg(msg, false)
}

// flightJoiner is the ResponseWriter of a query the fast path declined
// after its miss decision joined or started the question's refresh
// (plainQuery.joined): the UDP and TCP readers' writers.
type flightJoiner interface {
	joinedFlight() *flight
}

// joinedFlight is the flight the fast path joined for the query w answers,
// nil when it joined none. ServeDNS then waits for that flight whatever
// the cache shows now: the fast path's decision was this client's one
// miss decision, and deciding again would ask the upstream a second time
// for one question when the refresh ended in NXDOMAIN (issue 34).
func joinedFlight(w dns.ResponseWriter) *flight {
	if j, ok := w.(flightJoiner); ok {
		return j.joinedFlight()
	}
	return nil
}

// prefetch starts the background refresh of a fresh hit that is due for one
// (Config.Prefetch) and reports whether this hit started it: a refresh
// already running for key is not started again, and the cap may refuse one.
func (h *Handler) prefetch(s *settings, zone Zone, key cache.Key, ttl, remaining time.Duration) bool {
	if !s.wantsPrefetch(ttl, remaining) {
		return false
	}
	fl, started, _ := h.flights.join(key, s.MaxInflight, resolution{h: h, s: s, zone: zone}, false, false)
	if started {
		fl.start()
	}
	return started
}

// missPlan is the miss decision's outcome for a question without a fresh
// answer.
type missPlan int

const (
	// missWait: a resolution for the key runs (joined or started): wait for
	// it, within the client's timers.
	missWait missPlan = iota
	// missFallback: answer at once, stale if there is something stale, else
	// SERVFAIL (h.fail).
	missFallback
	// missDecline: the fast path may not start or join a resolution; the
	// general path takes the query and decides again.
	missDecline
)

// planMode is what planMiss may do.
type planMode uint8

const (
	// planStart joins or starts a resolution for key, the caller's own
	// (ServeDNS).
	planStart planMode = iota
	// planStartAliased is planStart for a key that aliases a packet (the
	// fast path's stale answer): a flight it starts keeps a copy.
	planStartAliased
	// planLook starts nothing (the fast reject).
	planLook
)

// planMiss is the one miss decision of every route, for a question whose
// entry is stale (hasStale, refreshFailedAt) or missing. RFC 8767 §4: after
// a failed refresh, a stale answer is given without asking the upstream
// again for FailureRecheck, so a dead upstream is not hammered, unless a
// server of the zone has come back since (issue 23: forwarded Consul
// answers stayed stale for up to 30 s after the agent was back, watched
// ones were fresh at once). Otherwise a
// running resolution is joined or a new one started; with the in-flight cap
// full and none running for key, the answer is due at once (never queued).
// With planLook (the fast reject) nothing is started: it only learns
// whether the answer is the fallback, and declines otherwise. search is the
// miss's role to the search-list rules (settings.searchRoleOf): a try may
// be answered with a held NXDOMAIN, as a flight already done, and the
// resolution it starts asks its lookup's later names ahead
// (searchahead.go).
func (h *Handler) planMiss(s *settings, zone Zone, key cache.Key, hasStale bool, refreshFailedAt, now time.Time, mode planMode, search searchRole) (*flight, missPlan) {
	if hasStale && !refreshFailedAt.IsZero() && now.Sub(refreshFailedAt) < s.FailureRecheck &&
		!zone.Upstream.RecoveredSince(refreshFailedAt) {
		return nil, missFallback
	}
	// RFC 9520: a question that failed lately is SERVFAIL without asking
	// again (failures.go); with a stale answer the rule above decides.
	if !hasStale && h.failedLately(key, zone, now) {
		return nil, missFallback
	}
	if mode == planLook {
		// A resolution that may yield its slot (jostle.go): ServeDNS
		// yields it and starts this one.
		if h.flights.full(s.MaxInflight) && h.flights.canYield(h.yieldCutoff(s), key, s.MaxInflight) {
			return nil, missDecline
		}
		if h.flights.rejectNew(key, s.MaxInflight) {
			return nil, missFallback
		}
		return nil, missDecline
	}
	if search != searchNone {
		if fl, ok := h.searchAnswer(s, key); ok {
			return fl, missWait
		}
	}
	limit := s.MaxInflight
	if h.makeRoom(s, key) {
		// The slot the oldest resolution gave up is this question's
		// (jostle.go), though the yielded flight still counts until its
		// end is settled, and other questions that made room at the same
		// moment count too: each such join stands for a resolution whose
		// call has ended, so the calls running stay within the cap, and
		// the flights counted within twice it.
		limit += s.MaxInflight
	}
	fl, started, ok := h.flights.join(key, limit, resolution{h: h, s: s, zone: zone, search: search}, true, mode == planStartAliased)
	if !ok {
		h.log.Debug("in-flight cap reached", "max_inflight", s.MaxInflight, "name", key.Name)
		return nil, missFallback
	}
	if started {
		fl.start()
	}
	return fl, missWait
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
