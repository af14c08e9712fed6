package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/tier"
)

// File data lives in the tier's blocks, in this store, beside the inode
// (package tier explains the model). Every change of a file's bytes is one
// transaction with the change of its size, generation and export queue
// entry, so that after any crash the store holds a state the file really
// had: its bytes and the record of them never disagree, and nothing
// durable is destroyed before the change that drops it is durable.

// Usage is how many bytes of file data the tier holds: in all, and in
// unexported blocks, those with file-side changes not yet exported (which
// eviction cannot touch; see tier.Stamp). Invariant: it is the sum over
// the inodes of Cached and Unexported; putInode and Forget keep it so, in
// the transaction of the change (kept in cells, see counters.go).
type Usage struct {
	Total, Dirty int64
}

// usageOf is what one inode adds to Usage.
func usageOf(in *Inode) Usage {
	if !in.IsRegular() {
		return Usage{}
	}
	return Usage{Total: in.Cached, Dirty: in.Unexported}
}

// account adds to Usage what in changes against its stored record.
func (s *Store) account(tx kv.Txn, in *Inode) error {
	var old Inode
	v, err := tx.Get(inodeKey(in.Ino))
	switch {
	case err == nil:
		if old, err = decodeInode(in.Ino, v); err != nil {
			return err
		}
	case !errors.Is(err, kv.ErrNotFound):
		return err
	}
	before, after := usageOf(&old), usageOf(in)
	return s.addUsage(tx, in.Ino, Usage{Total: after.Total - before.Total, Dirty: after.Dirty - before.Dirty})
}

// Usage returns what the tier holds.
func (s *Store) Usage(ctx context.Context) (u Usage, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		u, err = getUsage(r)
		return err
	})
	return u, err
}

// Limits bound what writes and fills may add to the tier; 0 means no bound.
// A write or fill is checked against the Usage committed when it starts,
// read outside its transaction: reading the counter's cells inside it
// would make every two writes of the file system conflict (counters.go).
// So writes and fills that run at the same time, on this server or on
// others, may together take the tier past a bound by what they add (at
// most a WritePiece each for writes); the next ones are refused then.
type Limits struct {
	// Dirty bounds the bytes of unexported blocks (Usage.Dirty): a write
	// that would take them past it fails with ENOSPC, since only an
	// export can free them. A write counts what it makes unexported,
	// block by block: the clean cached bytes of the file it changes do
	// not count, as eviction may drop them.
	Dirty int64
	// Total bounds all cached bytes: a fill past it is refused (ENOSPC), and
	// the read streams from the bucket instead.
	Total int64
}

// WritePiece is the largest write request the front ends pass to
// WriteData: FUSE's max_write, the NFS server's wsize and the vfs's own
// split are all this size. The kernel hands a larger write(2) over as
// pieces of it, page-aligned, each its own transaction.
const WritePiece = 1 << 20

// PieceGrace is the time added to the quiet period of a file whose last
// write looks like a piece that more of the same write(2) will follow, see
// Continues. The rule it keeps: the bucket receives states a write(2)
// left, not the states between its pieces, unless the writer stalls
// mid-write(2) for longer than the export delay plus PieceGrace. A flush
// waits for the rest of such a write at most PieceGrace too
// (Inode.UnfinishedWrite, sync.ExporterConfig.PieceWait).
const PieceGrace = 5 * time.Second

// Continues tells whether a write of [off, off+n) looks like a piece of a
// larger write(2) that more pieces will follow. The kernel splits a
// write(2) into requests of a WritePiece of pages, and sends the part of
// a first page it does not hold whole in its cache (a write that starts
// inside a page, as most appends do) as a request of its own: so a piece
// that ends on a page boundary and either covers a whole WritePiece of
// pages or lies inside one page, starting past its beginning, may have
// more to come. The last piece of a write(2) usually does not; a write(2)
// that itself looks so only delays its export by PieceGrace, and has the
// store synced if the next write continues it (see vfs).
func Continues(off, n int64) bool {
	const page = tier.BlockSize
	end := off + n
	return head(off, n) || n > 0 && end%page == 0 && end-off/page*page == WritePiece
}

// WriteData writes p at off (at the end of the file when appending) and
// records the change, in one transaction. now is the new mtime and ctime.
// fn, if set, changes other fields in the same transaction (the mode: a
// write may clear set-id bits, see vfs). It returns the inode as written.
// Whether more of the same write is to come is guessed from where the
// piece lies (Continues).
func (s *Store) WriteData(ctx context.Context, ino Ino, p []byte, off int64, appending bool, now int64, lim Limits, fn func(in *Inode)) (in Inode, err error) {
	w, err := s.WritePiece(ctx, ino, 0, p, off, appending, false, now, lim, fn)
	return w.Inode, err
}

