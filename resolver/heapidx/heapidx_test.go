package heapidx

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// item is an element of up to two heaps at once, as a running resolution
// is of the jostle's two start queues: at[slot] is its index in each.
type item struct {
	key int
	at  [2]int
}

// byKey is a min-heap by key keeping its index in at[slot]; byKeyMax the
// max-heap in at[1].
type byKey struct{ slot int }

func (o byKey) Less(a, b *item) bool     { return a.key < b.key }
func (o byKey) Index(x *item) int        { return x.at[o.slot] }
func (o byKey) SetIndex(x *item, i int)  { x.at[o.slot] = i }
func (byKeyMax) Less(a, b *item) bool    { return a.key > b.key }
func (byKeyMax) Index(x *item) int       { return x.at[1] }
func (byKeyMax) SetIndex(x *item, i int) { x.at[1] = i }

type byKeyMax struct{}

func newItem(key int) *item { return &item{key: key, at: [2]int{-1, -1}} }

// model runs a heap beside a reference, the live elements, and checks
// after every operation that both agree: the same elements, each knowing
// its index, the heap's order kept, the root the least by the reference
// sorted.
type model[O Order[*item]] struct {
	t    testing.TB
	o    O
	less func(a, b int) int // the reference's order of keys
	h    []*item
	live []*item
}

func (m *model[O]) check(op string) {
	m.t.Helper()
	if len(m.h) != len(m.live) {
		m.t.Fatalf("%s: heap of %d, %d live", op, len(m.h), len(m.live))
	}
	for i, x := range m.h {
		if got := m.o.Index(x); got != i {
			m.t.Fatalf("%s: element at %d thinks it is at %d", op, i, got)
		}
		if i > 0 && m.o.Less(x, m.h[(i-1)/2]) {
			m.t.Fatalf("%s: order broken at %d", op, i)
		}
	}
	for _, x := range m.live {
		if !In(m.h, m.o, x) {
			m.t.Fatalf("%s: live element %d not in the heap", op, x.key)
		}
	}
	if len(m.live) > 0 {
		first := m.live[0].key
		for _, x := range m.live[1:] {
			if m.less(x.key, first) < 0 {
				first = x.key
			}
		}
		if m.h[0].key != first {
			m.t.Fatalf("%s: root %d, the reference's first %d", op, m.h[0].key, first)
		}
	}
}

func (m *model[O]) push(key int) {
	x := newItem(key)
	i := Push(&m.h, m.o, x)
	if (i == 0) != (m.h[0] == x) || m.h[i] != x {
		m.t.Fatalf("push of %d reported index %d", key, i)
	}
	m.live = append(m.live, x)
	m.check("push")
}

// remove takes out the live element at index j of the heap (root, last,
// or any), and checks it is out after.
func (m *model[O]) remove(j int) {
	x := m.h[j]
	if !Remove(&m.h, m.o, x) {
		m.t.Fatal("remove of a live element reported it out")
	}
	if m.o.Index(x) != -1 || In(m.h, m.o, x) {
		m.t.Fatal("a removed element keeps its index")
	}
	if Remove(&m.h, m.o, x) {
		m.t.Fatal("a second remove reported the element in")
	}
	m.live = slices.DeleteFunc(m.live, func(y *item) bool { return y == x })
	m.check("remove")
}

// fix changes the key of the element at index j and moves it.
func (m *model[O]) fix(j, key int) {
	x := m.h[j]
	x.key = key
	i := Fix(m.h, m.o, x)
	if i < 0 || m.h[i] != x {
		m.t.Fatalf("fix reported index %d", i)
	}
	m.check("fix")
}

// pop takes the root, which must be the reference's least.
func (m *model[O]) pop() {
	m.remove(0)
}

// drain pops everything: the keys come out in the reference's order.
func (m *model[O]) drain() {
	var want []int
	for _, x := range m.live {
		want = append(want, x.key)
	}
	slices.SortFunc(want, m.less)
	var got []int
	for len(m.h) > 0 {
		got = append(got, m.h[0].key)
		m.pop()
	}
	if !slices.Equal(got, want) {
		m.t.Fatalf("drained %v, want %v", got, want)
	}
}

// step runs one operation chosen by op on the heap, with arg for its key
// or position: push, pop (the root), remove of the last, of a middle
// element and of any, fix of any to a new key.
func (m *model[O]) step(op, arg uint16) {
	n := len(m.h)
	key := int(arg % 64) // few keys: equal keys are common
	switch op % 7 {
	case 0, 1:
		m.push(key)
	case 2:
		if n > 0 {
			m.pop()
		}
	case 3:
		if n > 0 {
			m.remove(n - 1)
		}
	case 4:
		if n > 2 {
			m.remove(n / 2)
		}
	case 5:
		if n > 0 {
			m.remove(int(arg) % n)
		}
	case 6:
		if n > 0 {
			m.fix(int(arg)%n, int(arg>>8)%64)
		}
	}
}

