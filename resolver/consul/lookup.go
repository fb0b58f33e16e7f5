package consul

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/miekg/dns"
)

// service is what the watch holds for one service: its healthy instances and
// whether the agent still confirms them.
type service struct {
	instances []instance
	// lostAt is when the watch last lost contact with the agent while
	// holding these instances; zero while in contact.
	lostAt time.Time
	// wire is what the instances answer, as bytes (wireset.go): encoded
	// when the watch delivers them, again only if the agent's settings
	// changed since.
	wire atomic.Pointer[wireSet]
}

// holds reports whether the service's records answer a question with tag
// (empty: any), as Answer would: some instance has the tag.
func (svc *service) holds(tag []byte) bool {
	if ws := svc.wire.Load(); ws != nil {
		_, ok := ws.tags[unsafe.String(unsafe.SliceData(tag), len(tag))]
		return ok
	}
	if len(tag) == 0 {
		return true
	}
	for _, in := range svc.instances {
		if slices.Contains(in.Tags, string(tag)) {
			return true
		}
	}
	return false
}

// store maps lower-case service names to what the watch knows of them. It is
// read on every query and written on every catalog change.
type store struct {
	mu       sync.RWMutex
	services map[string]*service
}

func newStore() *store { return &store{services: map[string]*service{}} }

// set replaces the service's instances, with ws their answers as bytes
// (nil: encoded at the first question); none removes it, so its queries go
// to Consul's DNS.
func (s *store) set(name string, instances []instance, ws *wireSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(instances) == 0 {
		delete(s.services, name)
		return
	}
	svc := &service{instances: instances}
	svc.wire.Store(ws)
	s.services[name] = svc
}

func (s *store) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.services, name)
}

