// Package heapidx is the one binary heap whose elements know their place
// in it, shared by the handler's client deadlines, the jostle's running
// resolutions by start and parent domains by count, and the upstream
// calls' timers: three hand-written copies of the same sift rules before.
// Each of them takes an element out, or moves it when its key changed,
// from the element alone (a flight ends, a call is rearmed), so an element
// keeps its index and a removal or a fix costs O(log n), not a search.
//
// A heap is the caller's own slice S of elements T (pointers, in
// practice) and an Order O, a type parameter, that compares two elements
// and reads and writes where an element keeps its index. container/heap
// would want a type with five methods around the slice, Push and Pop
// through an interface and elements passed as any; here nothing is
// allocated once the slice has grown, and the caller still reads its
// slice (h[0] is the root). An element may be in several heaps at once
// when each heap's Order keeps its index in another place (the jostle's
// two start queues). It imports only the standard library: a leaf the
// resolver and the upstream both import.
package heapidx

// Order is how one heap orders its elements and where each keeps its
// place in it. Its methods run under whatever guards the heap.
type Order[T any] interface {
	// Less reports whether a goes nearer the root than b: the root is the
	// least (a min-heap by time, or a max-heap with Less as "greater").
	// Equal elements keep the order they happen to have.
	Less(a, b T) bool
	// Index is x's index as SetIndex last recorded it: -1 (or anything
	// outside the heap) when x is out. An element that was never in may
	// read as any index: Remove and In check the element there is x.
	Index(x T) int
	// SetIndex records x's index, -1 when x leaves the heap.
	SetIndex(x T, i int)
}

// Push adds x, which is not in h, and returns its index: 0 when it is the
// root now.
func Push[S ~[]T, T comparable, O Order[T]](h *S, o O, x T) int {
	i := len(*h)
	*h = append(*h, x)
	o.SetIndex(x, i)
	return up(*h, o, i)
}

// Fix moves x to its place in h after its key changed, and returns its
// index; -1, and nothing moved, when x is not in h.
func Fix[S ~[]T, T comparable, O Order[T]](h S, o O, x T) int {
	i := indexIn(h, o, x)
	if i < 0 {
		return -1
	}
	if j := down(h, o, i); j != i {
		return j
	}
	return up(h, o, i)
}

// Remove takes x out of h; false when it was not in.
func Remove[S ~[]T, T comparable, O Order[T]](h *S, o O, x T) bool {
	s := *h
	i := indexIn(s, o, x)
	if i < 0 {
		return false
	}
	last := len(s) - 1
	if i != last {
		put(s, o, i, s[last])
	}
	var zero T
	s[last] = zero // the slice must not keep x alive
	s = s[:last]
	*h = s
	if i != last && down(s, o, i) == i {
		up(s, o, i)
	}
	o.SetIndex(x, -1)
	return true
}

// In reports whether x is in h.
func In[S ~[]T, T comparable, O Order[T]](h S, o O, x T) bool {
	return indexIn(h, o, x) >= 0
}

// indexIn is x's index in h, -1 when it is not in h: the index x keeps
// is trusted only when h holds x there.
func indexIn[T comparable, O Order[T]](h []T, o O, x T) int {
	if i := o.Index(x); i >= 0 && i < len(h) && h[i] == x {
		return i
	}
	return -1
}

// up moves the element at i towards the root while it goes before its
// parent, and returns where it ends. The parents it passes move down into
// the hole it leaves, rather than swapping: one index written a level.
func up[T any, O Order[T]](h []T, o O, i int) int {
	x, start := h[i], i
	for i > 0 {
		parent := (i - 1) / 2
		if !o.Less(x, h[parent]) {
			break
		}
		put(h, o, i, h[parent])
		i = parent
	}
	if i != start {
		put(h, o, i, x)
	}
	return i
}

// down moves the element at i away from the root while a child goes
// before it (the lesser child, the left one of two equal), and returns
// where it ends; the children it passes move up into its hole.
func down[T any, O Order[T]](h []T, o O, i int) int {
	x, start := h[i], i
	for {
		child := 2*i + 1
		if child >= len(h) {
			break
		}
		if r := child + 1; r < len(h) && o.Less(h[r], h[child]) {
			child = r
		}
		if !o.Less(h[child], x) {
			break
		}
		put(h, o, i, h[child])
		i = child
	}
	if i != start {
		put(h, o, i, x)
	}
	return i
}

// put places x at i and tells it so.
func put[T any, O Order[T]](h []T, o O, i int, x T) {
	h[i] = x
	o.SetIndex(x, i)
}
