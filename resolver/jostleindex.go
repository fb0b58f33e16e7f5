package resolver

import (
	"time"

	"github.com/towerd/towerd/resolver/heapidx"
)

// The running resolutions as victimLocked (jostle.go) asks about them: by
// parent domain with a count each, and by start, so that choosing the
// resolution that yields to a new question at a full cap costs a few heap
// steps and no allocation, rather than a walk over every running
// resolution and a map of counts per question (issue 35: a flood keeps
// the cap full, so every question of it paid that walk). A resolution is
// in the index from the moment its call runs (callStartedLocked) until it
// leaves the running set (leaveLocked); it is counted all that time, and
// queued by start only until it is chosen to yield (yieldingLocked).
type jostleIndex struct {
	// oldest are the resolutions that may yield, by start.
	oldest startQueue
	// parents by name, and byCount the same, the largest count first.
	parents map[string]*parentShare
	byCount []*parentShare
	// spare are parent shares whose count fell to zero, for the next
	// parent: a flood of new parents allocates nothing once warm.
	spare []*parentShare
}

// parentShare is one parent domain's part of the running resolutions.
type parentShare struct {
	name string
	// count is its resolutions whose call runs, yielding ones included:
	// they are the flood's still (victimLocked).
	count int
	// oldest are those of them that may yield, by start.
	oldest startQueue
	// heapIndex is its place in jostleIndex.byCount.
	heapIndex int
}

// The two start queues a resolution is in, by its jostleAt slot.
const (
	inOldest = iota // jostleIndex.oldest
	inParent        // its parentShare.oldest
)

// addLocked indexes fl, whose call now runs; f.mu is held.
func (ix *jostleIndex) addLocked(fl *flight) {
	name := parentDomain(fl.key.Name)
	p := ix.parents[name]
	if p == nil {
		if ix.parents == nil {
			ix.parents = make(map[string]*parentShare)
		}
		if n := len(ix.spare); n > 0 {
			p, ix.spare = ix.spare[n-1], ix.spare[:n-1]
		} else {
			p = &parentShare{oldest: startQueue{order: byStart{slot: inParent}}}
		}
		p.name = name
		ix.parents[name] = p
		heapidx.Push(&ix.byCount, byCount{}, p)
	}
	p.count++
	heapidx.Fix(ix.byCount, byCount{}, p)
	fl.share = p
	ix.oldest.push(fl)
	p.oldest.push(fl)
}

// yieldingLocked takes fl off the start queues: it is not chosen again,
// and still counted. f.mu is held.
func (ix *jostleIndex) yieldingLocked(fl *flight) {
	if fl.share == nil {
		return
	}
	ix.oldest.remove(fl)
	fl.share.oldest.remove(fl)
}

// removeLocked forgets fl, which leaves the running set; f.mu is held.
func (ix *jostleIndex) removeLocked(fl *flight) {
	p := fl.share
	if p == nil {
		return // its call never ran
	}
	ix.yieldingLocked(fl)
	fl.share = nil
	p.count--
	if p.count > 0 {
		heapidx.Fix(ix.byCount, byCount{}, p)
		return
	}
	heapidx.Remove(&ix.byCount, byCount{}, p)
	delete(ix.parents, p.name)
	p.name = ""
	ix.spare = append(ix.spare, p)
}

// dominant is the parent with the most resolutions whose call runs (own,
// when it is one of several with that count), nil when none runs.
func (ix *jostleIndex) dominant(own string) *parentShare {
	if len(ix.byCount) == 0 {
		return nil
	}
	top := ix.byCount[0]
	if p := ix.parents[own]; p != nil && p.count == top.count {
		return p
	}
	return top
}

// startQueue is a min-heap of resolutions by start; each knows its place
// in it by its jostleAt slot (-1 when out).
type startQueue struct {
	order byStart
	items []*flight
}

// byStart orders a start queue; a resolution keeps its index in its
// jostleAt slot.
type byStart struct{ slot int }

func (byStart) Less(a, b *flight) bool       { return a.started.Before(b.started) }
func (o byStart) Index(fl *flight) int       { return fl.jostleAt[o.slot] }
func (o byStart) SetIndex(fl *flight, i int) { fl.jostleAt[o.slot] = i }

// first is the earliest started, nil when empty.
func (q *startQueue) first() *flight {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// firstBefore is the earliest started if it started before cutoff.
func (q *startQueue) firstBefore(cutoff time.Time) *flight {
	if fl := q.first(); fl != nil && fl.started.Before(cutoff) {
		return fl
	}
	return nil
}

func (q *startQueue) push(fl *flight) { heapidx.Push(&q.items, q.order, fl) }

func (q *startQueue) remove(fl *flight) { heapidx.Remove(&q.items, q.order, fl) }

// byCount orders jostleIndex.byCount, a max-heap: the parent with the
// most resolutions first. A share keeps its index in heapIndex.
type byCount struct{}

func (byCount) Less(a, b *parentShare) bool    { return a.count > b.count }
func (byCount) Index(p *parentShare) int       { return p.heapIndex }
func (byCount) SetIndex(p *parentShare, i int) { p.heapIndex = i }
