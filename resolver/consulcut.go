package resolver

import (
	"unsafe"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/resolver/dnswire"
)

// Consul's cut on the bytes (issue 34): one reading of an answer's view
// (consulcut.Cut.Plan, the one rule) says how many answer records stay, whether the
// authority section does, and which additional records Consul's syncExtra
// keeps for them; every path uses it. ServeDNS plans on the message it
// packs and keeps those records of its dns.Msg (trim.go, cutMsgLikeConsul);
// a cache entry under the Consul domain is cut for a UDP client without
// EDNS once, when the entry is made (cutForNarrow), and a hit for such a
// client writes the stored cut; the fast path plans per question only
// what was not decided so (cutAsConsul: an entry made before the agent's
// answer limit changed or read from a snapshot, a client whose EDNS size
// is between 512 bytes and the whole answer's size, a watched answer
// whose cut depends on the shuffle's order or asked by a name of another
// length than the one it was encoded for).

// maxCutRecords bounds the records of an answer the fast path cuts per
// question (on its stack, consulcut.Cut); a bigger one is ServeDNS's.
const maxCutRecords = 256

// cutWritten is cutAsConsul for an answer whose records are not all one
// size (SRV answers and their additional records, an authority section),
// per question: the answer written at dst[headerAt:] (header room, the
// question, counts records of each section) is read through the view,
// planned for class c, and written again there with the one encoder. The
// question is written in lower case, as ServeDNS packs its answer before
// spelling it for the client, and put back as asked after, so that the
// bytes are ServeDNS's. ok false (an OPT record, more than maxCutRecords
// records) leaves the answer to ServeDNS, dst unchanged.
func (q *plainQuery) cutWritten(dst []byte, headerAt int, c consulcut.Class, counts [3]uint16) ([]byte, [3]uint16, bool) {
	msg := dst[headerAt:]
	if int(counts[0])+int(counts[1])+int(counts[2]) > maxCutRecords {
		return dst, counts, false
	}
	var asked [dnswire.MaxNameLen + 4]byte
	qlen := len(q.question)
	copy(asked[:], msg[dnswire.HeaderLen:dnswire.HeaderLen+qlen])
	restore := func() { copy(dst[headerAt+dnswire.HeaderLen:], asked[:qlen]) }
	for i := dnswire.HeaderLen; i < dnswire.HeaderLen+qlen-4; i++ {
		if ch := msg[i]; 'A' <= ch && ch <= 'Z' {
			msg[i] = ch + 'a' - 'A'
		}
	}
	dnswire.Header{QDCount: 1, ANCount: counts[0], NSCount: counts[1], ARCount: counts[2]}.Put(msg)
	var v dnswire.Msg
	var cut consulcut.Cut
	var b dnswire.Builder
	if v.Parse(msg) != nil || v.OPT >= 0 || !cut.Plan(&v, c) {
		restore()
		return dst, counts, false
	}
	if size, err := cut.Write(&b, &v); err != nil || size > len(msg) {
		restore()
		return dst, counts, false
	}
	dst = b.AppendTo(dst[:headerAt])
	restore()
	return dst, cut.Kept(&v), true
}

// cutForNarrow decides, once, when a's entry is made, Consul's cut of a
// for a UDP client without EDNS (narrowClass), when Config.TrimUDP names
// key's name and the cut changes a: the cut answer is stored with a
// (cache.WireAnswer.SetCut), and every hit for such a client writes it
// (AppendFresh's cut) instead of cutting per question. The client's
// question has the key's name, so its length, on which the cut depends,
// is known here.
func cutForNarrow(s *settings, key cache.Key, a *cache.WireAnswer) {
	if s.TrimUDP == nil || key.Name == "" {
		return
	}
	// An alias of the key's name: TrimUDP only reads it.
	answerLimit, ok := s.TrimUDP(unsafe.Slice(unsafe.StringData(key.Name), len(key.Name)))
	if !ok {
		return
	}
	c := consulcut.Narrow(answerLimit)
	var v dnswire.Msg
	wire := a.Wire()
	if v.Parse(wire) != nil || v.OPT >= 0 || !c.Cuts(v.Counts[dnswire.Answer], len(wire)) {
		return
	}
	var cut consulcut.Cut
	var b dnswire.Builder
	if !cut.Plan(&v, c) {
		return
	}
	if _, err := cut.Write(&b, &v); err == nil {
		a.SetCut(consulcut.NarrowTag(answerLimit), b.AppendTo(nil))
	}
}
