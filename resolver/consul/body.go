package consul

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// Every reply body from the agent is read within a size bound (here) and a
// time bound (the query's context, see queryOptions and agentReadTimeout):
// whoever answers on the agent's address — the agent, a broken one, or a
// local user who bound its port while it was down — cannot make towerd
// hold more than a few MiB for it (issue 21). Past the bound the query
// fails with ErrBodyTooLarge, the service's names go to the agent's DNS and
// its watch backs off.

// DefaultMaxBody bounds one reply body: a health result of a service with
// a few thousand instances (1–2 KB each) fits.
const DefaultMaxBody = 4 << 20

// maxErrorBody bounds the body of a reply that is not 200: the API client
// reads it whole into its error's text, which is logged and shown in /stats.
const maxErrorBody = 64 << 10

// bodyBudgetBodies is how many bodies at the full bound may be open at
// once: all bodies being read together hold at most this many times the
// bound, whatever the number of watches (each holds a connection, and a
// hostile agent could send every one of them a body at the bound).
const bodyBudgetBodies = 4

// ErrBodyTooLarge marks a reply whose body passed its bound, or arrived
// while the bodies being read already held the whole budget.
var ErrBodyTooLarge = errors.New("consul agent reply body over its size bound")

// boundedTransport wraps the HTTP transport so that every response body is
// read through a boundedBody.
type boundedTransport struct {
	next    http.RoundTripper
	maxBody int64
	budget  *bodyBudget
}

// bodyBudget counts the bytes read by the bodies still open.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	limit := t.maxBody
	if resp.StatusCode != http.StatusOK {
		limit = min(limit, maxErrorBody)
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s announced %d bytes, the bound is %d", ErrBodyTooLarge,
			req.URL.Path, resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{rc: resp.Body, left: limit, limit: limit, budget: t.budget}
	return resp, nil
}

// boundedBody fails a read past its limit, or past the shared budget, with
// ErrBodyTooLarge. What it read stays counted in the budget until Close.
type boundedBody struct {
	rc     io.ReadCloser
	left   int64 // bytes this body may still read
	limit  int64
	read   int64 // bytes read, counted in budget
	budget *bodyBudget
	closed bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	b.read += int64(n)
	if b.budget.used.Add(int64(n)) > b.budget.max {
		return n, fmt.Errorf("%w: the bodies being read hold more than %d bytes together", ErrBodyTooLarge,
			b.budget.max)
	}
	return n, err
}

func (b *boundedBody) Close() error {
	if !b.closed {
		b.closed = true
		b.budget.used.Add(-b.read)
	}
	return b.rc.Close()
}
