package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"bucketfs/internal/meta"
)

// Flush exports what is queued, ignoring the quiet period, and returns
// once every queued inode has left the queue or been exported from a
// snapshot taken after the call, or an export failed. So what was pending
// when it was called is in the bucket when it returns, with what those
// exports queued in turn (the children of a renamed directory); a file
// written on without a pause stays queued, and is waited for only until
// an export of it from a snapshot taken after the call has completed
// (the three-server test found `bucketfs flush` waiting until the writer
// stopped). A file in the middle of a write in pieces is exported once
// that write has ended, or once PieceWait has passed (flushRun).
func (e *Exporter) Flush(ctx context.Context) error {
	fr := e.newFlushRun()
	defer fr.end()
	asked := time.Now()
	far := asked.Add(100 * 365 * 24 * time.Hour)
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		failed := e.drainFor(ctx, far, fr)
		n, err := e.pending(ctx, far, asked)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if failed > 0 && i > 3 {
			exports := "exports"
			if failed == 1 {
				exports = "export"
			}
			return fmt.Errorf("flush: %d %s failed, %d still queued", failed, exports, n)
		}
		// What is left is being exported by the background exporter, was
		// queued again by a write meanwhile, or waits for the rest of a
		// write in pieces: give it a moment.
		fr.expire()
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pending counts the queued inodes that still have work for a flush asked
// at asked: those of which no export from a snapshot taken after asked has
// completed. An unlinked file held open whose objects are deleted stays
// queued only to be reclaimed after its last close: Flush does not wait
// for that, unless an export of it is under way (its upload not recorded
// yet).
func (e *Exporter) pending(ctx context.Context, far time.Time, asked time.Time) (n int, err error) {
	queued, err := e.meta.Due(ctx, far, 1<<30)
	if err != nil {
		return 0, err
	}
	for _, q := range queued {
		e.mu.Lock()
		busy, reached := e.busy[q.Ino], e.reached[q.Ino]
		e.mu.Unlock()
		if !busy && reached.After(asked) {
			continue
		}
		in, err := e.meta.Get(ctx, q.Ino)
		if !busy && err == nil && in.Nlink == 0 && len(in.Keys) == 0 && e.cfg.IsOpen(q.Ino) {
			continue
		}
		n++
	}
	return n, nil
}

// FlushInode exports one inode now, ignoring the quiet period, and returns
// once the bucket has it; a conflict comes back as an error. A file in the
// middle of a write in pieces is exported as Flush does.
func (e *Exporter) FlushInode(ctx context.Context, ino meta.Ino) error {
	in, err := e.meta.Get(ctx, ino)
	if err != nil {
		return err
	}
	if in.IsDir() {
		return e.Flush(ctx)
	}
	n, _, err := e.meta.QueueStats(ctx)
	if err != nil || n == 0 {
		return err
	}
	fr := e.newFlushRun()
	defer fr.end()
	for i := 0; i < 100; {
		due, err := e.meta.Due(ctx, time.Now().Add(100*365*24*time.Hour), 1<<30)
		if err != nil {
			return err
		}
		var q *meta.Queued
		for i := range due {
			if due[i].Ino == ino {
				q = &due[i]
			}
		}
		if q == nil {
			return nil
		}
		e.mu.Lock()
		busy := e.busy[ino]
		if !busy {
			e.busy[ino] = true
		}
		e.mu.Unlock()
		if busy {
			i++
			fr.expire()
			time.Sleep(10 * time.Millisecond) // the background exporter has it; wait for it
			continue
		}
		err = e.fencedOut(ctx, e.reconcileFor(ctx, *q, fr))
		e.mu.Lock()
		delete(e.busy, ino)
		e.mu.Unlock()
		var ce *conflictError
		if errors.As(err, &ce) && !errors.Is(err, meta.ErrFenced) {
			e.refused(ce)
			return fmt.Errorf("conflict: %q changed in the bucket; the bucket's version wins and this one goes to lost+found", ce.key)
		}
		if err != nil {
			return err
		}
		if fr.waiting(ino) {
			// Not an attempt: the wait is bounded by PieceWait.
			if err := pause(ctx, 5*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		i++
	}
	return fmt.Errorf("flush inode %d: still queued", ino)
}

// flushRun is what one Flush or FlushInode keeps of the files it waits
// for.
//
// The rule it keeps: a flush does not export a file from a state in which
// the file's last write was a piece that announced more of its write to
// come (meta.Inode.UnfinishedWrite). The kernel hands one write(2), a
// copy_file_range or an mmap writeback over in pieces, and the state
// between two of them is not one the writer ever saw the file have. The
// flush waits for the rest, and holds the file's new writes meanwhile
// (ExporterConfig.HoldWrites) so that a writer that keeps writing cannot
// keep it from finding the file between two writes. The wait is bounded,
// never forever: once the piece is PieceWait old, or this flush has waited
// PieceWait for the file, it exports the file as it is, at a piece
// boundary, as a timed export does for a writer stalled that long
// mid-write(2) (meta.PieceGrace).
type flushRun struct {
	e     *Exporter
	mu    gosync.Mutex
	waits map[meta.Ino]*pieceWait // files waited for now
}

// pieceWait is a flush waiting for the rest of one file's write.
type pieceWait struct {
	since   time.Time // when the flush found the write unfinished
	release func()    // lets the file's new writes go again (once)
}

func (e *Exporter) newFlushRun() *flushRun {
	e.mu.Lock()
	if e.flushes == 0 {
		e.reached = map[meta.Ino]time.Time{}
	}
	e.flushes++
	e.mu.Unlock()
	return &flushRun{e: e, waits: map[meta.Ino]*pieceWait{}}
}

// waitsFor tells whether the flush leaves in, as a snapshot holds it, for
// now: its last write announced more, not long ago, and the flush has not
// waited PieceWait for it yet. The first time it holds the file's new
// writes; once it lets the file go (the snapshot is taken), it releases
// them. A nil flushRun (a timed export, whose quiet period does the same)
// waits for nothing.
func (f *flushRun) waitsFor(in *meta.Inode) bool {
	if f == nil || !in.IsRegular() {
		return false
	}
	now := time.Now()
	bound := f.e.cfg.PieceWait
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.waits[in.Ino]
	unfinished := in.UnfinishedWrite != 0 && now.Sub(time.Unix(0, in.UnfinishedWrite)) < bound
	if unfinished && w == nil {
		w = &pieceWait{since: now, release: gosync.OnceFunc(f.e.cfg.HoldWrites(in.Ino))}
		f.waits[in.Ino] = w
	}
	if unfinished && now.Sub(w.since) < bound {
		return true
	}
	if w != nil {
		if unfinished {
			f.e.log.Info("flush exports a file between two pieces of a write: the rest did not come in time",
				"ino", in.Ino, "waited", now.Sub(w.since).Round(time.Millisecond))
		}
		w.release()
		delete(f.waits, in.Ino)
	}
	return false
}

// expire lets the new writes go again to files this flush has held for
// PieceWait already, without looking at them again (the background
// exporter has them): a hold never outlasts the bound.
func (f *flushRun) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.waits {
		if time.Since(w.since) >= f.e.cfg.PieceWait {
			w.release()
		}
	}
}

// waiting tells whether the flush is waiting for the rest of a write to
// ino.
func (f *flushRun) waiting(ino meta.Ino) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waits[ino] != nil
}

// end releases the writes still held: the flush returns (done, failed
// or cancelled).
func (f *flushRun) end() {
	f.mu.Lock()
	for ino, w := range f.waits {
		w.release()
		delete(f.waits, ino)
	}
	f.mu.Unlock()
	e := f.e
	e.mu.Lock()
	if e.flushes--; e.flushes == 0 {
		e.reached = nil
	}
	e.mu.Unlock()
}
