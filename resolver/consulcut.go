package resolver

import (
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnswire"
)

// Consul's cut on the bytes (issue 34): one reading of an answer's view
// (consulCut.plan) says how many answer records stay, whether the
// authority section does, and which additional records Consul's syncExtra
// keeps for them; every path uses it. ServeDNS plans on the message it
// packs and keeps those records of its dns.Msg (trim.go, cutMsgLikeConsul);
// a cache entry under the Consul domain is cut for a UDP client without
// EDNS once, when the entry is made (cutForNarrow), and a hit for such a
// client writes the stored cut; the fast path plans per question only
// what was not decided so (cutAsConsul: an entry made before the agent's
// answer limit changed or read from a snapshot, a client whose EDNS size
// is between 512 bytes and the whole answer's size, a watched answer).

// maxCutRecords bounds the records of an answer the fast path cuts with
// its stack arrays (consulCut); a bigger one is ServeDNS's.
const maxCutRecords = 256

// cutClass is what Consul's cut of an answer depends on besides the
// answer: the client's UDP size, whether it spoke EDNS, the agent's
// udp_answer_limit, and the room the reply core adds (OPT, EDE).
type cutClass struct {
	limit       int
	edns        bool
	answerLimit int
	room        int
}

// narrowClass is a UDP client without EDNS: 512 bytes, the answer limit,
// nothing added (no OPT, so no EDE either, fresh or stale). Its cut
// depends on the answer alone, so it is made once per cache entry.
func narrowClass(answerLimit int) cutClass {
	return cutClass{limit: dns.MinMsgSize, answerLimit: answerLimit}
}

// cuts is consulCuts for the class.
func (c cutClass) cuts(answers, size int) bool {
	return consulCuts(c.limit, c.edns, c.answerLimit, c.room, answers, size)
}

// consulCut is Consul's cut of one answer, read through its view v (a
// whole message: header, one question, records, no OPT; every method is
// given it): the first answers records of the answer section stay, the
// authority section if ns, and in the additional section (when the
// answer had one) the records syncExtra keeps for them. Its tables are
// arrays for an answer of up to maxCutRecords records, so that the fast
// path's cut lives on its stack; a bigger answer (ServeDNS's) gets slices
// of its own. (Not slices of the arrays: a value pointing into itself
// would live on the heap.)
type consulCut struct {
	answers int
	ns      bool
	// extra[extraFrom[i]:extraFrom[i+1]] are the view's indexes of the
	// additional records answer i keeps (syncExtra's choice).
	extraIn   [maxCutRecords]uint16
	fromIn    [maxCutRecords + 1]uint16
	extraMore []uint16
	fromMore  []uint16
}

// tables are the cut's extra and extraFrom.
func (cut *consulCut) tables() (extra, extraFrom []uint16) {
	if cut.fromMore != nil {
		return cut.extraMore, cut.fromMore
	}
	return cut.extraIn[:], cut.fromIn[:]
}

// plan works out the cut of v for class c (consulKeep's rule). It
// reports false for a message it cannot measure (one the one encoder
// cannot write again).
func (cut *consulCut) plan(v *dnswire.Msg, c cutClass) bool {
	n := v.Counts[dnswire.Answer]
	if v.Len() > maxCutRecords {
		cut.extraMore, cut.fromMore = make([]uint16, v.Len()), make([]uint16, n+1)
	}
	cut.syncExtra(v, n)
	failed := false
	cut.answers, cut.ns = consulKeep(c.limit, c.edns, c.answerLimit, c.room, n, func(k int, compress, ns bool) int {
		var b dnswire.Builder
		size, err := cut.build(&b, v, k, ns, compress)
		failed = failed || err != nil
		return size
	})
	return !failed
}

// syncExtra is Consul's syncExtra on the view: for each SRV record of
// the answer in order, the first additional record of its target
// (following a CNAME there), each name once.
func (cut *consulCut) syncExtra(v *dnswire.Msg, n int) {
	extra, extraFrom := cut.tables()
	var seenIn [maxCutRecords]uint16 // where each target name was read
	seen := seenIn[:0]
	if v.Len() > maxCutRecords {
		seen = make([]uint16, 0, v.Len())
	}
	isSeen := func(name []byte) bool {
		var other [dnswire.MaxNameLen]byte
		for _, at := range seen {
			if o, _, _ := dnswire.ReadName(v.Raw, int(at), other[:0]); dnswire.EqualName(o, name) {
				return true
			}
		}
		return false
	}
	firstExtra, _ := v.Range(dnswire.Additional)
	nextra := 0
	for i := range n {
		extraFrom[i] = uint16(nextra)
		rr := v.RR(i)
		if rr.Type != dns.TypeSRV || rr.End-rr.Data < 7 || firstExtra == v.Len() {
			continue
		}
		var target [dnswire.MaxNameLen]byte
		at := int(rr.Data) + 6
		t, _, err := dnswire.ReadName(v.Raw, at, target[:0])
		for err == nil && !isSeen(t) && len(seen) < cap(seen) {
			seen = append(seen, uint16(at))
			j := firstExtra
			for ; j < v.Len() && !v.OwnerIs(j, t); j++ {
			}
			if j == v.Len() {
				break
			}
			extra[nextra] = uint16(j) // each record once: its name is seen now
			nextra++
			x := v.RR(j)
			if x.Type != dns.TypeCNAME {
				break
			}
			at = int(x.Data)
			t, _, err = dnswire.ReadName(v.Raw, at, target[:0])
		}
	}
	extraFrom[n] = uint16(nextra)
}

