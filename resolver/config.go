package resolver

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/resolver/dnssec"
)

// Config is the part of towerd's configuration the handler acts on. It can be
// replaced at run time (SIGHUP) with Handler.Reconfigure; the cache and the
// queries in flight survive the swap.
type Config struct {
	// Zones route queries to upstreams by longest suffix; one must be ".".
	Zones []Zone
	// Allow lists the client networks that get answers; everyone else gets
	// REFUSED. Empty means loopback only: towerd must never become an open
	// resolver because someone bound it to a public address.
	Allow []netip.Prefix

	// QueryTimeout is the longest a client waits for an answer when nothing
	// usable is cached; it then gets SERVFAIL. Zero means 1.8 s.
	QueryTimeout time.Duration
	// UpstreamTimeout bounds one upstream resolution (all its attempts). It
	// runs detached from the client, so a late answer still fills the cache
	// for the client's retry. Zero means 5 s.
	UpstreamTimeout time.Duration
	// MaxInflight caps concurrent upstream resolutions (dnsmasq's
	// dns-forward-max, default 150). Over the cap a query is answered stale
	// or SERVFAIL at once, never queued. Zero means 150.
	MaxInflight int

	// Records, if set, answers some questions from memory before the cache
	// is consulted: local data (resolver/local) and the Consul watch's
	// pre-warmed, pushed service records, in that order, as a Chain.
	Records RecordSource
	// TrimUDP, if set, says of a question's name (canonical: lower case,
	// fully qualified; only read during the call; it must not allocate:
	// the fast path asks it) whether its UDP answers are cut to fit the
	// client as Consul's DNS cuts its own (package consulcut), without TC,
	// and the answer limit for a client without EDNS: the daemon's says so
	// of the Consul domain, watched or not.
	TrimUDP func(name []byte) (answerLimit int, ok bool)

	// Prefetch refreshes an entry in the background when it is hit in the
	// last tenth of its TTL, or for a short TTL within prefetchLead of its
	// expiry (wantsPrefetch), so popular names rarely expire at all.
	Prefetch bool

	// ServeStale answers from expired entries when refreshing fails (RFC 8767).
	// How old an entry may be is the cache's MaxStaleAge.
	ServeStale bool
	// StaleClientTimeout is how long a client whose question has a stale
	// answer waits for the upstream before getting the stale answer (RFC 8767
	// §5 "client response timer", 1.8 s). Zero means immediate: answer stale
	// at once and refresh in the background.
	StaleClientTimeout time.Duration
	// StaleAnswerTTL is the TTL on stale answers (RFC 8767 §4: 30 s).
	StaleAnswerTTL time.Duration
	// FailureRecheck is how long after a failed refresh stale answers are
	// given without asking the upstream again (RFC 8767 §4: 30 s).
	FailureRecheck time.Duration

	// Search are the search lists of towerd's clients (issue 28): a miss
	// on a name one of them reads as a try of a lookup asks the lookup's
	// later names ahead, and their NXDOMAINs answer its later tries
	// (searchahead.go). Empty turns the search-list rules off. At most
	// MaxSearchLists lists of MaxSearchDomains domains each.
	Search []SearchList
	// SearchHold is how long, after it came, the upstream's NXDOMAIN for
	// a search-list try answers again: a lookup's later tries after the
	// try that asked them ahead was answered, and any try whose lookup
	// ends at a name the node knows exists. Zero: the second never, the
	// first only while that try runs. At most MaxSearchHold.
	SearchHold time.Duration

	// MaxUDPSize caps UDP answers in bytes, whatever size a client
	// advertises: past min(client's size, MaxUDPSize) records are dropped and
	// TC set, and the client retries over TCP (issue 13: amplification).
	// Zero means DefaultMaxUDPSize, 1232 (DNS Flag Day 2020); 512 to 65535.
	MaxUDPSize int

	// QueryLogRate caps the query log at this many lines a second; the
	// lines past it are dropped and counted (querylog.go). Zero means
	// DefaultQueryLogRate.
	QueryLogRate int

	// Tap, if set, is given a copy of every client exchange and every
	// upstream exchange that ends a resolution (dnstap, issue 38;
	// dnstap.go). Nil: off, at the cost of one nil check per answer.
	Tap Tap

	// DNSSEC is validation (validate.go); its zero value is off.
	DNSSEC DNSSECConfig

	// Now is the clock the cache's and the search rules' ages are read
	// by; nil means Clock's Now. Tests jump it instead of sleeping.
	Now func() time.Time
	// Clock is what the handler's timers run on (issue 33): the one
	// deadline heap of the clients waiting for flights (query_timeout,
	// the stale answer's client timer), a flight's start, an upstream
	// query's deadline; nil means the wall clock. It is read when the
	// handler is made: a reload does not change it. A test that steps it
	// gives its zones' upstream groups the same one (their
	// GroupOptions.Clock), and Now, unless it sets its own.
	Clock clock.Clock
}

// Defaults of Config fields whose zero value means "use the default".
const (
	DefaultQueryTimeout    = 1800 * time.Millisecond
	DefaultUpstreamTimeout = 5 * time.Second
	DefaultMaxInflight     = 150
	DefaultQueryLogRate    = 300 // within journald's default rate limit: 10,000 lines in 30 s
	// MaxSearchHold bounds Config.SearchHold: a name that appears ahead
	// of a name the node knows is seen at most this late.
	MaxSearchHold = 5 * time.Second
	// DefaultSearchHold is the daemon's SearchHold (search.hold; its zero
	// means off): long enough for a client that looks a name up twice a
	// second, short enough that a name appearing ahead of a known one is
	// seen within a second of a 100 ms upstream.
	DefaultSearchHold = 500 * time.Millisecond
)

