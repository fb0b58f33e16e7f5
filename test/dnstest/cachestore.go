package dnstest

import "github.com/miekg/dns"

// WireStore is the part of *cache.Cache that stores an upstream's packed
// reply. It is an interface, not the cache type, because the cache
// package's own tests use this package (its Clock): importing cache here
// would be an import cycle for them.
type WireStore[Key, Answer any] interface {
	PrepareAnswer(k Key, raw []byte) (Answer, string)
	SetWire(k Key, a *Answer) (stored bool, reason string)
}

// SetMsg stores m under k the way the resolver stores an upstream's reply
// (Handler.settle): packed, made an entry by PrepareAnswer, stored by
// SetWire. reason says why it was not stored ("pack failed" when m does
// not pack).
func SetMsg[Key, Answer any](c WireStore[Key, Answer], k Key, m *dns.Msg) (stored bool, reason string) {
	raw, err := m.Pack()
	if err != nil {
		return false, "pack failed"
	}
	a, reason := c.PrepareAnswer(k, raw)
	if reason != "" {
		return false, reason
	}
	return c.SetWire(k, &a)
}
