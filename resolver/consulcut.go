package resolver

import (
	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// maxCutRecords bounds the records of an answer cutWritten cuts; a
// bigger one is ServeDNS's to cut.
const maxCutRecords = 256

// cutWritten is cutAsConsul for an answer whose records are not all one
// size (SRV answers and their additional records, issue 34): written
// again at dst[headerAt:] with the one encoder, the first records
// consulKeep keeps and, in the additional section, the first record of
// each kept SRV record's target (following a CNAME there), each name once,
// as trimLikeConsul's syncConsulExtra chooses them. The question is
// written in lower case, as ServeDNS packs its answer before spelling it
// for the client, and put back as asked after, so that the bytes are
// ServeDNS's. ok false (an authority section, an OPT record, more than
// maxCutRecords records) leaves the answer to ServeDNS, dst unchanged.
func (q *plainQuery) cutWritten(dst []byte, headerAt int, sh replyShape, room int, counts [3]uint16) ([]byte, [3]uint16, bool) {
	msg := dst[headerAt:]
	n := int(counts[0])
	if counts[1] != 0 || n+int(counts[2]) > maxCutRecords {
		return dst, counts, false
	}
	var asked [dnswire.MaxNameLen + 4]byte
	qlen := len(q.question)
	copy(asked[:], msg[dnswire.HeaderLen:dnswire.HeaderLen+qlen])
	restore := func() { copy(dst[headerAt+dnswire.HeaderLen:], asked[:qlen]) }
	for i := dnswire.HeaderLen; i < dnswire.HeaderLen+qlen-4; i++ {
		if c := msg[i]; 'A' <= c && c <= 'Z' {
			msg[i] = c + 'a' - 'A'
		}
	}
	dnswire.Header{QDCount: 1, ANCount: counts[0], ARCount: counts[2]}.Put(msg)
	var v dnswire.Msg
	if v.Parse(msg) != nil || v.OPT >= 0 {
		restore()
		return dst, counts, false
	}
	qname := msg[dnswire.HeaderLen : dnswire.HeaderLen+qlen-4]

	// extra[extraFrom[i]:extraFrom[i+1]] are the additional records
	// answer i adds (syncConsulExtra's choice).
	var extra [maxCutRecords]uint16
	var extraFrom [maxCutRecords + 1]uint16
	var seenAt [maxCutRecords]uint16 // where each target seen is in v.Raw
	nseen, nextra := 0, 0
	firstExtra, _ := v.Range(dnswire.Additional)
	isSeen := func(name []byte) bool {
		var other [dnswire.MaxNameLen]byte
		for _, at := range seenAt[:nseen] {
			if o, _, _ := dnswire.ReadName(v.Raw, int(at), other[:0]); dnswire.EqualName(o, name) {
				return true
			}
		}
		return false
	}
	for i := range n {
		extraFrom[i] = uint16(nextra)
		rr := v.RR(i)
		if rr.Type != dns.TypeSRV || rr.End-rr.Data < 7 {
			continue
		}
		var target [dnswire.MaxNameLen]byte
		at := int(rr.Data) + 6
		t, _, err := dnswire.ReadName(v.Raw, at, target[:0])
		for err == nil && !isSeen(t) && nseen < len(seenAt) {
			seenAt[nseen] = uint16(at)
			nseen++
			j := firstExtra
			for ; j < v.Len() && !v.OwnerIs(j, t); j++ {
			}
			if j == v.Len() {
				break
			}
			extra[nextra] = uint16(j)
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

	var b dnswire.Builder
	build := func(k int) (int, error) {
		b.Start(0, 0)
		b.Question(qname, v.QType, v.QClass)
		for i := range k {
			b.Record(dnswire.Answer, &v, i)
		}
		if counts[2] > 0 {
			for _, j := range extra[:extraFrom[k]] {
				b.Record(dnswire.Additional, &v, int(j))
			}
		}
		return b.Finish()
	}
	failed := false
	keep, _ := consulKeep(sh.limit, sh.opt, q.udpAnswers, room, n, func(k int, compress, _ bool) int {
		if !compress {
			size := dnswire.HeaderLen + qlen
			for i := range k {
				size += v.WholeLen(i)
			}
			if counts[2] > 0 {
				for _, j := range extra[:extraFrom[k]] {
					size += v.WholeLen(int(j))
				}
			}
			return size
		}
		size, err := build(k)
		failed = failed || err != nil
		return size
	})
	size, err := build(keep)
	if failed || err != nil || size > len(msg) {
		restore()
		return dst, counts, false
	}
	dst = b.AppendTo(dst[:headerAt])
	restore()
	kept := uint16(0)
	if counts[2] > 0 {
		kept = extraFrom[keep]
	}
	return dst, [3]uint16{uint16(keep), 0, kept}, true
}
