package consul

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// service is what the watch holds for one service: its healthy instances and
// whether the agent still confirms them.
type service struct {
	instances []instance
	// lostAt is when the watch last lost contact with the agent while
	// holding these instances; zero while in contact.
	lostAt time.Time
	// enc are the instances' answers as bytes, for the fast path
	// (wireanswer.go): made once, at the first question for them.
	enc encodings
}

// store maps lower-case service names to what the watch knows of them. It is
// read on every query and written on every catalog change.
type store struct {
	mu       sync.RWMutex
	services map[string]*service
}

func newStore() *store { return &store{services: map[string]*service{}} }

// set replaces the service's instances; none removes it, so its queries go
// to Consul's DNS.
func (s *store) set(name string, instances []instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(instances) == 0 {
		delete(s.services, name)
		return
	}
	s.services[name] = &service{instances: instances}
}

func (s *store) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.services, name)
}

// contact marks the service's records as confirmed by the agent (lost=false)
// or as no longer confirmed since at, unless they were already.
func (s *store) contact(name string, lost bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.services[name]
	switch {
	case svc == nil:
	case !lost && !svc.lostAt.IsZero():
		s.services[name] = &service{instances: svc.instances}
	case lost && svc.lostAt.IsZero():
		s.services[name] = &service{instances: svc.instances, lostAt: at}
	}
}

func (s *store) get(name string) *service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.services[name]
}

// counts returns how many services and instances are held.
func (s *store) counts() (services, instances int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, svc := range s.services {
		instances += len(svc.instances)
	}
	return len(s.services), instances
}

// serviceQuery is a question parsed the way Consul's DNS dispatch parses it.
type serviceQuery struct {
	service string // lower case
	tag     string // lower case; "" = any
	dc      string // the datacenter label, lower case; "" = none
}

// parseServiceQuery mirrors the "service" branch of Consul's dispatch:
// [tag.]name.service[.dc[.dc]].domain and RFC 2782's _name._tag.service...,
// and for SRV also _name._tag.domain without "service". ok is false for every
// other form (nodes, prepared queries, peers, ...).
func parseServiceQuery(name string, qtype uint16, domain string) (serviceQuery, bool) {
	lower := strings.ToLower(name)
	if !strings.HasSuffix(lower, "."+domain) {
		return serviceQuery{}, false
	}
	labels := dns.SplitDomainName(strings.TrimSuffix(lower, domain))
	var parts, suffixes []string
	found := false
	for i := len(labels) - 1; i >= 0 && !found; i-- {
		switch labels[i] {
		case "service":
			parts, suffixes, found = labels[:i], labels[i+1:], true
		case "connect", "virtual", "ingress", "node", "query", "addr":
			return serviceQuery{}, false
		default:
			if qtype == dns.TypeSRV && strings.HasPrefix(labels[i], "_") {
				parts, suffixes, found = labels[:i+1], labels[i+1:], true
			}
		}
	}
	if !found || len(parts) == 0 {
		return serviceQuery{}, false
	}
	var q serviceQuery
	switch {
	case len(suffixes) == 0:
	case len(suffixes) == 1:
		q.dc = suffixes[0]
	case len(suffixes) == 2 && suffixes[1] == "dc":
		q.dc = suffixes[0]
	default:
		return serviceQuery{}, false // peers, or what Consul calls invalid
	}
	n := len(parts)
	if n == 2 && strings.HasPrefix(parts[0], "_") && strings.HasPrefix(parts[1], "_") {
		q.service, q.tag = parts[0][1:], parts[1][1:]
		if q.tag == "tcp" {
			q.tag = "" // _name._tcp is RFC 2782's way of saying "any"
		}
		return q, true
	}
	q.service = parts[n-1]
	q.tag = strings.Join(parts[:n-1], ".")
	return q, true
}

// Covers reports whether Answer may answer for name (canonical: lower case,
// fully qualified), or must see its question: whether it has a service
// name's form under the Consul domain (issue 34: a node, a prepared query
// or any other name Answer passes on whatever its type is left to the
// cache, and so to the fast path). It over-approximates Answer's own
// reading (parseServiceQuery) and never under-: a question Answer would
// answer, or count towards a watch, is always covered. Before the agent
// has been asked (the domain is not known yet) Answer answers nothing,
// and Covers says so. It does not allocate.
func (w *Watcher) Covers(name []byte) bool {
	info := w.info.Load()
	if info == nil {
		return false
	}
	// With the datacenter still unknown Answer answers nothing, but a
	// question must still reach it: it is what asks for a watch, and the
	// watch's first reply names the datacenter. The domain itself is no
	// service name: only the names below it.
	return len(name) > len(info.domain) && inDomain(name, info.domain) &&
		serviceForm(name[:len(name)-len(info.domain)])
}