// contact marks the service's records as confirmed by the agent (lost=false)
// or as no longer confirmed since at, unless they were already. The
// records, and their bytes, stay.
func (s *store) contact(name string, lost bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc := s.services[name]
	switch {
	case svc == nil:
	case !lost && !svc.lostAt.IsZero():
		next := &service{instances: svc.instances}
		next.wire.Store(svc.wire.Load())
		s.services[name] = next
	case lost && svc.lostAt.IsZero():
		next := &service{instances: svc.instances, lostAt: at}
		next.wire.Store(svc.wire.Load())
		s.services[name] = next
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
// other form (nodes, prepared queries, peers, ...). The reading is
// readServiceName's, on the name in lower case.
func parseServiceQuery(name string, qtype uint16, domain string) (serviceQuery, bool) {
	sn, ok := readServiceName([]byte(strings.ToLower(name)), domain, qtype == dns.TypeSRV)
	if !ok {
		return serviceQuery{}, false
	}
	return serviceQuery{service: string(sn.service), tag: string(sn.tag), dc: string(sn.dc)}, true
}

// serviceName is a question's name as Consul's DNS dispatch reads a service
// lookup: each field aliases the name's bytes (text form, no final dot).
type serviceName struct {
	service []byte
	tag     []byte // nil or empty: any tag
	dc      []byte // the datacenter label; empty: none
}

// maxLabels bounds the labels of a name (255 wire bytes: 127 labels).
const maxLabels = 128

// readServiceName reads name (canonical: lower case, fully qualified)
// below domain as Consul's dispatch reads a service lookup (agent/dns.go,
// v1.14): scanning from the domain, a "service" label with the service
// (and a tag before it) ahead and at most a datacenter (".dc" allowed)
// behind; with srv, RFC 2782's _name._tag form with or without "service".
// A node, a prepared query and the other kinds are no service name. The
// one reading of a service name: Answer's (parseServiceQuery), Covers's
// and AppendAnswer's. It does not allocate.
func readServiceName(name []byte, domain string, srv bool) (serviceName, bool) {
	if len(name) <= len(domain) || !inDomain(name, domain) {
		return serviceName{}, false
	}
	labels := name[:len(name)-len(domain)] // each label followed by its dot
	var starts [maxLabels]int
	n := 0
	for i := 0; i < len(labels) && n < len(starts); {
		starts[n] = i
		n++
		for i < len(labels) && labels[i] != '.' {
			i++
		}
		i++
	}
	label := func(k int) []byte {
		end := len(labels) - 1
		if k+1 < n {
			end = starts[k+1] - 1
		}
		return labels[starts[k]:end]
	}
	found, at, keep := false, 0, 0 // parts are labels [0, keep), suffixes (at, n)
	for i := n - 1; i >= 0 && !found; i-- {
		switch l := string(label(i)); {
		case l == "service":
			found, at, keep = true, i, i
		case l == "connect", l == "virtual", l == "ingress", l == "node", l == "query", l == "addr":
			return serviceName{}, false
		case srv && len(l) > 0 && l[0] == '_':
			found, at, keep = true, i, i+1
		}
	}
	if !found || keep == 0 {
		return serviceName{}, false
	}
	var sn serviceName
	switch suffixes := n - at - 1; {
	case suffixes == 0:
	case suffixes == 1:
		sn.dc = label(at + 1)
	case suffixes == 2 && string(label(at+2)) == "dc":
		sn.dc = label(at + 1)
	default:
		return serviceName{}, false // peers, or what Consul calls invalid
	}
	if first, second := label(0), label(1%keep); keep == 2 && len(first) > 0 && first[0] == '_' &&
		len(second) > 0 && second[0] == '_' {
		sn.service, sn.tag = first[1:], second[1:]
		if string(sn.tag) == "tcp" {
			sn.tag = nil // _name._tcp is RFC 2782's way of saying "any"
		}
		return sn, true
	}
	sn.service = label(keep - 1)
	if keep > 1 {
		sn.tag = labels[:starts[keep-1]-1] // the labels before, dots and all
	}
	return sn, true
}

// Covers reports whether Answer may answer for name (canonical: lower
// case, fully qualified), or must see its question (issue 34): a name the
// watch holds (a service form of a watched service with records for it:
// the service's own name, a tag some instance has, the local datacenter's
// form; NODATA included), and a service name not watched whose questions
// ask for a watch (not while a first read found no instance: kept out,
// admit.go; not when the watch follows the service list and it lacks the
// service, known.go; never in the catalog mode, which watches what the
// catalog lists). Everything else under the domain - nodes, prepared queries,
// other datacenters, tags no instance has, services with no instance or
// lost too long ago, names a service kept out - is left to the cache, and
// so to the fast path. Before the agent has been asked (the domain is not
// known yet) Answer answers nothing, and Covers says so. It does not
// allocate.
func (w *Watcher) Covers(name []byte) bool {
	info := w.info.Load()
	if info == nil {
		return false
	}
	sn, ok := readServiceName(name, info.domain, true)
	if !ok {
		return false
	}
	// An alias of name's bytes: only looked up, never kept.
	key := unsafe.String(unsafe.SliceData(sn.service), len(sn.service))
	if info.datacenter == "" {
		// Answer answers nothing yet, but its questions must reach it:
		// they ask for a watch, whose first reply names the datacenter.
		return len(sn.dc) == 0
	}
	if len(sn.dc) > 0 && string(sn.dc) != info.datacenter {
		return false // another datacenter's: Consul's DNS
	}
	if len(key) == 0 || w.watchedLoop(key) == nil {
		return len(key) > 0 && !w.cfg.watchAll() && w.known(key) && !w.cands.keptOutNow(key, w.clock.Now())
	}
	svc := w.store.get(key)
	if svc == nil || !svc.lostAt.IsZero() && w.clock.Now().Sub(svc.lostAt) > w.cfg.MaxStale {
		return false // no instance, or lost too long ago: Answer passes it on
	}
	return svc.holds(sn.tag)
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
	whyNotListed   = "the catalog's service list, which the watch follows (many names asked for are no service), has no such service"
	whyNoInstances = "the service is watched but has no healthy instance now"
	whyTooOld      = "the watch lost the agent longer ago than the maximum stale age"
	whyNoTag       = "no healthy instance of the service has the tag"
	whyNoRecords   = "the watch cannot build Consul's records for the instances"
)

// TrimsUDP is the resolver's Config.TrimUDP for a node with the watch:
// every UDP answer under the Consul domain (name canonical), the watch's
// and the ones forwarded to the agent's DNS, is cut to fit the client the
// way the agent cuts its own (package consulcut), with the agent's
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
		if !w.known(sq.service) {
			return nil, false, whyNotListed, false
		}
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
	w.shuffle(len(instances), func(i, j int) { instances[i], instances[j] = instances[j], instances[i] })

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
