package consul

import (
	"math/rand/v2"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"
)

// The watched answer on the resolver's fast path (issue 34): the question
// most nodes ask of the watch, <svc>.service.<domain> A or AAAA in the
// local datacenter, is answered from bytes encoded once per record set
// (the first question after the set changed encodes them; a new set is a
// new *service, the agent's settings a new *agentInfo), shuffled in place
// and cut to dns_config.a_record_limit per question, as Answer shuffles
// and cuts its records: no dns.Msg, no allocation. Every other question
// (tags, datacenter forms, SRV, NODATA with its SOA, records lost with the
// agent) is Answer's.

// encoded is a service's answer records for one address type, packed
// behind a question of the canonical name, each record's owner a pointer
// to the question: every record is recordLen bytes, so a shuffle swaps
// whole records.
type encoded struct {
	info      *agentInfo // the settings they were built under
	records   []byte
	recordLen int
	count     int // 0: no fast answer (NODATA, or records of another shape)
}

// encodings are a service's encoded answers, by encodingSlot.
type encodings [2]atomic.Pointer[encoded]

func encodingSlot(qtype uint16) (int, bool) {
	switch qtype {
	case dns.TypeA:
		return 0, true
	case dns.TypeAAAA:
		return 1, true
	}
	return 0, false
}

// AppendAnswer implements the resolver's RecordAppender: it appends to
// dst, behind a header and the question of name (canonical: lower case,
// fully qualified; only read during the call), the answer records Answer
// would give for name and qtype (class IN), when the question is
// <svc>.service.<domain> A or AAAA of a watched service answered fresh,
// and they fit in limit bytes of dst. It reports how many it wrote and
// Answer's why; ok false, dst unchanged, leaves the question to Answer.
// A question it answers counts towards the service's use, as Answer's.
func (w *Watcher) AppendAnswer(dst, name []byte, qtype uint16, limit int) (out []byte, answers uint16, why string, ok bool) {
	slot, ok := encodingSlot(qtype)
	info := w.info.Load()
	if !ok || info == nil || info.datacenter == "" {
		return dst, 0, "", false
	}
	svcName, ok := plainServiceName(name, info.domain)
	if !ok {
		return dst, 0, "", false
	}
	// An alias of name's bytes: only looked up, never kept.
	key := unsafe.String(&svcName[0], len(svcName))
	sl := w.watchedLoop(key)
	if sl == nil {
		return dst, 0, "", false // Answer asks for the watch
	}
	svc := w.store.get(key)
	if svc == nil || !svc.lostAt.IsZero() {
		return dst, 0, "", false // no instance, or stale: Answer's
	}
	enc := svc.enc[slot].Load()
	if enc == nil || enc.info != info {
		enc = w.encode(info, string(name), svc, qtype)
		svc.enc[slot].Store(enc)
	}
	if enc.count == 0 || len(dst)+len(enc.records) > limit {
		return dst, 0, "", false
	}
	start := len(dst)
	dst = append(dst, enc.records...)
	shuffleRecords(dst[start:], enc.recordLen, enc.count)
	n := enc.count
	if info.aRecordLimit > 0 && n > info.aRecordLimit {
		n = info.aRecordLimit
		dst = dst[:start+n*enc.recordLen]
	}
	w.countAsked(sl) // only here: a question left to Answer is counted there
	return dst, uint16(n), WhyWatch, true
}

// plainServiceName is the service label of name when name is
// <svc>.service.<domain> (canonical) and nothing else.
func plainServiceName(name []byte, domain string) ([]byte, bool) {
	const service = ".service."
	n := len(name) - len(domain) - len(service)
	if n <= 0 || !inDomain(name, domain) || string(name[n:n+len(service)]) != service {
		return nil, false
	}
	label := name[:n]
	for _, c := range label {
		if c == '.' {
			return nil, false // a tag, or more
		}
	}
	return label, true
}

// encode packs svc's answer to name and qtype, as Answer builds it before
// its shuffle and a_record_limit cut; a count of 0 when the fast path
// cannot give it.
func (w *Watcher) encode(info *agentInfo, name string, svc *service, qtype uint16) *encoded {
	enc := &encoded{info: info}
	l := lookup{name: name, qtype: qtype, datacenter: info.datacenter, domain: info.domain}
	svcName, _ := plainServiceName([]byte(name), info.domain)
	b := builder{ttl: w.answerTTL(info, string(svcName)), nodeMetaTXT: info.nodeMetaTXT}
	answer, _, ok := b.records(l, svc.instances)
	if !ok || len(answer) == 0 {
		return enc
	}
	m := new(dns.Msg)
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	m.Answer = answer
	m.Compress = true
	raw, err := m.Pack()
	if err != nil {
		return enc
	}
	records := raw[12+len(name)+1+4:] // header, the name's wire form, type and class
	recordLen := 2 + 10 + 4           // the owner's pointer, type..rdlength, an IPv4 address
	if qtype == dns.TypeAAAA {
		recordLen = 2 + 10 + 16
	}
	if len(records) != len(answer)*recordLen {
		return enc // not one shape (an owner not compressed): Answer's
	}
	enc.records, enc.recordLen, enc.count = records, recordLen, len(answer)
	return enc
}

// shuffleRecords shuffles the count records of b, each size bytes, in
// place (Fisher-Yates), as Answer shuffles the instances.
func shuffleRecords(b []byte, size, count int) {
	var tmp [2 + 10 + 16]byte
	for i := count - 1; i > 0; i-- {
		j := rand.IntN(i + 1)
		if i == j {
			continue
		}
		ri, rj := b[i*size:(i+1)*size], b[j*size:(j+1)*size]
		copy(tmp[:size], ri)
		copy(ri, rj)
		copy(rj, tmp[:size])
	}
}