// WriteDataMore is WriteData for a piece that its caller knows more of the
// same request will follow: the vfs's own split of a large write, the
// pieces of an NFS COPY.
func (s *Store) WriteDataMore(ctx context.Context, ino Ino, p []byte, off int64, appending bool, now int64, lim Limits, fn func(in *Inode)) (in Inode, err error) {
	w, err := s.WritePiece(ctx, ino, 0, p, off, appending, true, now, lim, fn)
	return w.Inode, err
}

// WritePiece is WriteData, or WriteDataMore when more is set, and tells
// whether the piece joined an unfinished write's chain of pieces that a
// crash keeps whole or undoes (unfinished.go). chain names the writer's
// chains (a vfs handle; 0: none, the piece joins or starts none).
func (s *Store) WritePiece(ctx context.Context, ino Ino, chain uint64, p []byte, off int64, appending, more bool, now int64, lim Limits, fn func(in *Inode)) (piece Piece, err error) {
	used, err := s.usageFor(ctx, lim)
	if err != nil {
		return Piece{}, fmt.Errorf("write inode %d at %d: %w", ino, off, err)
	}
	// Room for the blocks with their keys and record headers, and the inode.
	size := len(p) + (len(p)/tier.BlockSize+2)*64 + 1024
	var kept keptFile
	var in Inode
	err = s.kv.UpdateSized(ctx, size, func(tx kv.Txn) error {
		kept = keptFile{}
		// The inode and its place in the export queue, which
		// markChangedUntil reads, in one round trip on PostgreSQL.
		if err := tx.Prefetch(inodeKey(ino), queueKey(ino)); err != nil {
			return err
		}
		if in, err = s.regularFile(tx, ino); err != nil {
			return err
		}
		before := in
		if appending {
			off = in.Size
		}
		delta, err := tier.Write(tx, uint64(ino), p, off, in.Size, in.stamp())
		if err != nil {
			return err
		}
		if err := checkDirty(&in, delta, lim, used, "write"); err != nil {
			return err
		}
		in.hold(delta)
		in.Size = max(in.Size, off+int64(len(p)))
		in.Mtime, in.Ctime = now, now
		if fn != nil {
			fn(&in)
		}
		at := s.now()
		due := at.Add(s.exportDelay)
		in.UnfinishedWrite = 0
		continues := more || Continues(off, int64(len(p)))
		if continues {
			// Most likely a piece of a larger write(2) that the kernel
			// is still handing over: the quiet period gets PieceGrace
			// more, so that a stall of the writer between two pieces
			// does not export the state between them, and a flush waits
			// for the rest (UnfinishedWrite). The last piece brings the
			// export back to the usual delay.
			due = due.Add(PieceGrace)
			in.UnfinishedWrite = at.UnixNano()
		}
		if err := s.markChangedUntil(tx, &in, DataChange, due, &kept); err != nil {
			return err
		}
		piece, err = s.markPiece(tx, chain, &before, &in, off, int64(len(p)), continues)
		return err
	})
	if err != nil {
		return Piece{}, fmt.Errorf("write inode %d at %d: %w", ino, off, err)
	}
	s.reportKept(kept)
	piece.Inode = in
	return piece, nil
}

// usageFor reads Usage for the checks of lim, if it bounds anything.
func (s *Store) usageFor(ctx context.Context, lim Limits) (Usage, error) {
	if lim.Dirty <= 0 && lim.Total <= 0 {
		return Usage{}, nil
	}
	return s.Usage(ctx)
}

// checkDirty refuses (ENOSPC) an edit of in that adds delta to the tier
// when that takes the unexported bytes past lim.Dirty, u being the usage
// before; the caller's transaction then stores nothing of it. An edit that
// makes nothing more unexported is never refused.
func checkDirty(in *Inode, delta tier.Bytes, lim Limits, u Usage, what string) error {
	grow := delta.Dirty
	if in.Has(unstamped) {
		grow = delta.Cached // all its bytes count (Inode.hold)
	}
	if lim.Dirty <= 0 || grow <= 0 {
		return nil
	}
	if u.Dirty+grow > lim.Dirty {
		return fmt.Errorf("this %s would take the tier's unexported data to %d bytes, past its capacity of %d: %w",
			what, u.Dirty+grow, lim.Dirty, syscall.ENOSPC)
	}
	return nil
}

