package tier

import (
	"errors"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Create starts ino as a fresh file-side file of the given size: all of
// [0, size) is present and reads as zeros. Any previous state of ino is
// replaced; if a synced map existed it is durably removed first, so a crash
// can never resurrect claims over the new, unsynced contents.
func (t *Tier) Create(ino uint64, size int64) error {
	if size < 0 {
		return opErr("create", ino, unix.EINVAL)
	}
	n, created, err := t.exclusive(ino, true, size)
	if err != nil {
		return opErr("create", ino, err)
	}
	defer n.life.Unlock()
	if err := t.create(n, size, created); err != nil {
		// Whatever was there is half replaced: drop it all.
		t.remove(n)
		return opErr("create", ino, err)
	}
	return nil
}

// create requires n.life held exclusively.
// fresh says the tier had no state for n: a data file left on disk from
// before (a crash after a Remove) may still exist, but only an empty new
// file needs no truncation.
func (t *Tier) create(n *inode, size int64, fresh bool) error {
	if err := t.dropMap(n); err != nil {
		return err
	}
	f, err := t.file(n)
	if err != nil {
		return err
	}
	if !fresh {
		if err := f.Truncate(0); err != nil {
			return err
		}
	} else if st, err := f.Stat(); err != nil || st.Size() != 0 {
		if err := f.Truncate(0); err != nil {
			return err
		}
	}
	if size > 0 {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.ext, n.present, n.size = nil, 0, 0
	n.markLocked(0, size, false) // no-op for size 0
	n.size = size
	n.gen++
	n.epoch = t.epochs.Add(1)
	n.unsynced = true
	n.mu.Unlock()
	n.lastUse.Store(t.now())
	t.markStale(n)
	return nil
}

// Init starts ino as an object imported from the bucket, of the given size,
// with nothing present. If the tier already holds state for ino it is kept
// unchanged (size included); call Reset to discard it, for instance when the
// object changed in the bucket. Init does no disk I/O.
func (t *Tier) Init(ino uint64, size int64) error {
	if size < 0 {
		return opErr("init", ino, unix.EINVAL)
	}
	// Fast path without the inode lock, so Init on open never waits for
	// I/O in flight on the inode.
	if n, err := t.lookup(ino); err != nil {
		return opErr("init", ino, err)
	} else if n != nil {
		return nil
	}
	n, _, err := t.exclusive(ino, true, size)
	if err != nil {
		return opErr("init", ino, err)
	}
	n.life.Unlock()
	return nil
}

// Reset discards everything present for ino and starts it again as an
// imported object of the given size with nothing present, as Init does for a
// new inode. The synced map, if any, is durably removed before the data file
// is emptied.
func (t *Tier) Reset(ino uint64, size int64) error {
	if size < 0 {
		return opErr("reset", ino, unix.EINVAL)
	}
	return t.ResetWith(ino, func() (int64, error) { return size, nil })
}

// ResetWith is Reset around commit, which makes a new object version the
// file's content (in the namespace) and returns its size; if commit fails,
// the tier's data stays as it was and the error is returned.
//
// It holds ino's Guard exclusively, so a change made under Guard (a write,
// truncate or punch and its record in the namespace) lands either before
// (and commit sees its record) or after the reset, never with its bytes
// discarded after commit looked. The map is durably removed before commit
// runs, so a crash after commit can never show the old version's cached
// bytes as the new version's; if commit fails the map is made durable again.
// Every Fill begun before the reset is refused (ErrStale), as it may carry
// bytes of the old version.
func (t *Tier) ResetWith(ino uint64, commit func() (size int64, err error)) error {
	g := t.guard(ino)
	g.Lock()
	defer g.Unlock()
	n, _, err := t.exclusive(ino, true, 0)
	if err != nil {
		return opErr("reset", ino, err)
	}
	defer n.life.Unlock()
	n.mu.Lock()
	hadMap := n.mapOnDisk
	n.mu.Unlock()
	if err := t.dropMap(n); err != nil {
		return opErr("reset", ino, err)
	}
	size, err := commit()
	if err == nil && size < 0 {
		err = unix.EINVAL
	}
	if err != nil {
		n.mu.Lock()
		n.unsynced = true // the map on disk is gone
		n.mu.Unlock()
		if hadMap {
			// It may have claimed fsynced data: claim it again before any
			// crash can drop the data as unclaimed debris.
			n.syncMu.Lock()
			serr := t.syncLocked(n)
			n.syncMu.Unlock()
			return errors.Join(err, serr)
		}
		return err
	}
	if f := n.f.Load(); f != nil {
		if err := f.Truncate(0); err != nil {
			return opErr("reset", ino, err)
		}
	} else if err := os.Truncate(t.dataPath(ino), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return opErr("reset", ino, err)
	}
	n.mu.Lock()
	n.ext = nil
	n.present = 0
	n.size = size
	n.gen++
	n.epoch = t.epochs.Add(1)
	n.unsynced = false // nothing on disk, nothing to claim
	n.mu.Unlock()
	t.markStale(n)
	return nil
}

// Guard holds off ResetWith on ino until the returned function is called.
// A caller changing a file's data takes it around the tier change and the
// namespace record of it, so an import of a new version either sees the
// record or comes after both. Guards are striped: an import may wait for a
// change to another inode, briefly.
func (t *Tier) Guard(ino uint64) (unlock func()) {
	g := t.guard(ino)
	g.RLock()
	return g.RUnlock
}

func (t *Tier) guard(ino uint64) *sync.RWMutex { return &t.guards[ino%guardStripes] }

// Truncate sets the logical size of ino. Shrinking drops the data and the
// present ranges past size. Growing makes [old size, size) present as zeros:
// the caller grows only once it knows the file's size, so the grown part is
// local. If a synced map claims data past a shrunk size, a reduced map is made
// durable before the data is cut, so a crash cannot expose the cut as claimed
// data.
func (t *Tier) Truncate(ino uint64, size int64) error {
	if size < 0 {
		return opErr("truncate", ino, unix.EINVAL)
	}
	n, _, err := t.exclusive(ino, false, 0)
	if err != nil {
		return opErr("truncate", ino, err)
	}
	defer n.life.Unlock()
	if err := t.truncate(n, size); err != nil {
		return opErr("truncate", ino, err)
	}
	return nil
}

// truncate requires n.life held exclusively.
func (t *Tier) truncate(n *inode, size int64) error {
	n.mu.Lock()
	old := n.size
	onDisk := n.onDisk.clone()
	n.mu.Unlock()
	if size == old {
		return nil
	}
	f, err := t.file(n)
	if err != nil {
		return err
	}
	if size < old {
		if onDisk.last() > size {
			onDisk.remove(size, 1<<63-1-size)
			if err := t.writeMap(n.ino, size, onDisk, mapDurable); err != nil {
				return err
			}
			n.mu.Lock()
			n.onDisk, n.diskGen = onDisk, 0
			n.mu.Unlock()
		}
		if err := f.Truncate(size); err != nil {
			return err
		}
		n.mu.Lock()
		n.present -= n.ext.remove(size, 1<<63-1-size)
		n.size = size
		n.gen++
		n.cuts++
		n.unsynced = true
		n.mu.Unlock()
		t.markStale(n)
		return nil
	}
	// Grow. Past the old size the data file holds nothing valid; make sure
	// it reads zeros up to the new size.
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > old {
		if err := f.Truncate(old); err != nil {
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	n.mu.Lock()
	n.markLocked(old, size-old, false)
	n.mu.Unlock()
	t.markStale(n)
	return nil
}

// Remove deletes ino's data file and map. Removing an inode without state is
// not an error. The map goes first, durably, so a crash never leaves a map
// claiming data whose file is gone or replaced.
func (t *Tier) Remove(ino uint64) error {
	n, _, err := t.exclusive(ino, false, 0)
	if errors.Is(err, ErrNoState) {
		return nil
	}
	if err != nil {
		return opErr("remove", ino, err)
	}
	defer n.life.Unlock()
	if err := t.remove(n); err != nil {
		return opErr("remove", ino, err)
	}
	return nil
}

// remove deletes n's files and forgets it. Requires n.life held exclusively.
func (t *Tier) remove(n *inode) error {
	if err := t.dropMap(n); err != nil {
		return err
	}
	closeFile(n)
	if err := os.Remove(t.dataPath(n.ino)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	t.forget(n)
	t.usage.Add(-n.alloc.Swap(0))
	return nil
}

// Sync makes ino's data and present ranges durable: fsync the data file, then
// durably replace the map (write a temporary file, fsync, rename, fsync the
// directory). Syncing an inode without state, or without changes since the
// last Sync, does nothing.
func (t *Tier) Sync(ino uint64) error {
	n, err := t.shared(ino)
	if errors.Is(err, ErrNoState) {
		return nil
	}
	if err != nil {
		return opErr("sync", ino, err)
	}
	defer n.life.RUnlock()
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	return t.syncLocked(n)
}

// syncLocked requires n.life held (either way) and n.syncMu.
func (t *Tier) syncLocked(n *inode) error {
	// Snapshot before the fsync: every write that marked a range before
	// this point has finished its pwrite, so the fsync covers it. Writes
	// after the snapshot set unsynced again.
	n.mu.Lock()
	if !n.unsynced {
		n.mu.Unlock()
		return nil
	}
	n.unsynced = false
	gen, size, snap := n.gen, n.size, n.ext.clone()
	needMap := gen != n.diskGen
	n.mu.Unlock()

	fail := func(err error) error {
		n.mu.Lock()
		n.unsynced = true
		n.mu.Unlock()
		return opErr("sync", n.ino, err)
	}
	f, err := t.file(n)
	if err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if !needMap {
		n.mu.Lock()
		n.syncs++
		n.mu.Unlock()
		return nil
	}
	if err := t.writeMap(n.ino, size, snap, mapDurable); err != nil {
		return fail(err)
	}
	n.mu.Lock()
	n.onDisk, n.diskGen, n.mapOnDisk = snap, gen, true
	n.syncs++
	n.mu.Unlock()
	return nil
}