func ascending(a, b int) int  { return a - b }
func descending(a, b int) int { return b - a }

func TestAgainstSortedReference(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		minHeap := &model[byKey]{t: t, o: byKey{slot: 0}, less: ascending}
		maxHeap := &model[byKeyMax]{t: t, o: byKeyMax{}, less: descending}
		for range 2000 {
			op, arg := uint16(rng.UintN(7)), uint16(rng.UintN(1<<16))
			minHeap.step(op, arg)
			maxHeap.step(op, arg)
		}
		minHeap.drain()
		maxHeap.drain()
	}
}

// Removing the root, the last and a middle element of heaps of every
// small size, each at every position, keeps every index right.
func TestRemoveEveryPosition(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for j := range n {
			m := &model[byKey]{t: t, o: byKey{}, less: ascending}
			for k := range n {
				m.push((k * 5) % 7)
			}
			m.remove(j)
			m.drain()
		}
	}
}

// One element in two heaps, each keeping its index elsewhere, as a
// resolution is in the jostle's overall and per-parent start queues.
func TestTwoHeapsOneElement(t *testing.T) {
	var all, some []*item
	overall, part := byKey{slot: 0}, byKey{slot: 1}
	var xs []*item
	for k := range 50 {
		x := newItem((k * 37) % 50)
		xs = append(xs, x)
		Push(&all, overall, x)
		if k%2 == 0 {
			Push(&some, part, x)
		}
	}
	for k, x := range xs {
		if k%3 == 0 {
			Remove(&all, overall, x)
			if Remove(&some, part, x) != (k%2 == 0) {
				t.Fatalf("element %d: second heap's membership wrong", k)
			}
		}
	}
	for _, h := range []struct {
		h []*item
		o byKey
	}{{all, overall}, {some, part}} {
		for i, x := range h.h {
			if h.o.Index(x) != i {
				t.Fatalf("slot %d: element at %d thinks it is at %d", h.o.slot, i, h.o.Index(x))
			}
			if i > 0 && x.key < h.h[(i-1)/2].key {
				t.Fatalf("slot %d: order broken at %d", h.o.slot, i)
			}
		}
	}
}

// An element never pushed may read as index 0 (its zero value): it is not
// in, and Remove and Fix leave the heap alone.
func TestNeverPushedIsOut(t *testing.T) {
	var h []*item
	Push(&h, byKey{}, newItem(1))
	stranger := &item{key: 0} // at[0] == 0, the root's index
	if In(h, byKey{}, stranger) || Remove(&h, byKey{}, stranger) || Fix(h, byKey{}, stranger) != -1 {
		t.Fatal("an element never pushed counted as in")
	}
	if len(h) != 1 || h[0].key != 1 || h[0].at[0] != 0 {
		t.Fatal("the heap changed")
	}
}

// Once its slice has room, the heap allocates nothing: it is on every
// miss's path.
func TestNoAllocations(t *testing.T) {
	h := make([]*item, 0, 64)
	xs := make([]*item, 64)
	for i := range xs {
		xs[i] = newItem(i)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i, x := range xs {
			x.key = (i * 29) % 64
			Push(&h, byKey{}, x)
		}
		for i, x := range xs {
			if i%2 == 0 {
				x.key = 64 - x.key
				Fix(h, byKey{}, x)
			}
		}
		for len(h) > 0 {
			Remove(&h, byKey{}, h[0])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}

// FuzzHeap runs the reference model on operations the fuzzer chooses, two
// bytes' op and two bytes' argument each.
func FuzzHeap(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 2, 0})
	f.Add([]byte{0, 0, 9, 0, 0, 0, 3, 0, 0, 0, 5, 0, 4, 0, 0, 0, 6, 0, 7, 1, 5, 0, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		minHeap := &model[byKey]{t: t, o: byKey{slot: 1}, less: ascending}
		maxHeap := &model[byKeyMax]{t: t, o: byKeyMax{}, less: descending}
		for len(ops) >= 4 {
			op, arg := binary.LittleEndian.Uint16(ops), binary.LittleEndian.Uint16(ops[2:])
			ops = ops[4:]
			minHeap.step(op, arg)
			maxHeap.step(op, arg)
		}
		minHeap.drain()
		maxHeap.drain()
	})
}

// BenchmarkPushFixRemove is a heap's work per element at a size a busy
// node's deadline heap has: a push, a fix, and a removal.
func BenchmarkPushFixRemove(b *testing.B) {
	const n = 256
	h := make([]*item, 0, n)
	xs := make([]*item, n)
	for i := range xs {
		xs[i] = newItem((i * 97) % n)
		Push(&h, byKey{}, xs[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		x := xs[i%n]
		Remove(&h, byKey{}, x)
		x.key = (x.key + 131) % n
		Push(&h, byKey{}, x)
		x.key = (x.key + 7) % n
		Fix(h, byKey{}, x)
		i++
	}
}