// EndWrite records that the file's writes are finished (UnfinishedWrite
// 0): the handle that wrote a piece announcing more was closed or synced,
// so that write(2) has returned. Nothing else of the inode changes, and
// an inode that is gone is no error.
func (s *Store) EndWrite(ctx context.Context, ino Ino) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if errors.Is(err, syscall.ENOENT) || err == nil && in.UnfinishedWrite == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		in.UnfinishedWrite = 0
		return s.putInode(tx, &in)
	})
	if err != nil {
		return fmt.Errorf("end the write to inode %d: %w", ino, err)
	}
	return nil
}

// regularFile loads ino, which must be a regular file.
func (s *Store) regularFile(r kv.Reader, ino Ino) (Inode, error) {
	in, err := s.getInode(r, ino)
	if err != nil {
		return Inode{}, err
	}
	switch {
	case in.IsDir():
		return Inode{}, syscall.EISDIR
	case !in.IsRegular():
		return Inode{}, syscall.EINVAL
	}
	return in, nil
}

// ReadData reads the file at off into p as it is now: n is what lies
// before the end of the file, and missing lists the ranges of p[:n] (in
// file offsets) that are the base object's bytes, which the tier does not
// hold: the caller reads them from in.Base. Everything else of p[:n] is
// filled in.
func (s *Store) ReadData(ctx context.Context, ino Ino, p []byte, off int64) (in Inode, n int, missing []tier.Range, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		if in, err = s.regularFile(r, ino); err != nil {
			return err
		}
		if off >= in.Size {
			n = 0
			return nil
		}
		n = int(min(int64(len(p)), in.Size-off))
		missing, err = tier.Read(r, uint64(ino), p[:n], off, in.Backed)
		return err
	})
	if err != nil {
		return Inode{}, 0, nil, fmt.Errorf("read inode %d at %d: %w", ino, off, err)
	}
	return in, n, missing, nil
}

// MissingData lists the ranges of [off, off+n) of the file that are its
// base object's bytes the tier does not hold.
func (s *Store) MissingData(ctx context.Context, ino Ino, off, n int64) (missing []tier.Range, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		in, err := s.regularFile(r, ino)
		if err != nil {
			return err
		}
		missing, err = tier.Missing(r, uint64(ino), off, min(n, in.Size-off), in.Backed)
		return err
	})
	return missing, err
}

// FillData stores bytes of base (p at off) fetched from the bucket into
// the tier, where the file still shows base's bytes. If base is no longer
// the file's base object (an import replaced it), nothing is stored and the
// error wraps tier.ErrStale: the identity of a version is its key, version
// id and ETag.
func (s *Store) FillData(ctx context.Context, ino Ino, base Object, p []byte, off int64, lim Limits) error {
	used, err := s.usageFor(ctx, lim)
	if err != nil {
		return fmt.Errorf("fill inode %d at %d: %w", ino, off, err)
	}
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.regularFile(tx, ino)
		if err != nil {
			return err
		}
		if in.Base.Key != base.Key || in.Base.VersionID != base.VersionID || in.Base.ETag != base.ETag {
			return tier.ErrStale
		}
		if lim.Total > 0 && used.Total+int64(len(p)) > lim.Total {
			return fmt.Errorf("the tier is full: %w", syscall.ENOSPC)
		}
		delta, err := tier.Fill(tx, uint64(ino), p, off, in.Backed, in.stamp())
		if err != nil || delta == (tier.Bytes{}) {
			return err
		}
		// Bytes filled into a block with local changes count as
		// unexported, as the block does.
		if err := checkDirty(&in, delta, lim, used, "fill"); err != nil {
			return err
		}
		in.hold(delta)
		return s.putInode(tx, &in)
	})
	if err != nil {
		return fmt.Errorf("fill inode %d at %d: %w", ino, off, err)
	}
	return nil
}

