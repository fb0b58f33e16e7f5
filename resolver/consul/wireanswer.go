package consul

import (
	"slices"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The watched answer on the resolver's fast path (issue 34): every
// question the watch answers - the service's name, its tags, the local
// datacenter's form, A, AAAA and SRV, NODATA, and stale while the agent
// is lost - is answered from the bytes encoded when the record set
// changed (wireset.go): A and AAAA records shuffled in place and cut to
// dns_config.a_record_limit, as Answer shuffles and cuts; SRV answers and
// NODATA written again per question by dnswire's encoder from the packed
// records, in the shuffled order (their compression depends on the order
// and on the question). No dns.Msg, no allocation.

// maxWireGroups bounds the SRV records a question's answer is written
// with here; more (over TCP) are Answer's.
const maxWireGroups = 128

// maxStaleRecords bounds the records whose TTL a stale answer written
// again sets; more are Answer's.
const maxStaleRecords = 256

// AppendAnswer implements the resolver's RecordAppender: it appends to
// dst, which ends with a header and the question of name (canonical:
// lower case, fully qualified; only read during the call), the records
// Answer would give for name and qtype (class IN), when the watch holds
// them and they fit in limit bytes of dst. counts are the records of each
// section written; stale reports records lost with the agent (each TTL
// then at most staleTTL, as the resolver writes Answer's stale records).
// cut asks for the answer a UDP client without EDNS keeps (cutDone: the
// count decided when the answer was encoded, wireAnswer.narrow).
// ok false, dst unchanged, leaves the question to Answer. A question it
// answers counts towards the service's use, as Answer's.
func (w *Watcher) AppendAnswer(dst, name []byte, qtype uint16, limit int, staleTTL uint32, cut uint16) (
	out []byte, counts [3]uint16, stale, cutDone bool, why string, ok bool) {
	slot, ok := wireSlot(qtype)
	info := w.info.Load()
	if !ok || info == nil || info.datacenter == "" {
		return dst, counts, false, false, "", false
	}
	sn, ok := readServiceName(name, info.domain, qtype == dns.TypeSRV)
	if !ok || len(sn.dc) > 0 && string(sn.dc) != info.datacenter {
		return dst, counts, false, false, "", false
	}
	// Aliases of name's bytes: only looked up, never kept.
	key := unsafe.String(unsafe.SliceData(sn.service), len(sn.service))
	sl := w.watchedLoop(key)
	if sl == nil {
		return dst, counts, false, false, "", false // Answer asks for the watch
	}
	svc := w.store.get(key)
	if svc == nil {
		return dst, counts, false, false, "", false
	}
	if !svc.lostAt.IsZero() {
		if w.clock.Now().Sub(svc.lostAt) > w.cfg.MaxStale {
			return dst, counts, false, false, "", false // Answer passes it on
		}
		stale = true
	}
	ws := svc.wire.Load()
	if ws == nil || ws.info != info {
		// Delivered before the agent's settings were known, or under
		// others: encoded once more, here.
		ws = w.encodeService(info, string(key), svc.instances)
		svc.wire.Store(ws)
	}
	if ws == nil {
		return dst, counts, false, false, "", false
	}
	forms := ws.tags[unsafe.String(unsafe.SliceData(sn.tag), len(sn.tag))]
	if forms == nil || forms[slot] == nil {
		return dst, counts, false, false, "", false
	}
	a := forms[slot]
	ttl := ^uint32(0)
	if stale {
		ttl = staleTTL
	}
	if a.recordLen > 0 {
		most := info.aRecordLimit
		if cutDone = a.narrowFor(cut, len(name)); cutDone {
			most = a.narrow
		}
		out, counts, ok = w.appendFixed(dst, a, most, limit, ttl)
	} else {
		cutDone = a.narrowFor(cut, len(name))
		out, counts, ok = w.appendWritten(dst, name, a, qtype, limit, ttl, cutDone)
	}
	if !ok {
		return dst, [3]uint16{}, false, false, "", false
	}
	w.countAsked(sl) // only here: a question left to Answer is counted there
	return out, counts, stale, cutDone, WhyWatch, true
}

// appendFixed writes a's A or AAAA records, shuffled, the first most of
// them (a_record_limit, or the count a client without EDNS keeps; 0: no
// limit), each TTL at most ttl.
func (w *Watcher) appendFixed(dst []byte, a *wireAnswer, most, limit int, ttl uint32) ([]byte, [3]uint16, bool) {
	n := a.answers
	if most > 0 && n > most {
		n = most
	}
	if len(dst)+n*a.recordLen > limit {
		return dst, [3]uint16{}, false
	}
	start := len(dst)
	dst = append(dst, a.msg[a.recordsAt:]...)
	w.shuffleRecords(dst[start:], a.recordLen, a.answers)
	dst = dst[:start+n*a.recordLen]
	for i := range n {
		dnswire.CapTTL(dst, start+i*a.recordLen+6, ttl) // after the owner's pointer, type and class
	}
	return dst, [3]uint16{uint16(n)}, true
}

// appendWritten writes a (SRV, NODATA) behind dst's question with the one
// encoder: the question in lower case, as the general path packs it
// before spelling it for the client (resolver/spelling.go), then each
// answer and its additional records in the shuffled order; the client's
// question is put back over it, so that every name compressed into it
// reads as asked. narrow writes a's narrow answer instead: the first
// a.narrow groups of the shuffled order, and of their additional records
// each target's address once (syncExtra's choice, decideNarrowSRV).
func (w *Watcher) appendWritten(dst, name []byte, a *wireAnswer, qtype uint16, limit int, ttl uint32, narrow bool) ([]byte, [3]uint16, bool) {
	qname := len(name) + 1 // the name's wire length: plain labels
	qAt := len(dst) - qname - 4
	headerAt := qAt - dnswire.HeaderLen
	if headerAt < 0 || a.answers > maxWireGroups || ttl != ^uint32(0) && a.view.Len() > maxStaleRecords {
		return dst, [3]uint16{}, false
	}
	var asked [dnswire.MaxNameLen + 4]byte
	copy(asked[:], dst[qAt:len(dst)])
	var lower [dnswire.MaxNameLen]byte
	for i, c := range asked[:qname] {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	var order [maxWireGroups]uint8
	for i := range a.answers {
		order[i] = uint8(i)
	}
	w.shuffle(a.answers, func(i, j int) { order[i], order[j] = order[j], order[i] })

	var b dnswire.Builder
	var ttlAt [maxStaleRecords]uint16
	written := 0
	record := func(s dnswire.Section, i int) {
		var at int
		if s == dnswire.Answer {
			at = b.RecordAs(s, &a.view, i, lower[:qname]) // owned by the question, as Answer's
		} else {
			at = b.Record(s, &a.view, i)
		}
		if written < len(ttlAt) {
			ttlAt[written] = uint16(at)
		}
		written++
	}
	kept := order[:a.answers]
	if narrow {
		kept = order[:a.narrow]
	}
	b.Start(0, 0)
	b.Question(lower[:qname], qtype, dns.ClassINET)
	for _, g := range kept {
		record(dnswire.Answer, int(g))
	}
	soaAt := 0
	if a.nodata {
		record(dnswire.Authority, 0)
		soaAt = int(ttlAt[0])
	}
	for k, g := range kept {
		if !narrow {
			for i := a.extraFrom[g]; i < a.extraFrom[g+1]; i++ {
				record(dnswire.Additional, i)
			}
		} else if !slices.ContainsFunc(kept[:k], func(h uint8) bool { return a.sameTarget[h] == a.sameTarget[g] }) {
			record(dnswire.Additional, a.extraFrom[g]) // the target's address, once
		}
	}
	size, err := b.Finish()
	if err != nil || headerAt+size > limit {
		return dst, [3]uint16{}, false
	}
	dst = b.AppendTo(dst[:headerAt])
	copy(dst[qAt:], asked[:qname+4])
	msg := dst[headerAt:]
	if a.nodata {
		// The serial is the time of the question, as Consul's soa().
		dnswire.SetSOASerial(msg, soaAt, uint32(w.clock.Now().Unix()))
	}
	if ttl != ^uint32(0) {
		for _, at := range ttlAt[:written] {
			dnswire.CapTTL(msg, int(at), ttl)
		}
	}
	extra := written - len(kept)
	ns := 0
	if a.nodata {
		ns, extra = 1, extra-1
	}
	return dst, [3]uint16{uint16(len(kept)), uint16(ns), uint16(extra)}, true
}

// shuffle is a Fisher-Yates shuffle of n items drawn with w.intN: every
// shuffle of a watched answer, Answer's instances and the bytes' records
// alike, so that one draw gives both paths the same order.
func (w *Watcher) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		if j := w.intN(i + 1); j != i {
			swap(i, j)
		}
	}
}

// shuffleRecords shuffles the count records of b, each size bytes, in
// place.
func (w *Watcher) shuffleRecords(b []byte, size, count int) {
	var tmp [2 + 10 + 16]byte
	w.shuffle(count, func(i, j int) {
		ri, rj := b[i*size:(i+1)*size], b[j*size:(j+1)*size]
		copy(tmp[:size], ri)
		copy(ri, rj)
		copy(rj, tmp[:size])
	})
}