// serviceForm reports whether labels (a name's labels before the Consul
// domain, each ending in a dot) may be a service question as
// parseServiceQuery reads one, for any type: scanning from the domain, a
// "service" label with one before it, or a label starting with '_' (RFC
// 2782's form, SRV only, whose type Covers does not know), before any of
// the labels that make a name another kind's (node, query...).
func serviceForm(labels []byte) bool {
	end := len(labels) - 1 // the dot after the last label
	for end > 0 {
		start := end - 1
		for start >= 0 && labels[start] != '.' {
			start--
		}
		switch label := string(labels[start+1 : end]); {
		case label == "service":
			return start > 0
		case label == "connect", label == "virtual", label == "ingress", label == "node", label == "query", label == "addr":
			return false
		case len(label) > 0 && label[0] == '_':
			return true
		}
		end = start
	}
	return false
}

// Why the watch answered a question or left it to Consul's DNS: Answer's
// why, which `towerd lookup` shows (issue 25).
const (
	// WhyWatch: the watch's records answered.
	WhyWatch = "watch"

	whyType        = "the watch answers A, AAAA and SRV questions only"
	whyNotService  = "not a service name: nodes, prepared queries and the like are Consul's DNS's"
	whyNoDC        = "the watch does not know the datacenter yet (it learns it from its first reply)"
	whyOtherDC     = "a service of another datacenter: the watch holds the local datacenter's"
	whyNotWatched  = "the watch holds no records of the service: it does not exist, has no healthy instance, or is not watched yet (questions for it ask for a watch)"
	whyNoInstances = "the service is watched but has no healthy instance now"
	whyTooOld      = "the watch lost the agent longer ago than the maximum stale age"
	whyNoTag       = "no healthy instance of the service has the tag"
	whyNoRecords   = "the watch cannot build Consul's records for the instances"
)

// TrimsUDP is the resolver's Config.TrimUDP for a node with the watch:
// every UDP answer under the Consul domain (name canonical), the watch's
// and the ones forwarded to the agent's DNS, is cut to fit the client the
// way the agent cuts its own (the resolver's trim.go), with the agent's
// dns_config.udp_answer_limit; until the agent has been read, for the
// configured domain (else consul.) and Consul's default limit. It does not
// allocate.
func (w *Watcher) TrimsUDP(name []byte) (int, bool) {
	if info := w.info.Load(); info != nil {
		return info.udpAnswer, inDomain(name, info.domain)
	}
	return defaultUDPAnswerLimit, inDomain(name, w.fallbackDomain)
}

// DomainTrim is Config.TrimUDP for a node without the watch: answers
// under domain ("" = consul.) are cut as Consul's DNS cuts them, with its
// default udp_answer_limit.
func DomainTrim(domain string) func([]byte) (int, bool) {
	d := configuredDomain(domain)
	return func(name []byte) (int, bool) { return defaultUDPAnswerLimit, inDomain(name, d) }
}

func configuredDomain(domain string) string {
	if domain == "" {
		return DefaultDomain
	}
	return dns.CanonicalName(domain)
}

// inDomain reports whether name (canonical, in text form) is domain
// (canonical) or below it, without allocating.
func inDomain(name []byte, domain string) bool {
	n := len(name) - len(domain)
	return n == 0 && string(name) == domain || n > 0 && name[n-1] == '.' && string(name[n:]) == domain
}

