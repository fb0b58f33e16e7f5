package consul

import (
	"net"
	"slices"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/resolver/dnswire"
)

// A watched service's answers as bytes (issue 34), encoded when the watch
// delivers its instances (deliverService), not per question: for the
// service's own name and for each tag an instance carries (the forms
// <tag>.<svc>.service.<domain>, RFC 2782's _svc._tag, and the local
// datacenter's <svc>.service.<dc>.<domain> read the same records), the A,
// AAAA and SRV answers, NODATA with its SOA included, exactly as Answer
// builds them before its shuffle. AppendAnswer (wireanswer.go) writes
// them behind a query's question.

// wireTypes are the types the watch answers, by slot.
var wireTypes = [3]uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV}

func wireSlot(qtype uint16) (int, bool) {
	i := slices.Index(wireTypes[:], qtype)
	return i, i >= 0
}

// wireSet is a service's answers under the agent's settings info.
type wireSet struct {
	info *agentInfo
	// tags holds, for "" (any tag) and each tag some instance has, the
	// answers by slot; a nil answer is Answer's to give (instances with
	// host names, which Consul answers with a CNAME). A tag missing is
	// one the watch does not hold: Answer passes it on.
	tags map[string]*[3]*wireAnswer
}

// wireAnswer is one answer, packed once behind a question of the
// service's name (Compress) and read through view.
type wireAnswer struct {
	msg  []byte
	view dnswire.Msg
	// answers is how many answer records; A and AAAA ones are recordLen
	// bytes each from recordsAt, every owner a pointer to the question, so
	// that a shuffle swaps whole records and nothing else moves. Other
	// answers (recordLen 0) are written again per question with the one
	// encoder, each group in the shuffled order (wireanswer.go).
	answers   int
	recordLen int
	recordsAt int
	// extraFrom[i] is the view's index of answer i's first additional
	// record (an SRV's target address, then its node's meta TXT); the
	// last entry ends the section.
	extraFrom []int
	// nodata: no answer record, the SOA in the authority section, whose
	// serial is the time of the question, as Consul's.
	nodata bool
	// narrow is how many answer records a UDP client without EDNS keeps
	// (Consul's cut, consulcut.Narrow of the agent's udp_answer_limit,
	// after a_record_limit), decided when the answer is encoded (issue
	// 34) where it is the same whatever order the shuffle gives: A and
	// AAAA records are all one size; an SRV answer's count is decided
	// when the limit's largest groups fit (decideNarrowSRV). It holds for
	// questions under narrowTag whose name is the encoded one's length
	// (the cut measures records with their owner written out); other
	// questions, and answers whose cut depends on the order, have none
	// (0): the resolver cuts those per question.
	narrow     int
	narrowTag  uint16
	narrowName int
	// sameTarget[g] is the first group whose SRV target is group g's: of
	// the groups a narrow SRV answer keeps, syncExtra keeps the address
	// of each target once (wireanswer.go, appendWritten).
	sameTarget []uint8
}

// narrowFor reports whether a question of a name nameLen bytes long (text
// form) asking with tag cut gets a's narrow count.
func (a *wireAnswer) narrowFor(cut uint16, nameLen int) bool {
	return cut != 0 && a.narrow > 0 && cut == a.narrowTag && nameLen == a.narrowName
}

// decideNarrow sets a's narrow count for info (an A or AAAA answer).
func (a *wireAnswer) decideNarrow(info *agentInfo) {
	n := a.answers
	if info.aRecordLimit > 0 && n > info.aRecordLimit {
		n = info.aRecordLimit
	}
	c := consulcut.Narrow(info.udpAnswer)
	qlen := a.view.QEnd - dnswire.HeaderLen // the question section: its name, type and class
	a.narrow, a.narrowTag, a.narrowName = n, consulcut.NarrowTag(info.udpAnswer), qlen-4-1
	if c.Cuts(n, a.recordsAt+n*a.recordLen) {
		a.narrow = c.KeepFixed(n, qlen, a.recordLen)
	}
}

// encodeService encodes key's answers from instances under info; nil when
// the watch cannot name records yet (no datacenter).
func (w *Watcher) encodeService(info *agentInfo, key string, instances []instance) *wireSet {
	if info == nil || info.datacenter == "" || len(instances) == 0 {
		return nil
	}
	ws := &wireSet{info: info, tags: map[string]*[3]*wireAnswer{}}
	ws.tags[""] = w.encodeForms(info, key, "", instances)
	for _, in := range instances {
		for _, tag := range in.Tags {
			if _, done := ws.tags[tag]; done || tag == "" {
				continue
			}
			var tagged []instance
			for _, other := range instances {
				if slices.Contains(other.Tags, tag) {
					tagged = append(tagged, other)
				}
			}
			ws.tags[tag] = w.encodeForms(info, key, tag, tagged)
		}
	}
	return ws
}

