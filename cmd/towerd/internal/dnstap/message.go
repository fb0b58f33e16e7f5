package dnstap

import (
	"net/netip"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The dnstap message (dnstap.info, dnstap.proto of github.com/dnstap/dnstap.pb),
// written with protowire straight into the queue's buffer: no generated
// types, no proto.Marshal and its allocations per message on the
// answering goroutine. Only the fields towerd fills are here.

// Field numbers of message Dnstap.
const (
	fieldIdentity = 1
	fieldVersion  = 2
	fieldExtra    = 3
	fieldMessage  = 14
	fieldType     = 15

	dnstapTypeMessage = 1
)

// Field numbers of message Message.
const (
	msgType             = 1
	msgSocketFamily     = 2
	msgSocketProtocol   = 3
	msgQueryAddress     = 4
	msgResponseAddress  = 5
	msgQueryPort        = 6
	msgResponsePort     = 7
	msgQueryTimeSec     = 8
	msgQueryTimeNsec    = 9
	msgQueryMessage     = 10
	msgResponseTimeSec  = 12
	msgResponseTimeNsec = 13
	msgResponseMessage  = 14
)

// MessageType is dnstap's Message.Type.
type MessageType uint8

// The message types towerd writes.
const (
	ClientQuery       MessageType = 5
	ClientResponse    MessageType = 6
	ForwarderQuery    MessageType = 7
	ForwarderResponse MessageType = 8
)

const (
	familyINET  = 1
	familyINET6 = 2
	protoUDP    = 1
	protoTCP    = 2
)

// message is one dnstap Message, its slices only read.
type message struct {
	typ                 MessageType
	tcp                 bool
	queryAddr, respAddr netip.AddrPort // either may be the zero value: not known
	queryTime, respTime time.Time      // zero: not written
	query, response     []byte         // nil: not written
	extra               string
}

// appendDnstap appends the Dnstap protobuf of m, with identity and version
// ("" leaves them out), to dst.
func appendDnstap(dst []byte, identity, version string, m *message) []byte {
	if identity != "" {
		dst = protowire.AppendTag(dst, fieldIdentity, protowire.BytesType)
		dst = protowire.AppendString(dst, identity)
	}
	if version != "" {
		dst = protowire.AppendTag(dst, fieldVersion, protowire.BytesType)
		dst = protowire.AppendString(dst, version)
	}
	if m.extra != "" {
		dst = protowire.AppendTag(dst, fieldExtra, protowire.BytesType)
		dst = protowire.AppendString(dst, m.extra)
	}
	dst = protowire.AppendTag(dst, fieldMessage, protowire.BytesType)
	// The embedded message's length goes before it: written after room
	// for the longest length, then moved back over what the length does
	// not need (a copy of a few hundred bytes, one code path).
	const room = 3 // a varint of up to 2 MiB; a message is at most 2*64 KiB
	at := len(dst)
	dst = append(dst, 0, 0, 0)
	dst = appendMessage(dst, m)
	n := len(dst) - at - room
	k := len(protowire.AppendVarint(dst[at:at], uint64(n)))
	copy(dst[at+k:], dst[at+room:])
	dst = dst[:at+k+n]
	dst = protowire.AppendTag(dst, fieldType, protowire.VarintType)
	return protowire.AppendVarint(dst, dnstapTypeMessage)
}

// appendMessage appends m's fields.
func appendMessage(dst []byte, m *message) []byte {
	dst = protowire.AppendTag(dst, msgType, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(m.typ))
	addr := m.queryAddr.Addr()
	if !addr.IsValid() {
		addr = m.respAddr.Addr()
	}
	if addr.IsValid() {
		family := uint64(familyINET6)
		if addr.Unmap().Is4() {
			family = familyINET
		}
		dst = protowire.AppendTag(dst, msgSocketFamily, protowire.VarintType)
		dst = protowire.AppendVarint(dst, family)
	}
	protocol := uint64(protoUDP)
	if m.tcp {
		protocol = protoTCP
	}
	dst = protowire.AppendTag(dst, msgSocketProtocol, protowire.VarintType)
	dst = protowire.AppendVarint(dst, protocol)
	dst = appendAddr(dst, msgQueryAddress, msgQueryPort, m.queryAddr)
	dst = appendAddr(dst, msgResponseAddress, msgResponsePort, m.respAddr)
	dst = appendTime(dst, msgQueryTimeSec, msgQueryTimeNsec, m.queryTime)
	if m.query != nil {
		dst = protowire.AppendTag(dst, msgQueryMessage, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.query)
	}
	dst = appendTime(dst, msgResponseTimeSec, msgResponseTimeNsec, m.respTime)
	if m.response != nil {
		dst = protowire.AppendTag(dst, msgResponseMessage, protowire.BytesType)
		dst = protowire.AppendBytes(dst, m.response)
	}
	return dst
}

func appendAddr(dst []byte, addrField, portField protowire.Number, ap netip.AddrPort) []byte {
	a := ap.Addr()
	if !a.IsValid() {
		return dst
	}
	a = a.Unmap()
	dst = protowire.AppendTag(dst, addrField, protowire.BytesType)
	if a.Is4() {
		b := a.As4()
		dst = protowire.AppendBytes(dst, b[:])
	} else {
		b := a.As16()
		dst = protowire.AppendBytes(dst, b[:])
	}
	dst = protowire.AppendTag(dst, portField, protowire.VarintType)
	return protowire.AppendVarint(dst, uint64(ap.Port()))
}

func appendTime(dst []byte, secField, nsecField protowire.Number, t time.Time) []byte {
	if t.IsZero() {
		return dst
	}
	dst = protowire.AppendTag(dst, secField, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(t.Unix()))
	dst = protowire.AppendTag(dst, nsecField, protowire.Fixed32Type)
	return protowire.AppendFixed32(dst, uint32(t.Nanosecond()))
}
