package vfs

import (
	"context"
	"sync"
	"syscall"

	"bucketfs/internal/meta"
)

// maxWrite bounds the bytes one transaction writes; a larger write is
// several, as the kernel splits a large write(2) into requests anyway.
const maxWrite = meta.WritePiece

// Write writes p at off (at the end of file for O_APPEND handles) as a
// writer with CAP_FSETID, which leaves set-id bits alone (setid.go; see
// WriteClearingSetID for anyone else). Each piece of at most maxWrite
// bytes lands in the tier in the same transaction as its record in the
// namespace.
//
// A write that begins a new write(2) (anything but the next piece of one
// this handle left unfinished) waits while a flush holds the file's writes
// (HoldWrites).
func (h *Handle) Write(ctx context.Context, p []byte, off int64) (int, error) {
	return h.write(ctx, p, off, false, nil)
}

// WriteContinued is Write for a piece of a larger request that the caller
// goes on with right after (an NFS COPY): the file's write stays
// unfinished (meta.Inode.UnfinishedWrite) until a Write ends it or the
// handle is synced or closed.
func (h *Handle) WriteContinued(ctx context.Context, p []byte, off int64) (int, error) {
	return h.write(ctx, p, off, true, nil)
}

// write is Write; more says the caller has more of this request to come,
// and fn, if set, is applied to the inode in the transaction of the first
// piece.
func (h *Handle) write(ctx context.Context, p []byte, off int64, more bool, fn func(in *meta.Inode)) (int, error) {
	if err := h.fs.writable(); err != nil {
		return 0, err
	}
	if !h.writable {
		return 0, syscall.EBADF
	}
	appending := h.flags&syscall.O_APPEND != 0
	if off < 0 && !appending {
		return 0, syscall.EINVAL
	}
	if len(p) == 0 {
		// Writes nothing, and neither ends nor continues a write in
		// pieces (endPieces).
		return 0, nil
	}
	fs := h.fs
	fs.used.Touch(uint64(h.ino))
	if err := fs.diskSpace(); err != nil {
		return 0, err
	}
	if err := fs.holds.wait(ctx, h.ino, func() bool { return !h.continues(off, appending) }); err != nil {
		return 0, err
	}
	done := 0
	var last meta.Inode
	var first meta.Piece
	pieces := 0
	for done < len(p) {
		n := min(len(p)-done, maxWrite)
		piece, err := fs.meta.WritePiece(ctx, h.ino, h.chain, p[done:done+n], off+int64(done), appending,
			more || done+n < len(p), fs.now(), fs.cfg.TierLimits, fn)
		if err != nil {
			if done > 0 {
				// A short write; the next one meets the error. This
				// one has returned all the same.
				if err := h.endWrite(ctx); err != nil {
					fs.log.Warn("end a short write", "ino", h.ino, "err", err)
				}
				return done, nil
			}
			return 0, err
		}
		if pieces == 0 {
			first = piece
		}
		pieces++
		last, fn = piece.Inode, nil
		done += n
		fs.counters.written.Add(int64(n))
	}
	if err := h.endPieces(ctx, last.Size, off, done, appending, more, first, pieces); err != nil {
		return 0, err
	}
	return done, nil
}

// continues tells whether a write at off is the next piece of a write this
// handle left unfinished.
func (h *Handle) continues(off int64, appending bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pieceEnd >= 0 && (appending || h.pieceEnd == off)
}

// endPieces keeps a write(2) that came in several pieces whole across a
// crash once it has returned. Each piece is its own transaction, committed
// without a sync, so a crash soon after the write returned could keep its
// first pieces and lose the last ones: a state the writer never saw
// returned. A write of one piece needs nothing, as a crash keeps it whole
// or not at all. Nor does a write that began with a piece the kernel
// sends alone (the rest of the page it starts inside) at the end of the
// file, when its second piece ended it and nothing was committed between
// the two (meta's unfinished.go): a crash that keeps the first piece only
// is undone at the next start. Any other write that ends here after
// several pieces (one that follows a piece with more to come and has none
// itself, or a call that wrote several pieces) syncs the store before it
// returns, which makes every piece durable at once.
// size is the file's size after the write, for an appending handle whose
// offset the store chose; more says the caller has more of this write to
// come; first is what the store said of this call's first piece, of the
// call's pieces in all.
func (h *Handle) endPieces(ctx context.Context, size, off int64, n int, appending, more bool, first meta.Piece, pieces int) error {
	if appending {
		off = size - int64(n)
	}
	end := off + int64(n)
	lastOff := off + int64((n-1)/maxWrite*maxWrite)
	h.mu.Lock()
	// An appending handle's write continues its last one wherever the
	// store put it (continues): another writer's bytes may have come
	// between.
	followed := h.pieceEnd == off || appending && h.pieceEnd >= 0
	// A head and the one piece after it, nothing committed between:
	// the write is whole in the store, or undone after a crash.
	chained := followed && h.pieceChained && first.Chained && pieces == 1
	if more || meta.Continues(lastOff, end-lastOff) {
		h.pieceEnd = end
		h.pieceChained = !followed && first.Head && pieces == 1
	} else {
		h.pieceEnd = -1
	}
	open := h.pieceEnd >= 0
	h.mu.Unlock()
	// A write held for a flush may continue this one now (the requests
	// of one write may come out of order: NFS, mmap writeback).
	h.fs.holds.moved()
	if open || !followed && n <= maxWrite || chained {
		return nil
	}
	return h.fs.meta.Sync(ctx)
}