// encodeForms encodes the A, AAAA and SRV answers of instances: all nil
// when an address is a host name (Answer's).
func (w *Watcher) encodeForms(info *agentInfo, key, tag string, instances []instance) *[3]*wireAnswer {
	var forms [3]*wireAnswer
	for _, in := range instances {
		for _, addr := range []string{in.NodeAddr, in.NodeV4, in.NodeV6, in.SvcAddr, in.SvcV4, in.SvcV6} {
			if addr != "" && net.ParseIP(addr) == nil {
				return &forms
			}
		}
	}
	name := key + ".service." + info.domain
	if tag != "" {
		name = tag + "." + name
	}
	b := builder{ttl: w.answerTTL(info, key), nodeMetaTXT: info.nodeMetaTXT}
	for slot, qtype := range wireTypes {
		l := lookup{name: name, qtype: qtype, datacenter: info.datacenter, domain: info.domain}
		answer, extra, ok := b.records(l, instances)
		if ok {
			forms[slot] = encodeAnswer(info, name, qtype, answer, extra)
		}
	}
	return &forms
}

// encodeAnswer packs one answer; nil if it cannot be read back as the
// groups AppendAnswer shuffles.
func encodeAnswer(info *agentInfo, name string, qtype uint16, answer, extra []dns.RR) *wireAnswer {
	m := new(dns.Msg)
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	m.Answer, m.Extra, m.Compress = answer, extra, true
	a := &wireAnswer{answers: len(answer), nodata: len(answer) == 0}
	if a.nodata {
		m.Ns = []dns.RR{soa(info.domain, 0, info.soa)}
	}
	var err error
	if a.msg, err = m.Pack(); err != nil || a.view.Parse(a.msg) != nil {
		return nil
	}
	a.recordsAt = a.view.QEnd
	if qtype != dns.TypeSRV && len(answer) > 0 && len(extra) == 0 {
		a.recordLen = 2 + 10 + net.IPv4len // the owner's pointer, type..rdlength, the address
		if qtype == dns.TypeAAAA {
			a.recordLen = 2 + 10 + net.IPv6len
		}
		if len(a.msg)-a.recordsAt != len(answer)*a.recordLen {
			return nil // not one shape
		}
		a.decideNarrow(info)
		return a
	}
	// Each answer's additional records: an address, then TXT records.
	first := a.view.Counts[dnswire.Answer] + a.view.Counts[dnswire.Authority]
	for i := first; i < a.view.Len(); i++ {
		if a.view.RR(i).Type != dns.TypeTXT {
			a.extraFrom = append(a.extraFrom, i)
		}
	}
	if len(extra) > 0 && (len(a.extraFrom) != len(answer) || a.extraFrom[0] != first) {
		return nil
	}
	if len(extra) == 0 {
		a.extraFrom = make([]int, len(answer))
		for i := range a.extraFrom {
			a.extraFrom[i] = first
		}
	}
	a.extraFrom = append(a.extraFrom, a.view.Len())
	if qtype == dns.TypeSRV {
		a.decideNarrowSRV(info)
	}
	return a
}

// decideNarrowSRV sets a's narrow count (an SRV answer) when Consul's cut
// keeps the same records for a UDP client without EDNS whatever order
// the shuffle gives: more records than the answer limit (so the count is
// that limit, measured uncompressed), and the limit's largest groups (an
// SRV record with its owner written out, and its target's address) fit
// (consulcut's Keep over those sizes keeps the limit). syncExtra then
// keeps, for each kept SRV record in order, the first additional record
// owned by its target, each target once: decided here to be the group's
// address, when every record a target owns is in a group of that target,
// after an address the same in every such group.
func (a *wireAnswer) decideNarrowSRV(info *agentInfo) {
	n, v := a.answers, &a.view
	most := min(consulcut.MaxAnswers, info.udpAnswer)
	if n <= most || n > maxWireGroups || len(a.extraFrom) != n+1 || v.Counts[dnswire.Additional] == 0 {
		return
	}
	var ti, tj, owner [dnswire.MaxNameLen]byte
	same := make([]uint8, n)
	sizes := make([]int, n)
	for g := range n {
		t, ok := v.Target(g, 0, ti[:0])
		addr := a.extraFrom[g]
		if !ok || addr >= a.extraFrom[g+1] || !v.OwnerIs(addr, t) {
			return
		}
		same[g] = uint8(g)
		for h := range g {
			if u, _ := v.Target(h, 0, tj[:0]); dnswire.EqualName(t, u) {
				same[g] = same[h]
				other := a.extraFrom[h]
				if !dnswire.SameRecord(v, addr, v, other) || v.TTL(addr) != v.TTL(other) {
					return
				}
				break
			}
		}
		// Every record t owns is in a group of target t.
		for h := range n {
			u, _ := v.Target(h, 0, tj[:0])
			if dnswire.EqualName(t, u) {
				continue
			}
			for j := a.extraFrom[h]; j < a.extraFrom[h+1]; j++ {
				if dnswire.EqualName(v.Owner(j, owner[:0]), t) {
					return
				}
			}
		}
		if consulcut.FirstExtra(v, t) != a.extraFrom[same[g]] {
			return // syncExtra, in the encoded order, would not keep that address
		}
		sizes[g] = v.WholeLen(g) + v.WholeLen(addr)
	}
	slices.Sort(sizes)
	c := consulcut.Narrow(info.udpAnswer)
	k, _ := c.Keep(n, func(k int, _, _ bool) int {
		size := a.view.QEnd // the header and the question
		for _, s := range sizes[n-k:] {
			size += s
		}
		return size
	})
	if k != most {
		return // the count depends on the order: the resolver cuts per question
	}
	qlen := v.QEnd - dnswire.HeaderLen
	a.narrow, a.narrowTag, a.narrowName, a.sameTarget = k, consulcut.NarrowTag(info.udpAnswer), qlen-4-1, same
}
