package consulcut

import (
	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// inlineRecords is the records of an answer a Cut plans without
// allocating.
const inlineRecords = 256

// Cut is Consul's cut of one answer, read through its view v (a whole
// message: header, one question, records, no OPT; every method is given
// it): the first Answers records of the answer section stay, the
// authority section if NS, and in the additional section (when the
// answer had one) the records syncExtra keeps for them. Its tables are
// arrays for an answer of up to inlineRecords records, so that a cut per
// question lives on its caller's stack; a bigger answer gets slices of
// its own. (Not slices of the arrays: a value pointing into itself would
// live on the heap.)
type Cut struct {
	Answers int
	NS      bool
	// extra[extraFrom[i]:extraFrom[i+1]] are the view's indexes of the
	// additional records answer i keeps (syncExtra's choice).
	extraIn   [inlineRecords]uint16
	fromIn    [inlineRecords + 1]uint16
	extraMore []uint16
	fromMore  []uint16
}

// tables are the cut's extra and extraFrom.
func (cut *Cut) tables() (extra, extraFrom []uint16) {
	if cut.fromMore != nil {
		return cut.extraMore, cut.fromMore
	}
	return cut.extraIn[:], cut.fromIn[:]
}

// Plan works out the cut of v for class c (Class.Keep's rule). It
// reports false for a message it cannot measure (one the one encoder
// cannot write again).
func (cut *Cut) Plan(v *dnswire.Msg, c Class) bool {
	n := v.Counts[dnswire.Answer]
	cut.extraMore, cut.fromMore = nil, nil
	if v.Len() > inlineRecords {
		cut.extraMore, cut.fromMore = make([]uint16, v.Len()), make([]uint16, n+1)
	}
	cut.syncExtra(v, n)
	failed := false
	cut.Answers, cut.NS = c.Keep(n, func(k int, compress, ns bool) int {
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
func (cut *Cut) syncExtra(v *dnswire.Msg, n int) {
	extra, extraFrom := cut.tables()
	var seenIn [inlineRecords]uint16 // where each target name was read
	seen := seenIn[:0]
	if v.Len() > inlineRecords {
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
			j := FirstExtra(v, t)
			if j < 0 {
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

// Kept is the records the cut of v keeps in each section.
func (cut *Cut) Kept(v *dnswire.Msg) [3]uint16 {
	counts := [3]uint16{uint16(cut.Answers), 0, 0}
	if cut.NS {
		counts[1] = uint16(v.Counts[dnswire.Authority])
	}
	if v.Counts[dnswire.Additional] > 0 {
		_, extraFrom := cut.tables()
		counts[2] = extraFrom[cut.Answers]
	}
	return counts
}

// build writes into b the message v cut to its first k answer records,
// its authority section if ns and the additional records they keep,
// names compressed or not, and reports its length. The question is v's,
// as spelt there; the header's flags are v's.
func (cut *Cut) build(b *dnswire.Builder, v *dnswire.Msg, k int, ns, compress bool) (int, error) {
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
func (cut *Cut) each(v *dnswire.Msg, k int, ns bool, fn func(s dnswire.Section, i int)) {
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

// Write writes the planned cut of v into b (names compressed) and
// reports its length.
func (cut *Cut) Write(b *dnswire.Builder, v *dnswire.Msg) (int, error) {
	return cut.build(b, v, cut.Answers, cut.NS, true)
}

// Extra is the view's indexes of the additional records the cut keeps,
// in order (none when v has no additional section).
func (cut *Cut) Extra(v *dnswire.Msg) []uint16 {
	if v.Counts[dnswire.Additional] == 0 {
		return nil
	}
	extra, extraFrom := cut.tables()
	return extra[:extraFrom[cut.Answers]]
}

// FirstExtra is the view's index of v's first additional record owned by
// name (uncompressed wire form), -1 for none: the record syncExtra keeps
// for an SRV record whose target is name.
func FirstExtra(v *dnswire.Msg, name []byte) int {
	from, to := v.Range(dnswire.Additional)
	for j := from; j < to; j++ {
		if v.OwnerIs(j, name) {
			return j
		}
	}
	return -1
}
