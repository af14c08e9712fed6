// Package keylock is a table of mutexes made on demand, one per key, and
// freed when nobody holds or waits for them.
package keylock

import (
	"cmp"
	"slices"
	"sync"
)

// Table locks keys. The zero value is ready to use.
type Table[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*refMutex
}

type refMutex struct {
	mu   sync.Mutex
	refs int
}

// Lock locks k and returns the function that unlocks it.
func (t *Table[K]) Lock(k K) (unlock func()) {
	t.mu.Lock()
	if t.locks == nil {
		t.locks = map[K]*refMutex{}
	}
	l := t.locks[k]
	if l == nil {
		l = &refMutex{}
		t.locks[k] = l
	}
	l.refs++
	t.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		t.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(t.locks, k)
		}
		t.mu.Unlock()
	}
}

// LockAll locks every key of keys, in order and each once, so that two
// callers locking overlapping sets never wait on each other in a cycle.
// It returns the function that unlocks them all.
func LockAll[K cmp.Ordered](t *Table[K], keys []K) (unlock func()) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	unlocks := make([]func(), 0, len(keys))
	for _, k := range keys {
		unlocks = append(unlocks, t.Lock(k))
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}
}