// loopbackOnly is the allow-list used when Config.Allow is empty.
var loopbackOnly = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
}

// settings is the validated, immutable form of Config the handler reads
// through an atomic pointer.
type settings struct {
	Config
	router *router
	search *searchModel // nil: the search-list rules are off
	// validator is nil with DNSSEC off (validate.go).
	validator *dnssec.Validator
}

func newSettings(cfg Config) (*settings, error) {
	r, err := newRouter(cfg.Zones)
	if err != nil {
		return nil, err
	}
	if cfg.QueryTimeout < 0 || cfg.UpstreamTimeout < 0 || cfg.StaleClientTimeout < 0 ||
		cfg.StaleAnswerTTL < 0 || cfg.FailureRecheck < 0 || cfg.MaxInflight < 0 || cfg.QueryLogRate < 0 {
		return nil, errors.New("negative timeout, TTL or limit")
	}
	if cfg.QueryTimeout == 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.QueryLogRate == 0 {
		cfg.QueryLogRate = DefaultQueryLogRate
	}
	switch {
	case cfg.MaxUDPSize == 0:
		cfg.MaxUDPSize = DefaultMaxUDPSize
	case cfg.MaxUDPSize < dns.MinMsgSize || cfg.MaxUDPSize > dns.MaxMsgSize:
		return nil, fmt.Errorf("max UDP size %d is outside %d to %d bytes", cfg.MaxUDPSize, dns.MinMsgSize, dns.MaxMsgSize)
	}
	search, err := newSearchModel(cfg.Search)
	if err != nil {
		return nil, err
	}
	if cfg.SearchHold < 0 || cfg.SearchHold > MaxSearchHold {
		return nil, fmt.Errorf("search hold %v is outside 0 to %v", cfg.SearchHold, MaxSearchHold)
	}
	if cfg.StaleAnswerTTL > 0 && cfg.StaleAnswerTTL < time.Second {
		return nil, fmt.Errorf("stale answer TTL %v is below one second", cfg.StaleAnswerTTL)
	}
	if len(cfg.Allow) == 0 {
		cfg.Allow = loopbackOnly
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	validator, err := newValidator(cfg, r)
	if err != nil {
		return nil, fmt.Errorf("dnssec: %w", err)
	}
	return &settings{Config: cfg, router: r, search: search, validator: validator}, nil
}

// staleTTLSeconds is the TTL written on stale answers.
func (s *settings) staleTTLSeconds() uint32 {
	return uint32(s.StaleAnswerTTL / time.Second)
}

// prefetchLead is how long before expiry a hit starts a refresh at the
// least, for entries whose TTL is short: the last tenth of a 2 s TTL is
// 200 ms, less than a jittery upstream's round trip (100 ms ± 50 ms and a
// lost packet's resend), so the refresh would still be running when the
// entry expired, and every expiry would cost a stale answer (staleAtOnce).
// Capped at a quarter of the TTL, so a popular entry is refreshed at most
// every three quarters of its TTL. The price is upstream queries: issue 11
// measured the other choice, refreshing a short-TTL entry only at its first
// hit after expiry (docs/benchmarks.md, "Jitter day with the defaults").
const prefetchLead = time.Second

// wantsPrefetch reports whether a fresh hit should start a background
// refresh: it is in the last tenth of its TTL, or within prefetchLead (at
// most a quarter of the TTL) of expiry.
func (s *settings) wantsPrefetch(ttl, remaining time.Duration) bool {
	return s.Prefetch && ttl > 0 && (remaining*10 <= ttl || remaining <= min(prefetchLead, ttl/4))
}

// staleAtOnce reports whether a client asking for an entry that expired
// expired ago, after a lifetime of ttl, gets the stale answer at once while
// the refresh runs behind, instead of waiting up to the client response
// timer: an entry that expired less than the client response timer ago.
// Such an entry was in use when it expired; its refresh is the prefetch
// that came too late (a lost packet's resend), and the answer is no further past its TTL than the one a
// client gets after waiting the whole timer for a refresh that fails
// (RFC 8767 §5 allows a timer of 0; unbound's serve-expired-client-timeout
// 0 and dnsmasq's use-stale-cache do this for every entry). An entry
// expired longer ago waits for the timer as RFC 8767 says; a TTL-0 entry
// (Consul) always does: it is never meant to be served without asking.
func (s *settings) staleAtOnce(ttl, expired time.Duration) bool {
	return ttl > 0 && expired < s.StaleClientTimeout
}

// staleWait is how long a client whose question has a stale answer (an
// entry of ttl, expired ago) waits for fl, its entry's refresh, before it
// gets the stale answer; 0 is at once, the refresh running behind it.
//
// The client response timer runs from the refresh's start, not this
// client's arrival: a refresh that has not answered within it will not be
// waited for again by every client that joins it (a black-holed upstream
// keeps one open until upstream.timeout). RFC 8767 §5 lets the timer be
// shorter, down to 0. An entry that only just expired is answered at once
// (staleAtOnce), and so is every client while each of the zone's servers
// is marked down: waiting out the timer would only delay the stale answer
// it will get anyway (the refresh still runs, as a probe).
func (s *settings) staleWait(fl *flight, zone Zone, ttl, expired time.Duration) time.Duration {
	if s.staleAtOnce(ttl, expired) || zone.Upstream.AllDown() {
		return 0
	}
	if fl.f == nil {
		// A flight made of a fresh entry (flights.join): its answer is
		// here, and the wait for it returns at once.
		return s.QueryTimeout
	}
	return min(s.QueryTimeout, max(0, s.StaleClientTimeout-fl.f.clock.Since(fl.started)))
}
