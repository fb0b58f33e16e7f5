package cache

import (
	"encoding/binary"

	"github.com/towerd/towerd/resolver/dnswire"
)

// An entry's cut answer (issue 34): the resolver cuts an answer under the
// Consul domain for a UDP client without EDNS as Consul's DNS cuts its own
// (fewer answer records, the additional records they need), a rule the
// cache does not know. The resolver decides that cut once, when the entry
// is made (SetCut), and a hit asked for it (AppendFresh's and
// AppendStale's cut) writes the stored cut as it writes the whole answer:
// no question pays for the cut again. The tag is the resolver's say under
// which settings the cut was made (the agent's udp_answer_limit): a hit
// asked with another tag gets the whole answer, which the resolver then
// cuts itself.

// SetCut stores cut, a's answer as the caller cut it under tag (not 0):
// a whole message (ID 0, a's question, records, no OPT) made from a's
// records, so that its TTLs are a's. It reports false, keeping nothing,
// for a tag of 0 or a message the view cannot read. It must be called
// before a is stored (SetWire), once.
func (a *WireAnswer) SetCut(tag uint16, cut []byte) bool {
	var m dnswire.Msg
	if tag == 0 || a.cutTag != 0 || len(cut) > dnswire.MaxMessageLen || m.Parse(cut) != nil || m.OPT >= 0 || m.QEnd != int(a.answerAt) {
		return false
	}
	data := make([]byte, 0, len(a.data)+len(cut)+2*m.Len())
	data = append(append(data, a.data...), cut...)
	for i := range m.Len() {
		data = binary.BigEndian.AppendUint16(data, m.RR(i).TTLAt)
	}
	a.data, a.cutTag = data, tag
	return true
}

// cutAnswer is the entry's cut answer: behind the whole one's TTL
// offsets in data, its own TTL offsets behind it.
func (p *prepared) cutAnswer() prepared {
	data := p.data[int(p.wireLen)+2*records(p.wire()):]
	wireLen := len(data) - 2*records(data)
	return prepared{data: data, wireLen: uint16(wireLen), answerAt: p.answerAt, kind: p.kind, ttl: p.ttl}
}

// records is how many records the message msg holds, by its header.
func records(msg []byte) int {
	hdr, _ := dnswire.ReadHeader(msg)
	return int(hdr.ANCount) + int(hdr.NSCount) + int(hdr.ARCount)
}
