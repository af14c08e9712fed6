package sync

import (
	gosync "sync"

	"bucketfs/internal/meta"
)

// InodeLocks serialises the exporter and the importer on one inode, so that
// an upload and the import of a bucket-side change to the same file never
// interleave: the importer then always compares the bucket against what the
// exporter recorded last. The lock is held across bucket requests, but only
// for that one inode.
type InodeLocks struct {
	mu    gosync.Mutex
	locks map[meta.Ino]*inodeLock
}

type inodeLock struct {
	mu   gosync.Mutex
	refs int
}

// NewInodeLocks returns an empty lock table.
func NewInodeLocks() *InodeLocks {
	return &InodeLocks{locks: map[meta.Ino]*inodeLock{}}
}

// Lock locks ino and returns the function that unlocks it.
func (t *InodeLocks) Lock(ino meta.Ino) (unlock func()) {
	t.mu.Lock()
	l := t.locks[ino]
	if l == nil {
		l = &inodeLock{}
		t.locks[ino] = l
	}
	l.refs++
	t.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		t.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(t.locks, ino)
		}
		t.mu.Unlock()
	}
}
