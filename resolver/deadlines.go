package resolver

import "time"

// The wire waiters' query_timeouts (issue 17): ServeDNS gives each waiting
// client a timer of its own; the wire miss path keeps one heap of deadlines
// and one timer per handler (flights.deadlines, flights.expiry), which costs
// no allocation per miss.

// wireDeadlines is a min-heap of the waiting wire waiters by deadline
// (each knows its index, so its flight's end takes it out): the expiry
// timer is set to the earliest, and fires only when a client's
// query_timeout is really due (or, once, late: a waiter it was set for was
// answered meanwhile).
type wireDeadlines []*wireWaiter

// push adds w and reports whether it is the earliest now.
func (h *wireDeadlines) push(w *wireWaiter) bool {
	w.heapIndex = len(*h)
	*h = append(*h, w)
	return h.up(w.heapIndex) == 0
}

// remove takes out the waiter at index i.
func (h *wireDeadlines) remove(i int) {
	s := *h
	last := len(s) - 1
	removed := s[i]
	if i != last {
		s.swap(i, last)
	}
	s[last] = nil
	*h = s[:last]
	if i != last {
		h.up(h.down(i))
	}
	removed.heapIndex = -1
}

func (h wireDeadlines) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}

// up moves the waiter at i towards the root while it is earlier than its
// parent, and returns where it ends.
func (h wireDeadlines) up(i int) int {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].deadline.Before(h[parent].deadline) {
			break
		}
		h.swap(i, parent)
		i = parent
	}
	return i
}

// down moves the waiter at i away from the root while a child is earlier,
// and returns where it ends.
func (h wireDeadlines) down(i int) int {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].deadline.Before(h[least].deadline) {
			least = l
		}
		if r < len(h) && h[r].deadline.Before(h[least].deadline) {
			least = r
		}
		if least == i {
			return i
		}
		h.swap(i, least)
		i = least
	}
}

// expireWire, the expiry timer's function, answers SERVFAIL to the wire
// waiters whose query_timeout ran out, as ServeDNS's timer does; their
// flights go on and fill the cache.
func (f *flights) expireWire() {
	now := time.Now()
	var expired []*wireWaiter
	f.mu.Lock()
	for len(f.deadlines) > 0 && !f.deadlines[0].deadline.After(now) {
		w := f.deadlines[0]
		f.deadlines.remove(0)
		w.fl.removeWaiter(w)
		expired = append(expired, w)
	}
	if len(f.deadlines) > 0 {
		f.expiry.Reset(f.deadlines[0].deadline.Sub(now))
	}
	f.mu.Unlock()
	for _, w := range expired {
		w.h.answerWire(w.fl, w, true)
	}
}

// removeWaiter takes w out of fl's wire waiters; flights.mu is held.
func (fl *flight) removeWaiter(w *wireWaiter) {
	for i, have := range fl.waiters {
		if have == w {
			last := len(fl.waiters) - 1
			copy(fl.waiters[i:], fl.waiters[i+1:])
			fl.waiters[last] = nil
			fl.waiters = fl.waiters[:last]
			return
		}
	}
}
