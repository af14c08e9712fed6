package tier

import (
	"cmp"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Touch notes an access to ino for LRU eviction. It costs one map lookup and
// one atomic store; ReadAt, WriteAt and Fill already do it themselves.
func (t *Tier) Touch(ino uint64) {
	if n, err := t.lookup(ino); err == nil && n != nil {
		n.lastUse.Store(t.now())
	}
}

// LastUse returns when ino was last read, written, filled or touched. After a
// reopen it starts from the data file's access or modification time.
func (t *Tier) LastUse(ino uint64) (time.Time, bool) {
	n, err := t.lookup(ino)
	if err != nil || n == nil {
		return time.Time{}, false
	}
	return time.Unix(0, n.lastUse.Load()), true
}

// Usage returns the bytes of disk the tier's data files occupy: allocated
// blocks (st_blocks × 512), so sparse files count only what they hold and
// preallocated blocks count in full. Map files are not counted. Writes only
// flag an inode; Usage stats the flagged ones, so it costs one fstat per
// inode changed since the previous call.
func (t *Tier) Usage() (bytes int64) {
	t.refresh()
	return t.usage.Load()
}

// staleSet lists the inodes whose allocation may have changed since it was
// last measured. An inode is in the list exactly when its isStale bit is set.
type staleSet struct {
	mu    sync.Mutex
	nodes []*inode
}

// markStale flags n for the next Usage. Cheap when already flagged.
func (t *Tier) markStale(n *inode) {
	if n.isStale.Load() || !n.isStale.CompareAndSwap(false, true) {
		return
	}
	t.stale.mu.Lock()
	t.stale.nodes = append(t.stale.nodes, n)
	t.stale.mu.Unlock()
}

// refresh re-measures the allocation of every flagged inode.
func (t *Tier) refresh() {
	t.stale.mu.Lock()
	nodes := t.stale.nodes
	t.stale.nodes = nil
	t.stale.mu.Unlock()
	for _, n := range nodes {
		// Clear the flag first: a write racing with the stat flags again.
		n.isStale.Store(false)
		if !n.life.TryRLock() {
			// Being replaced or removed right now: measure next time.
			t.markStale(n)
			continue
		}
		if !n.dead {
			var st syscall.Stat_t
			var err error
			if f := n.f.Load(); f != nil {
				err = syscall.Fstat(int(f.Fd()), &st)
			} else {
				err = syscall.Stat(t.dataPath(n.ino), &st)
			}
			if err == nil {
				t.usage.Add(st.Blocks*512 - n.alloc.Swap(st.Blocks*512))
			}
		}
		n.life.RUnlock()
	}
}

// Evict removes least recently used inodes, skipping those pinned reports,
// until Usage is at most Options.Capacity. It does nothing when Capacity is 0
// or Usage is already within it. It returns the bytes freed.
//
// pinned is called with the inode's state locked, so an inode it reports
// unpinned cannot be written before it is gone; it must therefore not call
// back into the Tier. The caller must report as pinned every inode with
// unexported (dirty) data and should report every inode it has open for
// reading, since eviction empties the inode under a reader that already
// checked Missing. Inodes busy with another operation are skipped.
func (t *Tier) Evict(pinned func(ino uint64) bool) (freed int64, err error) {
	if t.opt.Capacity == 0 {
		return 0, nil
	}
	if t.Usage() <= t.opt.Capacity {
		return 0, nil
	}
	return t.evict(pinned, func(int64) bool { return t.usage.Load() > t.opt.Capacity })
}

// EvictIdle removes every inode not used since before, skipping those pinned
// reports, whatever the capacity. pinned is as for Evict.
func (t *Tier) EvictIdle(before time.Time, pinned func(ino uint64) bool) (freed int64, err error) {
	t.refresh()
	limit := before.UnixNano()
	return t.evict(pinned, func(lastUse int64) bool { return lastUse < limit })
}

// evict visits inodes from least to most recently used and removes each
// unpinned one while want(lastUse) holds.
func (t *Tier) evict(pinned func(uint64) bool, want func(lastUse int64) bool) (freed int64, err error) {
	type candidate struct {
		n       *inode
		lastUse int64
	}
	var cands []candidate
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, n := range sh.m {
			cands = append(cands, candidate{n, n.lastUse.Load()})
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.lastUse, b.lastUse), cmp.Compare(a.n.ino, b.n.ino))
	})
	for _, c := range cands {
		if t.closed.Load() {
			return freed, opErr("evict", c.n.ino, ErrClosed)
		}
		if !want(c.lastUse) {
			break
		}
		n := c.n
		if !n.life.TryLock() {
			continue // in use right now, so not least recently used
		}
		if n.dead || n.lastUse.Load() != c.lastUse || (pinned != nil && pinned(n.ino)) {
			n.life.Unlock()
			continue
		}
		alloc := n.alloc.Load()
		rerr := t.remove(n)
		n.life.Unlock()
		if rerr != nil {
			return freed, opErr("evict", n.ino, rerr)
		}
		freed += alloc
	}
	return freed, nil
}