// Answer implements resolver.RecordSource. A question for a service that is
// not watched yet returns ok=false and starts its watch (demand mode), so
// the next question is answered from memory. It answers A, AAAA and SRV
// questions about services the watch holds, in the local datacenter, from
// memory. Everything else — other types, nodes, prepared queries, other
// datacenters, services filtered out or without a healthy instance, and
// records lost for longer than the maximum stale age — returns ok=false and
// goes to Consul's DNS through the cache. stale is true while the agent does
// not answer the watch. why is WhyWatch for an answer, and for a question
// under the Consul domain left to Consul's DNS the reason; "" for a name
// outside it.
func (w *Watcher) Answer(q dns.Question) (m *dns.Msg, stale bool, why string, ok bool) {
	if q.Qclass != dns.ClassINET {
		return nil, false, "", false
	}
	info := w.info.Load()
	if info == nil || !belowDomain(q.Name, info.domain) {
		return nil, false, "", false // the domain is not known yet, or not this name's
	}
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA, dns.TypeSRV:
	default:
		return nil, false, whyType, false
	}
	sq, ok := parseServiceQuery(q.Name, q.Qtype, info.domain)
	if !ok {
		return nil, false, whyNotService, false
	}
	if info.datacenter == "" {
		// Records cannot be named yet: a token without agent:read and no
		// consul.datacenter; the watch learns it from its first reply, so
		// the question still asks for a watch.
		if sq.dc == "" {
			w.noteAsked(sq.service)
		}
		return nil, false, whyNoDC, false
	}
	if sq.dc != "" && sq.dc != info.datacenter {
		return nil, false, whyOtherDC, false
	}
	// A question for a service is what starts and keeps its watch: an
	// unwatched one goes the normal way this time (noteAsked asks for the
	// watch), a watched one without healthy instances too.
	if !w.noteAsked(sq.service) {
		return nil, false, whyNotWatched, false
	}
	svc := w.store.get(sq.service)
	if svc == nil {
		return nil, false, whyNoInstances, false
	}
	if !svc.lostAt.IsZero() {
		if w.clock.Now().Sub(svc.lostAt) > w.cfg.MaxStale {
			return nil, false, whyTooOld, false // too old to vouch for; Consul's DNS decides
		}
		stale = true
	}
	instances := svc.instances
	if sq.tag != "" {
		instances = nil
		for _, in := range svc.instances {
			if slices.Contains(in.Tags, sq.tag) {
				instances = append(instances, in)
			}
		}
		if len(instances) == 0 {
			return nil, false, whyNoTag, false // Consul says NXDOMAIN, which is never cached
		}
	} else {
		instances = slices.Clone(instances)
	}
	// Consul shuffles every answer so that clients taking the first address
	// spread over the instances; so does towerd.
	rand.Shuffle(len(instances), func(i, j int) { instances[i], instances[j] = instances[j], instances[i] })

	// The records of the question in lower case, as the agent's DNS gives
	// them to towerd's own (lower-case) forwarded question: the resolver
	// spells the answer for the client the same way whichever path made
	// it (resolver/spelling.go).
	name := dns.CanonicalName(q.Name)
	l := lookup{name: name, qtype: q.Qtype, datacenter: info.datacenter, domain: info.domain}
	if sq.dc != "" {
		l.datacenter = sq.dc
	}
	b := builder{ttl: w.answerTTL(info, sq.service), aRecordLimit: info.aRecordLimit,
		nodeMetaTXT: info.nodeMetaTXT}
	answer, extra, ok := b.records(l, instances)
	if !ok {
		return nil, false, whyNoRecords, false
	}
	m = new(dns.Msg)
	m.Question = []dns.Question{{Name: name, Qtype: q.Qtype, Qclass: q.Qclass}}
	m.Answer, m.Extra = answer, extra
	if len(answer) == 0 {
		// NODATA (e.g. AAAA of an IPv4-only service), with the SOA that lets
		// a resolver cache it (RFC 2308), as Consul answers.
		m.Ns = []dns.RR{soa(info.domain, uint32(w.clock.Now().Unix()), info.soa)}
	}
	return m, stale, WhyWatch, true
}

// belowDomain reports whether name lies below domain (canonical), in any
// letter case, without allocating.
func belowDomain(name, domain string) bool {
	n := len(name) - len(domain)
	return n > 0 && name[n-1] == '.' && strings.EqualFold(name[n:], domain)
}

// answerTTL is the TTL of service's records: Config.AnswerTTL, or with
// AgentTTL the agent's dns_config.service_ttl for the service, as its own
// DNS gives them.
func (w *Watcher) answerTTL(info *agentInfo, service string) uint32 {
	if w.cfg.AnswerTTL == AgentTTL {
		return info.serviceTTL.ttl(service)
	}
	return seconds(w.cfg.AnswerTTL)
}