// Fsync makes the file's data and metadata durable: one sync of the store
// that holds both. A write this handle left looking unfinished has
// returned (endWrite).
func (h *Handle) Fsync(ctx context.Context) error {
	if err := h.fs.meta.Sync(ctx); err != nil {
		return err
	}
	return h.endWrite(ctx)
}

// Closed is called when a descriptor of the handle is closed (FUSE's
// FLUSH, sent by close(2) before it returns): a write(2) through it has
// returned, so one this handle left looking unfinished has ended.
func (h *Handle) Closed(ctx context.Context) error {
	return h.endWrite(ctx)
}

// endWrite records that the last piece written through this handle, which
// looked like one with more of its write(2) to come, ended that write
// after all (meta.EndWrite): the writer closed or synced the file, which
// it can only do once the write(2) returned. A flush waiting for the rest
// of that write exports at once.
func (h *Handle) endWrite(ctx context.Context) error {
	h.mu.Lock()
	open := h.pieceEnd >= 0
	h.pieceEnd = -1
	h.mu.Unlock()
	if !open {
		return nil
	}
	return h.fs.meta.EndWrite(ctx, h.ino)
}

// writeHolds are the files whose new writes wait for a flush
// (HoldWrites). The zero value holds nothing.
type writeHolds struct {
	mu   sync.Mutex
	held map[Ino]*writeHold
	// pieces is closed (and replaced) when a write ended while some file
	// was held: a held write may continue it now.
	pieces chan struct{}
}

type writeHold struct {
	holders  int
	waiting  int           // writes waiting for the release
	released chan struct{} // closed when the last holder releases
}

// HoldWrites makes writes to ino that begin a new write(2) wait until
// release is called; the pieces that continue a write(2) under way (the
// next piece through the handle where its last piece ended) go on, so
// that it can finish. The exporter's flush holds a file's writes while
// it waits for a write(2) in pieces to end, so that a writer that keeps
// writing cannot keep the flush from finding the file between two
// write(2)s (sync.ExporterConfig.HoldWrites). Holds nest; release may be
// called more than once.
func (fs *FS) HoldWrites(ino Ino) (release func()) {
	w := &fs.holds
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		w.held = map[Ino]*writeHold{}
	}
	hold := w.held[ino]
	if hold == nil {
		hold = &writeHold{released: make(chan struct{})}
		w.held[ino] = hold
	}
	hold.holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if hold.holders--; hold.holders == 0 {
				delete(w.held, ino)
				close(hold.released)
			}
		})
	}
}

// WritesHeld reports whether a flush holds ino's new writes, and how many
// writes wait for it.
func (fs *FS) WritesHeld(ino Ino) (held bool, waiting int) {
	fs.holds.mu.Lock()
	defer fs.holds.mu.Unlock()
	if hold := fs.holds.held[ino]; hold != nil {
		return true, hold.waiting
	}
	return false, 0
}

// wait returns once no flush holds ino's writes, or ctx is done, or
// begins is false: the write turned out to continue one under way (a
// request of it that came first was written meanwhile).
func (w *writeHolds) wait(ctx context.Context, ino Ino, begins func() bool) error {
	for {
		w.mu.Lock()
		hold := w.held[ino]
		if hold != nil && w.pieces == nil {
			w.pieces = make(chan struct{})
		}
		pieces := w.pieces
		w.mu.Unlock()
		if hold == nil || !begins() {
			return nil
		}
		if err := w.await(ctx, hold, pieces); err != nil {
			return err
		}
	}
}

// await waits for hold's release, or a write that ended (pieces), or the
// end of ctx, counted among hold's waiting writes meanwhile.
func (w *writeHolds) await(ctx context.Context, hold *writeHold, pieces chan struct{}) error {
	w.mu.Lock()
	hold.waiting++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		hold.waiting--
		w.mu.Unlock()
	}()
	select {
	case <-hold.released:
	case <-pieces:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// moved wakes the held writes to look again whether they continue a
// write under way.
func (w *writeHolds) moved() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pieces != nil {
		close(w.pieces)
		w.pieces = nil
	}
}
