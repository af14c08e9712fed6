package tier

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Checkpoint makes what every inode holds now durable, as Sync does for
// one, but for all of them at the cost of two syncfs(2) calls instead of
// four fsyncs per file: the engine runs it every few seconds, so that a
// crash of the process or of the machine loses at most the writes since
// the last checkpoint, not everything not yet fsynced or exported.
//
// It snapshots each changed inode's present ranges, flushes the tier's file
// system (the data of the snapshots is then durable), writes the maps
// without an fsync each, and flushes again. A map claims only ranges that
// were present at the snapshot and still are; an inode whose content was
// replaced or cut meanwhile (Reset, Create, Truncate down, Punch) is left
// for the next checkpoint, since its durable bytes may be ones it dropped.
// An overwrite after the snapshot may, after a machine crash, read as the
// bytes before it, as on a local file system without fsync.
func (t *Tier) Checkpoint() (synced, skipped int, err error) {
	snaps, left := t.snapshotUnsynced()
	if len(snaps) == 0 {
		return 0, left, nil
	}
	if t.afterSnapshot != nil {
		t.afterSnapshot()
	}
	dir, err := os.Open(t.dir)
	if err != nil {
		return 0, len(snaps) + left, fmt.Errorf("tier: checkpoint: %w", err)
	}
	defer dir.Close()
	if err := unix.Syncfs(int(dir.Fd())); err != nil {
		return 0, len(snaps) + left, fmt.Errorf("tier: checkpoint: syncfs: %w", err)
	}
	var done []checkpointSnap
	var errs []error
	for _, sn := range snaps {
		ok, err := t.writeCheckpointMap(sn)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done = append(done, sn)
		}
	}
	if err := unix.Syncfs(int(dir.Fd())); err != nil {
		return 0, len(snaps) + left, errors.Join(append(errs, fmt.Errorf("tier: checkpoint: syncfs: %w", err))...)
	}
	for _, sn := range done {
		// Only now is the map durable. A Sync since wrote a newer one.
		n := sn.n
		n.mu.Lock()
		if n.syncs == sn.syncs && n.gen == sn.gen {
			n.diskGen = sn.gen
			n.unsynced = false
		}
		n.mu.Unlock()
	}
	return len(done), len(snaps) - len(done) + left, errors.Join(errs...)
}

// checkpointSnap is one inode's state at a checkpoint's snapshot.
type checkpointSnap struct {
	n                  *inode
	gen                uint64
	epoch, cuts, syncs uint32
	size               int64
	ext                extents
}

// checkpointMax bounds the inodes one checkpoint takes on, and so its
// memory and its time; after a burst of creates the rest wait for the next.
const checkpointMax = 16384

// snapshotUnsynced records the state of the inodes changed since their last
// sync, up to checkpointMax. Empty ones with no map are left out: a crash
// loses nothing of them. It holds each inode's fill lock exclusively while
// it looks, so no write or punch is half done.
func (t *Tier) snapshotUnsynced() (out []checkpointSnap, left int) {
	first := int(t.checkpoints.Add(1)) // rotate, so no shard waits forever
	for i := range t.shards {
		sh := &t.shards[(first+i)%len(t.shards)]
		sh.mu.Lock()
		nodes := make([]*inode, 0, len(sh.m))
		for _, n := range sh.m {
			nodes = append(nodes, n)
		}
		sh.mu.Unlock()
		for _, n := range nodes {
			n.fill.Lock()
			n.mu.Lock()
			switch {
			case !n.unsynced || n.size == 0 && !n.mapOnDisk:
			case len(out) >= checkpointMax:
				left++
			default:
				out = append(out, checkpointSnap{n: n, gen: n.gen, epoch: n.epoch, cuts: n.cuts, syncs: n.syncs,
					size: n.size, ext: n.ext.clone()})
			}
			n.mu.Unlock()
			n.fill.Unlock()
		}
	}
	return out, left
}

// writeCheckpointMap writes sn's map, claiming what sn saw present that
// still is, unless the inode's content was replaced or cut since, or a Sync
// made a newer state durable (ok false). The map replaces an existing one
// only once its own bytes are durable (on file systems that do not flush a
// file renamed over another, a crash could otherwise leave an empty map,
// and with it no claim on data fsynced long ago); the checkpoint's second
// syncfs makes the rest durable. Until then the inode does not count as
// synced (diskGen 0), so a Sync meanwhile writes a durable map itself.
func (t *Tier) writeCheckpointMap(sn checkpointSnap) (ok bool, err error) {
	n := sn.n
	n.life.RLock()
	defer n.life.RUnlock()
	if n.dead {
		return false, nil
	}
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	n.fill.Lock()
	n.mu.Lock()
	if n.epoch != sn.epoch || n.cuts != sn.cuts || n.syncs != sn.syncs || n.size < sn.size {
		n.mu.Unlock()
		n.fill.Unlock()
		return false, nil
	}
	claim := sn.ext.clone()
	var gone []Range
	for _, r := range sn.ext {
		gone = n.ext.missing(r.Off, r.Len, gone)
	}
	for _, r := range gone {
		claim.remove(r.Off, r.Len)
	}
	sync := mapNoSync
	if n.mapOnDisk {
		sync = mapFileOnly
	}
	n.mu.Unlock()
	n.fill.Unlock()
	if err := t.writeMap(n.ino, sn.size, claim, sync); err != nil {
		return false, opErr("checkpoint", n.ino, err)
	}
	n.mu.Lock()
	n.onDisk, n.mapOnDisk, n.diskGen = claim, true, 0
	n.mu.Unlock()
	return true, nil
}
