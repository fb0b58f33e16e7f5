package resolver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// The failure memory (RFC 9520): what it remembers, for how long, and its
// bound under a flood of failing names.
func TestFailureMemory(t *testing.T) {
	m := newFailureMemory()
	now := time.Unix(1_000_000, 0)
	key := func(i int) cache.Key {
		return cache.NewKey(fmt.Sprintf("n%d.example.", i), dns.TypeA, dns.ClassINET, false, false)
	}

	for _, tc := range []struct {
		err  error
		want bool
	}{
		{upstream.ErrBrokenChain, true},
		{errChase, true},
		{upstream.ErrTimeout, true},
		{&upstream.RcodeError{Rcode: dns.RcodeServerFailure}, true},
		{&upstream.RcodeError{Rcode: dns.RcodeRefused}, true},
		{fmt.Errorf("x: %w", upstream.ErrNetwork), true},
		{context.Canceled, false},
		{errUpstreamReply{"truncated"}, false},
		{errors.New("query could not be sent"), false},
		{nil, false},
	} {
		if got := rememberedFailure(tc.err); got != tc.want {
			t.Errorf("rememberedFailure(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}

	m.remember(key(0), now, upstream.ErrTimeout)
	m.remember(key(1), now, context.Canceled)
	if _, ok := m.remembered(key(0), now.Add(failureTTL-time.Millisecond)); !ok {
		t.Error("a timeout is not remembered within failureTTL")
	}
	if _, ok := m.remembered(key(0), now.Add(failureTTL)); ok {
		t.Error("a failure is remembered past failureTTL")
	}
	if _, ok := m.remembered(key(1), now); ok {
		t.Error("a cancelled resolution is remembered")
	}
	m.forget(key(0))
	if _, ok := m.remembered(key(0), now); ok {
		t.Error("an answered question is still remembered")
	}

	// The bound: past maxRemembered the oldest go first.
	for i := range maxRemembered + 100 {
		m.remember(key(i), now, upstream.ErrTimeout)
	}
	if n := m.size.Load(); n != maxRemembered {
		t.Errorf("%d failures held, want the bound %d", n, maxRemembered)
	}
	if _, ok := m.remembered(key(5), now); ok {
		t.Error("an oldest failure outlived the bound")
	}
	if _, ok := m.remembered(key(maxRemembered+99), now); !ok {
		t.Error("the newest failure was dropped")
	}
}