// ResizeData sets the size of a regular file: bytes past a smaller size are
// dropped, and a larger size reads zeros past the old end. fn, if set,
// changes other fields in the same transaction (times, mode). With growOnly
// a size not larger than the current one changes nothing.
func (s *Store) ResizeData(ctx context.Context, ino Ino, size int64, growOnly bool, fn func(in *Inode)) (in Inode, err error) {
	if size < 0 {
		return Inode{}, syscall.EINVAL
	}
	var kept keptFile
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		kept = keptFile{}
		if in, err = s.regularFile(tx, ino); err != nil {
			return err
		}
		if growOnly && size <= in.Size {
			return nil
		}
		if size < in.Size {
			delta, err := cutData(tx, &in, size)
			if err != nil {
				return err
			}
			in.hold(delta)
		}
		in.Size = size
		if fn != nil {
			fn(&in)
		}
		return s.markChanged(tx, &in, DataChange, s.now(), &kept)
	})
	if err != nil {
		return Inode{}, fmt.Errorf("resize inode %d to %d: %w", ino, size, err)
	}
	s.reportKept(kept)
	return in, nil
}

// cutData drops the file's bytes at or past size, lowering Backed to it,
// and returns what that frees; the caller holds the delta and sets Size.
func cutData(tx kv.Txn, in *Inode, size int64) (tier.Bytes, error) {
	delta, err := tier.Cut(tx, uint64(in.Ino), size, in.held(), in.stamp())
	if err != nil {
		return tier.Bytes{}, err
	}
	in.Backed = min(in.Backed, size)
	return delta, nil
}

// PunchData makes [off, off+n) of the file read as zeros, without changing
// its size; now is the new mtime and ctime.
func (s *Store) PunchData(ctx context.Context, ino Ino, off, n, now int64) error {
	var kept keptFile
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		kept = keptFile{}
		in, err := s.regularFile(tx, ino)
		if err != nil {
			return err
		}
		n := min(n, in.Size-off)
		if n <= 0 {
			return nil
		}
		delta, err := tier.Punch(tx, uint64(ino), off, n, in.Backed, in.stamp())
		if err != nil {
			return err
		}
		in.hold(delta)
		in.Mtime, in.Ctime = now, now
		return s.markChanged(tx, &in, DataChange, s.now(), &kept)
	})
	if err != nil {
		return fmt.Errorf("punch inode %d [%d,+%d): %w", ino, off, n, err)
	}
	s.reportKept(kept)
	return nil
}

// Seek implements lseek's SEEK_DATA (data set) and SEEK_HOLE: ranges the
// base object provides count as data.
func (s *Store) Seek(ctx context.Context, ino Ino, off int64, data bool) (pos int64, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		in, err := s.regularFile(r, ino)
		if err != nil {
			return err
		}
		if data {
			pos, err = tier.SeekData(r, uint64(ino), off, in.Size, in.Backed)
		} else {
			pos, err = tier.SeekHole(r, uint64(ino), off, in.Size, in.Backed)
		}
		return err
	})
	return pos, err
}

// EvictData drops the tier's copy of the bytes of a file that the bucket
// holds (its base object), and returns how many bytes it freed: of a
// clean file every block, of a file with unexported changes the blocks
// without any (see tier.Stamp), whose bytes reads then take from the base
// object. Anything else (unlinked, without a base of its own, blocks only
// the tier holds) is left alone.
func (s *Store) EvictData(ctx context.Context, ino Ino) (freed int64, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		freed = 0
		in, err := s.getInode(tx, ino)
		if err != nil {
			return err
		}
		switch {
		case evictable(&in):
			if err := tier.Drop(tx, uint64(ino)); err != nil {
				return err
			}
			freed = in.Cached
			in.dropHeld()
		case partlyEvictable(&in):
			delta, err := tier.DropExported(tx, uint64(ino), in.Backed, in.stamp())
			if err != nil {
				return err
			}
			freed = -delta.Cached
			in.hold(delta)
		default:
			return nil
		}
		return s.putInode(tx, &in)
	})
	return freed, err
}

// evictable tells whether every byte the tier holds of in may be dropped:
// a clean file whose every byte its base object holds.
func evictable(in *Inode) bool {
	return in.IsRegular() && in.Cached > 0 && !in.Dirty() && in.Nlink > 0 &&
		in.Base.Key != "" && in.Backed >= in.Size && len(in.Keys) > 0
}

// partlyEvictable tells whether the tier holds blocks of a dirty file that
// hold only its base object's bytes, and the base is still the file's own:
// an object of its names as last synced (a conflict that moves the file
// to lost+found drops that record in the same transaction), so that the
// bucket keeps it for the file while its changes wait for export.
func partlyEvictable(in *Inode) bool {
	return in.IsRegular() && in.Dirty() && !in.Has(unstamped) && in.Cached > in.Unexported && in.Nlink > 0 &&
		in.Base.Key != "" && slices.Contains(in.Keys, in.Base)
}