// kept is the records the cut of v keeps in each section.
func (cut *consulCut) kept(v *dnswire.Msg) [3]uint16 {
	counts := [3]uint16{uint16(cut.answers), 0, 0}
	if cut.ns {
		counts[1] = uint16(v.Counts[dnswire.Authority])
	}
	if v.Counts[dnswire.Additional] > 0 {
		_, extraFrom := cut.tables()
		counts[2] = extraFrom[cut.answers]
	}
	return counts
}

// build writes into b the message v cut to its first k answer records,
// its authority section if ns and the additional records they keep,
// names compressed or not, and reports its length. The question is v's,
// as spelt there; the header's flags are v's.
func (cut *consulCut) build(b *dnswire.Builder, v *dnswire.Msg, k int, ns, compress bool) (int, error) {
	if !compress {
		size := v.QEnd // the header and the question
		cut.each(v, k, ns, func(_ dnswire.Section, i int) { size += v.WholeLen(i) })
		return size, nil
	}
	var qname [dnswire.MaxNameLen]byte
	b.Start(0, v.Flags)
	b.Question(v.Question(qname[:0]), v.QType, v.QClass)
	cut.each(v, k, ns, func(s dnswire.Section, i int) { b.Record(s, v, i) })
	return b.Finish()
}

// each calls fn with the section and view index of every record of v the
// cut to k answers (and the authority section if ns) keeps, in order.
func (cut *consulCut) each(v *dnswire.Msg, k int, ns bool, fn func(s dnswire.Section, i int)) {
	for i := range k {
		fn(dnswire.Answer, i)
	}
	if ns {
		from, to := v.Range(dnswire.Authority)
		for i := from; i < to; i++ {
			fn(dnswire.Authority, i)
		}
	}
	if v.Counts[dnswire.Additional] > 0 {
		extra, extraFrom := cut.tables()
		for _, j := range extra[:extraFrom[k]] {
			fn(dnswire.Additional, int(j))
		}
	}
}

// write writes the planned cut of v into b (names compressed) and
// reports its length.
func (cut *consulCut) write(b *dnswire.Builder, v *dnswire.Msg) (int, error) {
	return cut.build(b, v, cut.answers, cut.ns, true)
}

// cutWritten is cutAsConsul for an answer whose records are not all one
// size (SRV answers and their additional records, an authority section),
// per question: the answer written at dst[headerAt:] (header room, the
// question, counts records of each section) is read through the view,
// planned for class c, and written again there with the one encoder. The
// question is written in lower case, as ServeDNS packs its answer before
// spelling it for the client, and put back as asked after, so that the
// bytes are ServeDNS's. ok false (an OPT record, more than maxCutRecords
// records) leaves the answer to ServeDNS, dst unchanged.
func (q *plainQuery) cutWritten(dst []byte, headerAt int, c cutClass, counts [3]uint16) ([]byte, [3]uint16, bool) {
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
	var cut consulCut
	var b dnswire.Builder
	if v.Parse(msg) != nil || v.OPT >= 0 || !cut.plan(&v, c) {
		restore()
		return dst, counts, false
	}
	if size, err := cut.write(&b, &v); err != nil || size > len(msg) {
		restore()
		return dst, counts, false
	}
	dst = b.AppendTo(dst[:headerAt])
	restore()
	return dst, cut.kept(&v), true
}

// narrowTag is the tag (cache.WireAnswer.SetCut) of the cut answer for a
// UDP client without EDNS under answerLimit: the cut depends on
// min(answerLimit, 8) alone, never 0.
func narrowTag(answerLimit int) uint16 {
	return uint16(min(max(answerLimit, 0), maxConsulAnswers)) + 1
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
	c := narrowClass(answerLimit)
	var v dnswire.Msg
	wire := a.Wire()
	if v.Parse(wire) != nil || v.OPT >= 0 || !c.cuts(v.Counts[dnswire.Answer], len(wire)) {
		return
	}
	var cut consulCut
	var b dnswire.Builder
	if !cut.plan(&v, c) {
		return
	}
	if _, err := cut.write(&b, &v); err == nil {
		a.SetCut(narrowTag(answerLimit), b.AppendTo(nil))
	}
}
