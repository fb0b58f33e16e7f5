package resolver

import (
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// Search-list lookups (issue 28). glibc, Go's resolver and musl try a
// name under each search domain, one after another, A and AAAA each;
// every expansion that does not exist is an NXDOMAIN, which towerd never
// caches, so a Consul name under Kubernetes' ndots:5 waited two upstream
// round trips on every lookup. Three rules shorten that, all inside the
// one miss decision and the one resolution:
//
//  1. Ahead. When a client's try starts a resolution (flight.start), the
//     lookup's later candidates start theirs at once, as a prefetch does
//     (flights.join, then start, no waiter), up to the first candidate
//     the node knows something about (an entry in the cache, or an
//     answer of local data or the Consul watch), while at most half the
//     in-flight cap is taken: the lookup costs one round of upstream
//     questions in parallel, never more than the questions it would have
//     asked one after another. A name tried as it is first (at least
//     ndots dots) walks on only when it does not exist, so its
//     expansions are asked ahead only when a client asked its first
//     expansion within asIsEvidenceAge: otherwise every miss of a dotted
//     name would ask the list's length in questions for nothing.
//     Only a lookup's first try starts a round: the name as it is, or
//     the name under the list's first domain (for a dotted name the
//     first try that can start one, the as-is one needing evidence).
//     Under nested domains (ns1.svc.cluster.local svc.cluster.local
//     cluster.local) x.ns1.svc.cluster.local is also x.ns1 under the
//     second domain and x.ns1.svc under the third; when every reading
//     asked ahead, one random first try cost 13 upstream questions, not
//     the lookup's 6 (issue 35). A question that is only a later try
//     starts no round: a real lookup's later tries find the round its
//     first try started, and once that round's answers are gone they are
//     asked one by one, as without the rule. Nothing needs the later
//     readings' rounds: rule 2 serves what the first try's round asked,
//     and rule 3 reads every reading (knownLater) but asks nothing ahead.
//     So one question asks ahead at most its list's length per list, and
//     twice that only for a dotted name whose first expansion a client
//     asked within asIsEvidenceAge (docs/security.md, "Amplification").
//  2. The round's answers. A later try whose resolution asked ahead has
//     ended, with NXDOMAIN, is answered with it while no newer resolution
//     of the name runs, until the try that started the round has been
//     answered for SearchHold: a later lookup starts its own round and
//     waits for it, so each lookup asks every name again.
//  3. Hold. A try whose lookup ends at a name the node knows exists (a
//     fresh cache entry, an answer of local data or the Consul watch) is
//     answered with the upstream's last NXDOMAIN for it when that is at
//     most SearchHold old, and asked again behind the answer once it is
//     half that old. The lookup then ends at once at the name it would
//     have ended at. The price: a name that appears ahead of a known one
//     (db.corp.example created while db.ec2.internal answers) is seen
//     SearchHold (and one round trip) late; a name that appears where no
//     later name is known is seen at once, since rules 1 and 2 ask it
//     again on every lookup. 0 turns rule 3 off.
//
// Answers from rules 2 and 3 are the upstream's replies, TTLs counted
// down: no record is made up (no CNAME from the asked name, as CoreDNS's
// autopath answers, which a caching client keeps though the alias was
// never true), and which name a lookup ends at is the client's own walk.

// searchRole is what a question is to the search rules, fixed when its
// flight is made.
type searchRole uint8

const (
	// searchNone: the rules do not apply (another type, a name with a
	// cache entry, a refresh, the rules off).
	searchNone searchRole = iota
	// searchLater: a name a round may have asked ahead (the last try of
	// a lookup, or a name no list reads as a try): a held NXDOMAIN may
	// answer it (rule 2); its own resolution holds nothing.
	searchLater
	// searchTry: a client's try of a lookup (or rule 3's refresh of
	// one): its start asks the later names ahead (rule 1), and its
	// NXDOMAIN is held (rule 3).
	searchTry
	// searchAhead: a name asked ahead by a round (rule 1): its NXDOMAIN
	// answers the lookup's later try (rule 2).
	searchAhead
)

// searchStats are the rules' counters, read at scrape time (metrics.go).
type searchStats struct {
	fromRound, fromHold atomic.Uint64 // tries answered without waiting (rules 2, 3)
	ahead               atomic.Uint64 // resolutions started that no client waits for (rules 1, 3)
	skipped             atomic.Uint64 // candidates not asked ahead: the in-flight cap was half taken
}

// searchRoleOf is the role of a client's miss on key, for which the cache
// holds no entry: searchTry when a configured list reads its name as a
// try with more to ask after it, else searchLater. It does not allocate.
func (s *settings) searchRoleOf(key cache.Key) searchRole {
	switch {
	case s.search == nil || !searchTypes(key.Type):
		return searchNone
	case s.search.isTry(key.Name):
		return searchTry
	}
	return searchLater
}

// searchAnswer is the miss decision's first step for a try (rules 2 and
// 3): a flight already done with the held NXDOMAIN for key, or false.
// key is only looked up (it may alias a packet).
func (h *Handler) searchAnswer(s *settings, key cache.Key) (*flight, bool) {
	e, ok := h.held.get(key)
	if !ok {
		return nil, false
	}
	now := s.Now()
	age := now.Sub(e.at)
	switch {
	case e.round != nil && e.round.serves(e.at, now, s.SearchHold) && !h.flights.isRunning(key):
		h.searchStats.fromRound.Add(1)
	case s.SearchHold > 0 && age <= s.SearchHold && h.knownLater(s, key):
		if age*2 >= s.SearchHold {
			h.searchRefresh(s, key)
		}
		h.searchStats.fromHold.Add(1)
	default:
		return nil, false
	}
	h.held.asked(key, now)
	return &flight{ended: true, started: h.flights.clock.Now(), outcome: outcome{
		wire: e.answer.Aged(age), wireOK: true, server: e.server, source: SourceSearch}}, true
}

// knownLater reports whether a lookup key's name is a try of ends at a
// later name the node knows exists: an answer of local data or the Consul
// watch that is no NXDOMAIN, or a fresh cache entry (only NOERROR is ever
// stored; NODATA shows the name exists too).
func (h *Handler) knownLater(s *settings, key cache.Key) bool {
	for _, w := range s.search.walks(key.Name) {
		for _, name := range w.later {
			if answered, exists := h.recordsKnow(s, name, key); answered {
				if exists {
					return true
				}
				continue
			}
			if h.cache.HasFresh(cache.Key{Name: name, Type: key.Type, Class: key.Class, DO: key.DO, CD: key.CD}) {
				return true
			}
		}
	}
	return false
}

// recordsKnow asks local data and the Consul watch about name, as the
// client's later try will: answered when one of them answers it, exists
// when that answer is no NXDOMAIN. For the watch this counts as a
// question for the service (RecordSource has no other way to ask): the
// lookup ends there, and its client asks it too.
func (h *Handler) recordsKnow(s *settings, name string, key cache.Key) (answered, exists bool) {
	m, _, _, _, ok := lookupRecords(s.Records, dns.Question{Name: name, Qtype: key.Type, Qclass: key.Class})
	if !ok {
		return false, false
	}
	return true, m.Rcode != dns.RcodeNameError
}

// searchRefresh asks key's name again behind a held answer (rule 3), as a
// try (so its start asks the candidates up to the known name ahead).
func (h *Handler) searchRefresh(s *settings, key cache.Key) {
	if h.flights.full(s.MaxInflight / 2) {
		h.searchStats.skipped.Add(1)
		return
	}
	key.Name = strings.Clone(key.Name) // the flight keeps it
	fl, started, _ := h.flights.join(key, s.MaxInflight,
		resolution{h: h, s: s, zone: s.router.route(key.Name), search: searchTry}, false, false)
	if started {
		h.searchStats.ahead.Add(1)
		fl.start()
	}
}

// searchAhead starts the round of a try's flight (rule 1): the later
// candidates of every lookup its name is a try of, for its question's
// type, class and bits, each up to the first the node knows something
// about, while half the in-flight cap is free. Called by flight.start
// after the try's own first attempt went out.
func (h *Handler) searchAhead(s *settings, key cache.Key, round *searchRound) {
	since := s.Now().Add(-asIsEvidenceAge)
	for _, w := range s.search.walks(key.Name) {
		if !w.first {
			continue // a later try: its lookup's first try started the round
		}
		if w.firstExpansion != "" && !h.held.askedSince(candidateKey(key, w.firstExpansion), since) {
			continue // no sign this name's lookups walk the list
		}
		for _, name := range w.later {
			ck := candidateKey(key, name)
			if answered, exists := h.recordsKnow(s, name, key); answered {
				if exists {
					break // the walk ends there
				}
				continue
			}
			if h.cache.Has(ck) {
				break // it existed at its last answer: the walk ends there
			}
			if h.flights.full(s.MaxInflight / 2) {
				h.searchStats.skipped.Add(1)
				return // a bad day: the client asks the rest itself, one by one
			}
			fl, started, _ := h.flights.join(ck, s.MaxInflight,
				resolution{h: h, s: s, zone: s.router.route(name), search: searchAhead, round: round}, true, false)
			if started {
				h.searchStats.ahead.Add(1)
				fl.start()
			}
		}
	}
}

// candidateKey is key's question for another name.
func candidateKey(key cache.Key, name string) cache.Key {
	return cache.Key{Name: name, Type: key.Type, Class: key.Class, DO: key.DO, CD: key.CD}
}

// searchSettled is settle's share of the rules for a resolution of key
// with a role: a try's or a candidate's NXDOMAIN is held (a client's try
// counts as the client asking), a NOERROR forgets the held one (the cache
// has it now), and a try's round learns that the try was answered.
func (h *Handler) searchSettled(res *resolution, key cache.Key, a *cache.WireAnswer, server string) {
	now := res.s.Now()
	if res.search == searchTry && res.round != nil {
		res.round.answered.Store(now.UnixNano())
	}
	if a == nil {
		return // a failure: what the upstream said last stays
	}
	switch a.Rcode() {
	case dns.RcodeNameError:
		if res.search == searchLater {
			return
		}
		e := heldNX{answer: *a, server: server, at: now}
		if res.search == searchTry {
			e.askedAt = now
		} else {
			e.round = res.round
		}
		h.held.put(key, e)
	case dns.RcodeSuccess:
		h.held.remove(key)
	}
}