// ReclaimData drops the data of a file with no name left: nothing can open
// it again, and the exporter needs none of it to delete its objects.
func (s *Store) ReclaimData(ctx context.Context, ino Ino) error {
	if err := s.dropBlocksFirst(ctx, ino); err != nil {
		return err
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil || in.Nlink != 0 || in.Cached == 0 {
			return err
		}
		if err := tier.Drop(tx, uint64(ino)); err != nil {
			return err
		}
		in.dropHeld()
		return s.putInode(tx, &in)
	})
}

// dropBatch bounds the blocks one transaction of dropBlocksFirst deletes
// (4 MiB of data).
var dropBatch = 1024

// dropBlocksFirst deletes the blocks of ino, a regular file with no name
// left (whose data nothing reads any more: its last close, or its
// forgetting), dropBatch at a time, each batch one transaction that keeps
// Cached and Unexported (and so the tier's usage counters) true at its
// commit; the last batch leaves the file holding nothing. Dropped in one
// transaction, a file of 256 MiB was one delete of 65,536 rows, which on
// PostgreSQL under load ran past the operation timeout, so its space was
// never freed.
func (s *Store) dropBlocksFirst(ctx context.Context, ino Ino) error {
	for {
		more := false
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			more = false
			in, err := s.getInode(tx, ino)
			if errors.Is(err, syscall.ENOENT) {
				return nil
			}
			if err != nil || in.Nlink != 0 || !in.IsRegular() || in.Cached == 0 {
				return err
			}
			d, m, err := tier.DropSome(tx, uint64(ino), in.stamp(), dropBatch)
			if err != nil {
				return err
			}
			if more = m; m {
				in.hold(d)
			} else {
				in.dropHeld() // that was the last batch: no block is left
			}
			return s.putInode(tx, &in)
		})
		if err != nil || !more {
			return err
		}
	}
}

// Cached is one file the tier holds bytes of that eviction may drop, and
// how many.
type Cached struct {
	Ino   Ino
	Bytes int64
}

// Evictable lists the files of which EvictData would drop bytes now. It
// reads every inode: call it only when the tier is over its capacity.
func (s *Store) Evictable(ctx context.Context) (out []Cached, err error) {
	prefix := []byte{pInode}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		var bad error
		err := r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			in, err := decodeInode(Ino(kv.Uint64(k[1:])), v)
			if err != nil {
				bad = err
				return false
			}
			switch {
			case evictable(&in):
				out = append(out, Cached{Ino: in.Ino, Bytes: in.Cached})
			case partlyEvictable(&in):
				out = append(out, Cached{Ino: in.Ino, Bytes: in.Cached - in.Unexported})
			}
			return true
		})
		if err == nil {
			err = bad
		}
		return err
	})
	return out, err
}

// Snapshot is the namespace and the file data at one instant, for the
// exporter: what it uploads of a file (bytes, size, generation, attributes)
// is one state the file had. It may be used from several goroutines.
type Snapshot struct {
	s    *Store
	snap kv.Snapshot
}

// Snapshot pins the current committed state. Close it when done.
func (s *Store) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap, err := s.kv.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return &Snapshot{s: s, snap: snap}, nil
}

// Close releases the snapshot.
func (sn *Snapshot) Close() error { return sn.snap.Close() }

// Get returns inode ino as it was.
func (sn *Snapshot) Get(ino Ino) (Inode, error) { return sn.s.getInode(sn.snap, ino) }

// Paths is Store.Paths as it was.
func (sn *Snapshot) Paths(ino Ino) (paths []string, underLostFound []bool, err error) {
	return sn.s.paths(sn.snap, ino)
}

// ReadData reads in's bytes at off into p as they were (in must come from
// this snapshot); missing lists the ranges that are in.Base's bytes, which
// it leaves zero.
func (sn *Snapshot) ReadData(in *Inode, p []byte, off int64) (missing []tier.Range, err error) {
	return tier.Read(sn.snap, uint64(in.Ino), p, off, in.Backed)
}

// QueuedAt returns when ino was due for export in the snapshot (the queue
// token Synced compares), if it was queued.
func (sn *Snapshot) QueuedAt(ino Ino) (due int64, queued bool, err error) {
	return queuedAt(sn.snap, ino)
}

// Missing lists the ranges of [off, off+n) of in that are in.Base's bytes.
func (sn *Snapshot) Missing(in *Inode, off, n int64) ([]tier.Range, error) {
	return tier.Missing(sn.snap, uint64(in.Ino), off, n, in.Backed)
}
