package resolver

import "time"

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
	byCount parentHeap
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
			p = &parentShare{oldest: startQueue{slot: inParent}}
		}
		p.name = name
		ix.parents[name] = p
		ix.byCount.push(p)
	}
	p.count++
	ix.byCount.up(p.heapIndex)
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
		ix.byCount.down(p.heapIndex)
		return
	}
	ix.byCount.remove(p.heapIndex)
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
	slot  int
	items []*flight
}

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

func (q *startQueue) push(fl *flight) {
	fl.jostleAt[q.slot] = len(q.items)
	q.items = append(q.items, fl)
	q.up(len(q.items) - 1)
}

func (q *startQueue) remove(fl *flight) {
	i := fl.jostleAt[q.slot]
	if i < 0 {
		return
	}
	last := len(q.items) - 1
	if i != last {
		q.swap(i, last)
	}
	q.items[last] = nil
	q.items = q.items[:last]
	if i != last {
		q.up(q.down(i))
	}
	fl.jostleAt[q.slot] = -1
}

func (q *startQueue) swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].jostleAt[q.slot], q.items[j].jostleAt[q.slot] = i, j
}

func (q *startQueue) up(i int) int {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.items[i].started.Before(q.items[parent].started) {
			break
		}
		q.swap(i, parent)
		i = parent
	}
	return i
}

func (q *startQueue) down(i int) int {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(q.items) && q.items[l].started.Before(q.items[least].started) {
			least = l
		}
		if r < len(q.items) && q.items[r].started.Before(q.items[least].started) {
			least = r
		}
		if least == i {
			return i
		}
		q.swap(i, least)
		i = least
	}
}

// parentHeap is a max-heap of parent shares by count.
type parentHeap []*parentShare

func (h *parentHeap) push(p *parentShare) {
	p.heapIndex = len(*h)
	*h = append(*h, p)
	h.up(p.heapIndex)
}

func (h *parentHeap) remove(i int) {
	s := *h
	last := len(s) - 1
	if i != last {
		s.swap(i, last)
	}
	s[last] = nil
	*h = s[:last]
	if i != last {
		h.up(h.down(i))
	}
}

func (h parentHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}

func (h parentHeap) up(i int) int {
	for i > 0 {
		parent := (i - 1) / 2
		if h[i].count <= h[parent].count {
			break
		}
		h.swap(i, parent)
		i = parent
	}
	return i
}

func (h parentHeap) down(i int) int {
	for {
		most, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].count > h[most].count {
			most = l
		}
		if r < len(h) && h[r].count > h[most].count {
			most = r
		}
		if most == i {
			return i
		}
		h.swap(i, most)
		i = most
	}
}
