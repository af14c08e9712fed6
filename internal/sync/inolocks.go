package sync

import (
	gosync "sync"

	"bucketfs/internal/meta"
)

// keyedLocks is a table of mutexes created on demand, one per key, and
// freed when nobody holds or waits for them.
type keyedLocks[K comparable] struct {
	mu    gosync.Mutex
	locks map[K]*refMutex
}

type refMutex struct {
	mu   gosync.Mutex
	refs int
}

// Lock locks k and returns the function that unlocks it.
func (t *keyedLocks[K]) Lock(k K) (unlock func()) {
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

// InodeLocks serialises the exporter and the importer on one inode, so that
// an upload and the import of a bucket-side change to the same file never
// interleave: the importer then always compares the bucket against what the
// exporter recorded last. The lock is held across bucket requests, but only
// for that one inode.
type InodeLocks struct{ keyedLocks[meta.Ino] }

// NewInodeLocks returns an empty lock table.
func NewInodeLocks() *InodeLocks { return &InodeLocks{} }
