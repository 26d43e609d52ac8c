package lock

import "time"

// timed is what a timeHeap holds: an item that has a time, and knows its
// place in the heap.
type timed interface {
	when() time.Time
	place() *int // its index in the heap; -1 when not in one
}

// timeHeap is a container/heap of items, soonest first: the lease timers of
// a Client's locks, the expiry of the memory provider's records.
type timeHeap[T timed] []T

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(i, j int) bool { return h[i].when().Before(h[j].when()) }
func (h timeHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].place(), *h[j].place() = i, j
}

func (h *timeHeap[T]) Push(x any) {
	t := x.(T)
	*t.place() = len(*h)
	*h = append(*h, t)
}

func (h *timeHeap[T]) Pop() any {
	old := *h
	n := len(old) - 1
	t := old[n]
	var zero T
	old[n] = zero
	*h = old[:n]
	*t.place() = -1
	return t
}
