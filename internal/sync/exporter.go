package sync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/keylock"
	"bucketfs/internal/meta"
	"bucketfs/internal/tier"
)

// ExporterConfig tunes an Exporter.
type ExporterConfig struct {
	// Poll is how often the queue is scanned for due inodes (default 1s,
	// never more than a quarter of the export delay).
	Poll time.Duration
	// PartSize is the multipart part size (default 16 MiB, at least 5 MiB);
	// files at least this large are uploaded in parts.
	PartSize int64
	// Parallel is how many parts of one upload, and how many inodes, are in
	// flight at once (default 4).
	Parallel int
	// IsOpen tells whether an unlinked inode is still held open; its data
	// must stay in the tier until the last close.
	IsOpen func(meta.Ino) bool
	// Locks is shared with the importer (nil: a private table).
	Locks *InodeLocks
	// HoldWrites makes the writes to an inode that begin a new write(2)
	// wait until release is called, while those that continue a write(2)
	// under way go on (vfs.FS.HoldWrites); nil holds nothing. A flush
	// holds them while it waits for a write in pieces to end.
	HoldWrites func(meta.Ino) (release func())
	// PieceWait bounds how long a flush waits for the rest of a write in
	// pieces (default meta.PieceGrace, the time a timed export grants).
	PieceWait time.Duration
	Logger    *slog.Logger
}

// Exporter drains the export queue into the bucket.
type Exporter struct {
	meta     *meta.Store
	bucket   *bucket.Client
	importer *Importer
	cfg      ExporterConfig
	log      *slog.Logger

	// keys serialises writes and deletes of one object key between
	// inodes: one inode's check-then-delete of a name must not straddle
	// another inode's upload to it.
	keys keylock.Table[string]

	mu       gosync.Mutex
	attempts map[meta.Ino]int // consecutive failures, for backoff
	busy     map[meta.Ino]bool
	// While flushes run (flushes > 0): when the snapshot of each inode's
	// latest completed export was taken. A flush is done with an inode
	// once one was taken after the flush was asked: neither Gen (names
	// change without it) nor the queue (a file written on stays queued)
	// says that of a file changed during its export (Flush).
	flushes int
	reached map[meta.Ino]time.Time

	exported  atomic.Int64
	bytes     atomic.Int64
	failures  atomic.Int64
	conflicts atomic.Int64

	// revalidations are the importer's looks at keys whose export or
	// delete the bucket refused (revalidateLater). They run in the
	// background, so that the inode lock is released first, under
	// revalidateCtx (guarded by mu), which carries the values of Run's
	// context (a lease holder's fence) but not its end; Run cancels them
	// and waits for them before it returns, so that none outlives the
	// engine and reaches a closed store, or outlives the lease it was
	// started under. One cut short is harmless: the export is retried
	// at the next start (or by the next lease holder), meets the same
	// refusal and revalidates again.
	revalidations   gosync.WaitGroup
	revalidateCtx   context.Context
	stopRevalidates context.CancelFunc

	// beforeDelete, if set, runs between the look at an object and its
	// delete in deleteIfUnchanged: tests put a bucket-side write there.
	beforeDelete func(key string)
}

// NewExporter returns an exporter. The importer is used to list a renamed
// directory's subtree before its objects are moved.
func NewExporter(m *meta.Store, b *bucket.Client, im *Importer, cfg ExporterConfig) *Exporter {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.PartSize < 5<<20 {
		cfg.PartSize = 16 << 20
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.IsOpen == nil {
		cfg.IsOpen = func(meta.Ino) bool { return false }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Locks == nil {
		cfg.Locks = NewInodeLocks()
	}
	if cfg.HoldWrites == nil {
		cfg.HoldWrites = func(meta.Ino) func() { return func() {} }
	}
	if cfg.PieceWait <= 0 {
		cfg.PieceWait = meta.PieceGrace
	}
	e := &Exporter{meta: m, bucket: b, importer: im, cfg: cfg, log: cfg.Logger,
		attempts: map[meta.Ino]int{}, busy: map[meta.Ino]bool{}}
	e.revalidateCtx, e.stopRevalidates = context.WithCancel(context.Background())
	return e
}

// ExportStats are the exporter's counters.
type ExportStats struct {
	Exported, Bytes, Failures, Conflicts int64
}

// Stats returns the exporter's counters.
func (e *Exporter) Stats() ExportStats {
	return ExportStats{e.exported.Load(), e.bytes.Load(), e.failures.Load(), e.conflicts.Load()}
}

// Run exports due inodes until ctx is done.
// It wakes when the earliest queued inode becomes due, and at least every
// Poll to notice inodes queued meanwhile. Run may be called again after
// it returned (a server that takes the sync lease again); never twice at
// once.
func (e *Exporter) Run(ctx context.Context) {
	e.mu.Lock()
	e.revalidateCtx, e.stopRevalidates = context.WithCancel(context.WithoutCancel(ctx))
	e.mu.Unlock()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			e.mu.Lock()
			e.stopRevalidates()
			e.mu.Unlock()
			e.Wait()
			return
		case <-t.C:
		}
		e.drain(ctx, time.Now())
		wait := e.cfg.Poll
		if _, next, err := e.meta.QueueStats(ctx); err == nil && !next.IsZero() {
			wait = min(wait, max(time.Until(next), 5*time.Millisecond))
		}
		t.Reset(wait)
	}
}

// drain reconciles every inode due by now, Parallel at a time, and
// returns how many failed.
func (e *Exporter) drain(ctx context.Context, now time.Time) (failed int) {
	return e.drainFor(ctx, now, nil)
}

// drainFor is drain for the flush fr (nil: a timed export).
func (e *Exporter) drainFor(ctx context.Context, now time.Time, fr *flushRun) (failed int) {
	due, err := e.meta.Due(ctx, now, 10000)
	if err != nil {
		e.log.Error("export queue", "err", err)
		return 1
	}
	sem := make(chan struct{}, e.cfg.Parallel)
	var wg gosync.WaitGroup
	var mu gosync.Mutex
	for _, q := range due {
		e.mu.Lock()
		if e.busy[q.Ino] {
			e.mu.Unlock()
			continue
		}
		e.busy[q.Ino] = true
		e.mu.Unlock()
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				e.mu.Lock()
				delete(e.busy, q.Ino)
				e.mu.Unlock()
				<-sem
				wg.Done()
			}()
			err := e.fencedOut(ctx, e.reconcileFor(ctx, q, fr))
			var ce *conflictError
			if errors.As(err, &ce) && !errors.Is(err, meta.ErrFenced) {
				e.refused(ce)
			}
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				e.retryLater(ctx, q.Ino, err)
				return
			}
			e.mu.Lock()
			delete(e.attempts, q.Ino)
			e.mu.Unlock()
		}()
	}
	wg.Wait()
	return failed
}

// fencedOut adds meta.ErrFenced to the error of a reconcile run under a
// lease holder's fence that is no longer the lease's: whatever the bucket
// answered (a refusal because the new holder wrote first), it is the new
// holder's to resolve, not a conflict of this one's.
func (e *Exporter) fencedOut(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, meta.ErrFenced) {
		return err
	}
	if ferr := e.meta.CheckFence(ctx); errors.Is(ferr, meta.ErrFenced) {
		return fmt.Errorf("%w (%w)", err, ferr)
	}
	return err
}

// refused counts and logs an export the bucket refused because the object
// changed there, and has the importer resolve the conflict (the bucket
// wins; the importer logs what goes to lost+found).
func (e *Exporter) refused(ce *conflictError) {
	e.conflicts.Add(1)
	e.log.Warn("export refused: the object changed in the bucket; the importer resolves the conflict", "key", ce.key, "err", ce.err)
	e.revalidateLater([]string{ce.key})
}

// deletesRefused counts and logs, as conflicts, the keys whose delete the
// file side wanted but the bucket had changed since bucketfs last saw
// them (the bucket wins: the object stays), and has the importer bring
// them to the file side.
func (e *Exporter) deletesRefused(ino meta.Ino, keys []string) {
	for _, k := range keys {
		e.conflicts.Add(1)
		e.log.Warn("conflict: the file side removed a name the bucket changed meanwhile; the bucket's version wins", "key", k, "ino", ino)
	}
	e.revalidateLater(keys)
}

// revalidateLater has the importer compare keys with the bucket once the
// inode lock is released.
func (e *Exporter) revalidateLater(keys []string) {
	e.mu.Lock()
	ctx := e.revalidateCtx
	e.mu.Unlock()
	for _, k := range keys {
		e.revalidations.Add(1)
		go func() {
			defer e.revalidations.Done()
			if err := e.importer.Revalidate(ctx, k); err != nil && ctx.Err() == nil {
				e.log.Warn("resolve export conflict", "key", k, "err", err)
			}
		}()
	}
}

// Wait returns once the revalidations the exporter started have ended.
// Run waits for them as it stops; a caller that drives the exporter
// without Run waits before it closes the store.
func (e *Exporter) Wait() { e.revalidations.Wait() }

func (e *Exporter) retryLater(ctx context.Context, ino meta.Ino, err error) {
	if errors.Is(err, meta.ErrFenced) || errors.Is(err, errNewerExported) {
		// Another server holds the sync lease now: the inode is its
		// to export, and this one can record nothing.
		e.log.Info("export abandoned: this server no longer holds the sync lease", "ino", ino, "err", err)
		return
	}
	e.failures.Add(1)
	e.mu.Lock()
	e.attempts[ino]++
	n := e.attempts[ino]
	e.mu.Unlock()
	backoff := time.Duration(1<<min(n, 6)) * time.Second
	e.log.Warn("export failed; will retry", "ino", ino, "attempt", n, "retry_in", backoff, "err", err)
	if err := e.meta.Enqueue(ctx, ino, time.Now().Add(backoff), false); err != nil {
		e.log.Error("requeue export", "ino", ino, "err", err)
	}
}

// reconcile makes the bucket match one inode, holding the inode's lock
// against the importer. It works from one snapshot of the namespace and the
// file data, so that what it uploads (bytes, size, generation, names,
// attributes) is one state the file had.
func (e *Exporter) reconcile(ctx context.Context, q meta.Queued) error {
	return e.reconcileFor(ctx, q, nil)
}

// reconcileFor is reconcile for the flush fr (nil: a timed export), which
// does not export a file in the middle of a write (flushRun.waitsFor).
func (e *Exporter) reconcileFor(ctx context.Context, q meta.Queued, fr *flushRun) error {
	unlock := e.cfg.Locks.Lock(q.Ino)
	defer unlock()
	taken := time.Now() // the snapshot holds every change committed before
	snap, err := e.meta.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer snap.Close()
	in, err := snap.Get(q.Ino)
	if errors.Is(err, syscall.ENOENT) {
		e.log.Debug("export skipped", "ino", q.Ino, "reason", "the inode is gone")
		return e.meta.Forget(ctx, q.Ino)
	}
	if err != nil {
		return err
	}
	// Export only a state that was still quiet when the snapshot was
	// taken: a change since the queue was read moved the inode's due time
	// (its token). The kernel hands one write(2) over in several requests
	// (a first piece up to a page boundary, then the rest), and a
	// snapshot between them would upload a state the writer never asked
	// for; such an inode is left queued for its new due time. A flush
	// ignores the quiet period: it keeps the same rule by the pieces' own
	// marks instead (fr.waitsFor, below), and does not wait for a quiet
	// moment, which a file written on without pause never has (a flush
	// through another server waited so for as long as the writer wrote).
	if due, queued, err := snap.QueuedAt(q.Ino); err != nil {
		return err
	} else if queued && due != q.Due && fr == nil {
		e.log.Debug("export deferred", "ino", q.Ino, "reason", "changed since the queue was read", "due_in", time.Until(time.Unix(0, due)).Round(time.Millisecond))
		return nil
	}
	if fr.waitsFor(&in) {
		e.log.Debug("export deferred", "ino", q.Ino, "reason", "a flush waits for the rest of a write in pieces")
		return nil
	}
	if in.Ino == meta.RootIno || in.Has(meta.NoExport) {
		_, _, err := e.meta.Synced(ctx, q, in.Gen, func(*meta.Inode) {})
		if err == nil && in.Ino != meta.RootIno {
			e.log.Debug("export skipped", "ino", q.Ino, "reason", "not exported (lost+found or below it)")
		}
		return err
	}
	paths, underLF, err := snap.Paths(in.Ino)
	if err != nil {
		return err
	}
	var want []string
	for i, p := range paths {
		if underLF[i] {
			continue
		}
		if in.IsDir() {
			p += "/"
		}
		want = append(want, p)
	}
	// Every key this reconcile may write is recorded first (see
	// meta.AddIntents), made durable by the sync below.
	if err := e.meta.AddIntents(ctx, in.Ino, want); err != nil {
		return err
	}
	// Nothing is done to the bucket on the strength of a file-side state
	// that a crash could still take back: a rename undone by a power loss
	// after its copy was made would leave an object no name stands for,
	// and an object tagged with a generation the file side could hand out
	// again to other bytes would be adopted as exported. The snapshot was
	// taken before this sync, so all of it is durable. (Concurrent syncs
	// share one flush of the log.)
	if err := e.meta.Sync(ctx); err != nil {
		return err
	}
	if err := e.dropLeftovers(ctx, &in, want); err != nil {
		return err
	}
	if in.IsDir() {
		err = e.reconcileDir(ctx, q, &in, want)
	} else {
		err = e.reconcileFile(ctx, q, snap, &in, want)
	}
	if err == nil {
		e.noteReached(in.Ino, taken)
	}
	return err
}

// noteReached records, while a flush runs, that the bucket holds ino as
// a snapshot taken at taken showed it.
func (e *Exporter) noteReached(ino meta.Ino, taken time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.flushes > 0 && taken.After(e.reached[ino]) {
		e.reached[ino] = taken
	}
}

func (e *Exporter) reconcileFile(ctx context.Context, q meta.Queued, snap *meta.Snapshot, in *meta.Inode, want []string) (err error) {
	gen := in.Gen
	var note exportNote
	have := map[string]meta.Object{}
	for _, k := range in.Keys {
		have[k.Key] = k
	}
	var keep []meta.Object
	defer func() {
		// Cut short (a conflict at one name, the store away): what was
		// written is recorded all the same, so that the next attempt
		// knows those objects as this inode's, and a change the bucket
		// makes to one of them meanwhile (a delete) is the bucket's
		// change, not a name to write again as new.
		if err != nil && len(keep) > 0 {
			if rerr := e.meta.RecordWritten(ctx, in.Ino, keep); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	base := in.Base
	if len(want) > 0 {
		var src meta.Object // a complete object with the current content
		switch {
		case in.Has(meta.DataDirty) || len(in.Keys) == 0:
			// The object carries this Gen in its origin tag, and after a
			// crash an object with the inode's current Gen counts as
			// already exported: reconcile made the Gen durable first.
			obj, err := e.upload(ctx, snap, in, want[0], have[want[0]])
			if err != nil {
				if obj.Key != "" { // it landed, beside a later write
					keep = append(keep, obj)
				}
				return err
			}
			src, base = obj, obj
			keep = append(keep, obj)
			note = exportNote{action: "uploaded", key: obj.Key, version: obj.VersionID, bytes: obj.Size}
		case in.Dirty():
			// Attributes only: rewrite metadata in place at a wanted name
			// already exported (the new Gen is durable, as above), which
			// the other names are then copied from. Not necessarily the
			// first: a name linked since is not exported yet, and copying
			// from an exported one as it is would leave its old
			// attributes there.
			if i := slices.IndexFunc(want, func(k string) bool { _, ok := have[k]; return ok }); i >= 0 {
				k, old := want[i], have[want[i]]
				obj, err := e.recover(ctx, k, in, bucket.PutOptions{Metadata: objectMetadata(in, e.meta.Fsid(), k),
					IfMatch: old.ETag, IfMatchVersion: old.VersionID, Ours: e.oursOf(in.Ino, k)},
					func(opt bucket.PutOptions) (bucket.ObjectInfo, error) {
						return e.bucket.Copy(ctx, k, old.Key, "", opt)
					})
				if err != nil {
					if o, ok := landed(k, in.Size, err); ok {
						keep = append(keep, o)
					}
					return e.conflictOr(k, err)
				}
				src = toObject(obj, in.Size)
				keep = append(keep, src)
				note = exportNote{action: "attributes", key: obj.Key, version: obj.VersionID}
			}
		}
		if src.Key == "" {
			src = in.Keys[0]
		}
		for _, k := range want {
			if k == src.Key {
				// The name copied from is still wanted: its record stays
				// (it is in keep already if this reconcile uploaded it).
				if !slices.ContainsFunc(keep, func(o meta.Object) bool { return o.Key == k }) {
					keep = append(keep, src)
				}
				continue
			}
			old, exported := have[k]
			if exported && !in.Dirty() {
				keep = append(keep, old)
				continue
			}
			// SourceETag: a store that copied the source key's newer
			// object under src's version (a bucket-side write landing
			// mid-copy) refuses instead; the reconcile fails and is done
			// again (bucket.ErrSourceChanged).
			opt := bucket.PutOptions{Metadata: objectMetadata(in, e.meta.Fsid(), k), Ours: e.oursOf(in.Ino, k), SourceETag: src.ETag}
			if exported {
				opt.IfMatch, opt.IfMatchVersion = old.ETag, old.VersionID
			} else {
				opt.IfNoneMatch = true
			}
			obj, err := e.recover(ctx, k, in, opt,
				func(opt bucket.PutOptions) (bucket.ObjectInfo, error) {
					return e.bucket.Copy(ctx, k, src.Key, src.VersionID, opt)
				})
			if err != nil {
				if o, ok := landed(k, in.Size, err); ok {
					keep = append(keep, o)
				}
				return e.conflictOr(k, err)
			}
			keep = append(keep, toObject(obj, in.Size))
			note.copied = append(note.copied, k)
		}
	}
	// Names the inode no longer has.
	wanted := map[string]bool{}
	for _, k := range want {
		wanted[k] = true
	}
	var conflicts []string
	for _, k := range in.Keys {
		if !wanted[k.Key] {
			c, deleted, err := e.deleteIfUnchanged(ctx, in, k)
			if err != nil {
				return err
			}
			if c != "" {
				conflicts = append(conflicts, c)
			}
			if deleted {
				note.deleted = append(note.deleted, k.Key)
			}
		}
	}
	defer e.deletesRefused(in.Ino, conflicts)
	after, done, err := e.meta.Synced(ctx, q, gen, func(cur *meta.Inode) {
		cur.Keys = keep
		if base == in.Base {
			return
		}
		// The new object holds the snapshot's bytes. Where the file still
		// shows the old base's bytes (no block, below Backed), the new
		// object has the same bytes, so it can stand in for the old one
		// even if the file changed since the snapshot.
		cur.Base = base
		if cur.Gen == gen {
			// The bucket now holds every byte: the tier's copy is a cache
			// that eviction may drop.
			cur.Backed = cur.Size
		}
	})
	if err != nil {
		return err
	}
	e.exported.Add(1)
	if note.key == "" && len(keep) > 0 {
		note.key, note.version = keep[0].Key, keep[0].VersionID
	}
	switch {
	case done && after.Nlink == 0 && !e.cfg.IsOpen(after.Ino):
		e.logExport(ctx, in, &note, "")
		return e.meta.Forget(ctx, after.Ino)
	case after.Nlink == 0 && e.cfg.IsOpen(after.Ino):
		// Still open: look again later.
		e.logExport(ctx, in, &note, "removed but still open: its data stays until the last close")
		return e.meta.Enqueue(ctx, after.Ino, time.Now().Add(e.cfg.Poll), true)
	case !done:
		e.logExport(ctx, in, &note, "changed during the export: exported again after the quiet period")
	default:
		e.logExport(ctx, in, &note, "")
	}
	return nil
}

// dropLeftovers deletes the objects an earlier reconcile of in may have
// written without recording them (a crash came between), under keys in
// no longer wants and does not know of: an intent without a record. Only
// an object that is still this inode's (by its origin tag) is deleted;
// anything else at the key belongs to someone else and stays.
func (e *Exporter) dropLeftovers(ctx context.Context, in *meta.Inode, want []string) error {
	intents, err := e.meta.Intents(ctx, in.Ino)
	if err != nil || len(intents) == 0 {
		return err
	}
	known := map[string]bool{}
	for _, k := range want {
		known[k] = true
	}
	for _, k := range in.Keys {
		known[k.Key] = true
	}
	for _, key := range intents {
		if known[key] {
			continue
		}
		if err := e.deleteIfOurs(ctx, in, key); err != nil {
			return err
		}
		if err := e.meta.DropIntent(ctx, in.Ino, key); err != nil {
			return err
		}
	}
	return nil
}

// deleteIfOurs deletes the object at key if this inode wrote it (its origin
// tag names the inode, at no later generation than in's) and no other
// inode has recorded it since.
func (e *Exporter) deleteIfOurs(ctx context.Context, in *meta.Inode, key string) error {
	ino := in.Ino
	defer e.keys.Lock(key)()
	if owner, owned, err := e.meta.KeyOwner(ctx, key); err != nil {
		return err
	} else if owned && owner.Ino != ino {
		return nil
	}
	cur, err := e.bucket.Head(ctx, key, "")
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("delete %q: %w", key, err)
	}
	who, gen, ok := originOf(cur.Metadata, key)
	if !ok || who != inodeOrigin(e.meta.Fsid(), ino) {
		return nil
	}
	if gen > in.Gen {
		return newerExport(key, in, gen)
	}
	e.log.Info("deleting an object a crash left unrecorded", "key", key, "ino", ino, "version_id", cur.VersionID)
	// Like any delete of what was seen, it never hides a write that lands
	// after the look (and writes no marker for it where the store honours
	// conditional deletes): that write is the bucket's, for the importer.
	kept, err := e.bucket.DeleteCurrent(ctx, key, cur)
	if err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	if kept {
		e.revalidateLater([]string{key})
	}
	return nil
}

// orphan reports whether the object at key (its metadata md) is an
// upload of an inode of this file system that an export intent still
// names: written, and not recorded, before a crash.
// oursOf tells whether object metadata marks an upload of inode ino to
// key by this file system (bucket.PutOptions.Ours).
func (e *Exporter) oursOf(ino meta.Ino, key string) func(md map[string]string) bool {
	return func(md map[string]string) bool {
		who, ok := ourInode(e.meta.Fsid(), md, key)
		return ok && who == ino
	}
}

func (e *Exporter) orphan(ctx context.Context, md map[string]string, key string) bool {
	ino, ok := ourInode(e.meta.Fsid(), md, key)
	if !ok {
		return false
	}
	pending, err := e.meta.HasIntent(ctx, ino, key)
	return err == nil && pending
}

// errNewerExported marks an export that met, at its key, a later state
// of the same inode that another exporter wrote.
//
// The rule it keeps: an exporter never replaces, nor deletes, an object
// whose origin tag names its inode with a later generation than the state
// it exports. Generations of an inode only grow, and each is made durable
// before it is uploaded, so such an object can only be the export of a
// later state by the server that took the sync lease over while this one
// was paused (meta's lease.go): this one's write is stale. Together with
// the conditional writes (which refuse a write whose version below is not
// the one this exporter saw) and the fence on every record (which refuses
// the stale exporter's transactions), a leader paused between its intent
// and its upload or record can neither bring an older state back nor
// record anything: the bucket never receives a state older than one it
// had, nor one version twice.
var errNewerExported = errors.New("a later state of the file was exported meanwhile, by the server holding the sync lease")

func newerExport(key string, in *meta.Inode, gen uint64) error {
	return fmt.Errorf("inode %d at generation %d: %q holds its generation %d: %w", in.Ino, in.Gen, key, gen, errNewerExported)
}

// conflictError says the bucket changed key since the file side last saw
// it; the importer resolves it (the bucket wins).
type conflictError struct {
	key string
	err error
}

func (c *conflictError) Error() string { return fmt.Sprintf("export %q: conflict: %v", c.key, c.err) }
func (c *conflictError) Unwrap() error { return c.err }

// conflictOr turns a failed precondition into a conflictError.
func (e *Exporter) conflictOr(key string, err error) error {
	if errors.Is(err, bucket.ErrPrecondition) {
		return &conflictError{key: key, err: err}
	}
	return fmt.Errorf("export %q: %w", key, err)
}

// deleteIfUnchanged deletes the object at k unless the bucket changed it
// since the file side saw it. It reports a changed object as a conflict
// for the importer, without failing the reconcile: the file side no longer
// wants that name, and the bucket's version keeps it. deleted says whether
// it deleted the object (not: gone already, another inode's now, or a
// conflict).
func (e *Exporter) deleteIfUnchanged(ctx context.Context, in *meta.Inode, k meta.Object) (conflict string, deleted bool, err error) {
	ino := in.Ino
	defer e.keys.Lock(k.Key)()
	if owner, owned, err := e.meta.KeyOwner(ctx, k.Key); err != nil {
		return "", false, err
	} else if owned && owner.Ino != ino {
		return "", false, nil // another inode has exported under this name since
	}
	cur, err := e.bucket.Head(ctx, k.Key, "")
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("delete %q: %w", k.Key, err)
	}
	// The version decides, and who wrote it, never the ETag alone: the
	// inode renamed over this one may have just uploaded the same bytes
	// under the name, before its record of the name is committed.
	who, objGen, tagged := originOf(cur.Metadata, k.Key)
	mine := tagged && who == inodeOrigin(e.meta.Fsid(), in.Ino)
	ours := tagged && strings.HasPrefix(who, e.meta.Fsid()+"/")
	exact := versioned(k.VersionID) && cur.VersionID == k.VersionID
	seen := sameVersion(k, cur)
	switch {
	case mine && objGen > in.Gen:
		// A later state's export, by the server holding the sync lease
		// now (errNewerExported): not this one's to delete.
		return "", false, newerExport(k.Key, in, objGen)
	case ours && !mine && !exact:
		// Another inode of this file system wrote it: the name is its
		// now, and so is the object.
		return "", false, nil
	case seen:
	case mine:
		// Not what the file side recorded, but this inode wrote it: ours
		// to delete if under an intent (an upload a crash kept from being
		// recorded).
		if intended, err := e.meta.HasIntent(ctx, ino, k.Key); err != nil {
			return "", false, err
		} else if !intended {
			return k.Key, false, nil
		}
	default:
		return k.Key, false, nil // a bucket-side change
	}
	if e.beforeDelete != nil {
		e.beforeDelete(k.Key)
	}
	// A bucket-side write may land between the HEAD and the delete: the
	// delete never hides it, and it is a change like any other.
	kept, err := e.bucket.DeleteCurrent(ctx, k.Key, cur)
	if err != nil {
		return "", false, fmt.Errorf("delete %q: %w", k.Key, err)
	}
	if kept {
		return k.Key, false, nil
	}
	return "", true, nil
}

func toObject(o bucket.ObjectInfo, size int64) meta.Object {
	return meta.Object{Key: o.Key, ETag: o.ETag, VersionID: o.VersionID, Size: size}
}

// upload writes the whole current content of in to key as one new object
// version, conditional on old (the version last seen there, if any).
// snap is the snapshot in was read from (nil for a directory).
func (e *Exporter) upload(ctx context.Context, snap *meta.Snapshot, in *meta.Inode, key string, old meta.Object) (meta.Object, error) {
	opt := bucket.PutOptions{Metadata: objectMetadata(in, e.meta.Fsid(), key), Ours: e.oursOf(in.Ino, key)}
	if old.Key != "" {
		opt.IfMatch, opt.IfMatchVersion = old.ETag, old.VersionID
	} else {
		opt.IfNoneMatch = true
	}
	put := func(opt bucket.PutOptions) (bucket.ObjectInfo, error) {
		switch {
		case in.Type() == syscall.S_IFLNK:
			body := []byte(in.Target)
			return e.bucket.Put(ctx, key, bytes.NewReader(body), int64(len(body)), opt)
		case !in.IsRegular():
			return e.bucket.Put(ctx, key, bytes.NewReader(nil), 0, opt)
		}
		return e.uploadFile(ctx, snap, in, key, opt)
	}
	size := in.Size
	if in.Type() == syscall.S_IFLNK {
		size = int64(len(in.Target))
	}
	info, err := e.recover(ctx, key, in, opt, put)
	if err != nil {
		o, _ := landed(key, size, err)
		return o, e.conflictOr(key, err)
	}
	e.bytes.Add(in.Size)
	return toObject(info, size), nil
}

// landed is the object a write to key that failed made all the same: one
// the store acknowledged under a later write of the key
// (bucket.LandedError). It is the inode's object at key for what comes
// next: a reconcile that fails still records it (reconcileFile), so that
// the later write, a delete too, is the bucket's change to it, and wins,
// rather than a key this inode never wrote, to be written again as new.
func landed(key string, size int64, err error) (meta.Object, bool) {
	var le *bucket.LandedError
	if !errors.As(err, &le) {
		return meta.Object{}, false
	}
	o := toObject(le.Ours, size)
	o.Key = key
	return o, true
}

// recover runs write (an upload or copy to key under opt's conditions) and,
// when the condition fails, looks at what the bucket holds: an object this
// inode exported earlier but never recorded (the process died in between)
// is either this very generation, taken as done, or an older one, which
// the write may replace. Anything else is a real conflict.
//
// A write the store acknowledged next to another write of the key
// (bucket.ErrInterleaved, on a store not trusted with conditions) is a
// conflict at once: the other write came from outside this file system,
// since the key lock keeps this one's exports of key apart, and the
// bucket client has made it current already.
func (e *Exporter) recover(ctx context.Context, key string, in *meta.Inode, opt bucket.PutOptions,
	write func(bucket.PutOptions) (bucket.ObjectInfo, error)) (bucket.ObjectInfo, error) {
	defer e.keys.Lock(key)()
	_, recordedHere := recordedAt(in, key)
	write = e.echoed(key, write)
	info, err := write(opt)
	for range 3 {
		if errors.Is(err, bucket.ErrInterleaved) ||
			!errors.Is(err, bucket.ErrPrecondition) && !errors.Is(err, bucket.ErrNotFound) {
			return info, err
		}
		cur, herr := e.bucket.Head(ctx, key, "")
		switch {
		case errors.Is(herr, bucket.ErrNotFound) && opt.IfMatch != "" && recordedHere:
			// The object this inode last saw at key (exported or
			// imported) was deleted in the bucket meanwhile: a conflict,
			// whether the store refused the write as a failed condition
			// or as a missing key (S3 answers If-Match on a deleted key
			// with NoSuchKey).
			return info, fmt.Errorf("%w: deleted in the bucket: %w", bucket.ErrPrecondition, err)
		case errors.Is(herr, bucket.ErrNotFound):
			// Gone since the write was refused: the object this write
			// was to replace was another inode's of ours (the name's
			// holder before a rename onto it), and that inode deleted it,
			// as it may before this write. Write as new.
		case herr != nil:
			return info, err
		default:
			owner, owned, oerr := e.meta.KeyOwner(ctx, key)
			if oerr != nil {
				return info, err
			}
			held, _ := recordedAt(&owner, key)
			who, gen, tagged := originOf(cur.Metadata, key)
			mine := tagged && who == inodeOrigin(e.meta.Fsid(), in.Ino)
			ours := tagged && strings.HasPrefix(who, e.meta.Fsid()+"/")
			switch {
			case mine && gen == in.Gen:
				// This very export, done before a crash (or its response
				// was lost). It is taken as it is: the condition it was
				// sent under may not be this one's (a retry below
				// changes it), so there is nothing sure to confirm it by.
				return cur, nil
			case mine && gen > in.Gen:
				// A later state of this inode, exported by the server
				// that holds the sync lease now: this exporter lost the
				// lease while its write was on the way (newerExport).
				return info, newerExport(key, in, gen)
			case mine:
			case owned && owner.Ino != in.Ino && sameVersion(held, cur):
				// Another inode of this file system held the name (it was
				// unlinked or renamed away and not yet exported): this
				// export replaces that object, and that inode's reconcile
				// leaves it alone.
			case ours && !owned && e.orphan(ctx, cur.Metadata, key):
				// Written by an inode of this file system whose export
				// a crash cut short before it was recorded (its intent
				// is still there): file-side history, not a bucket-side
				// change. This export replaces it. An object of ours
				// that no inode records and no intent names was put
				// there in the bucket (a restore of an older version, or
				// a copy, carries our tag): a bucket-side write.
			default:
				return info, err
			}
			opt.IfMatch, opt.IfMatchVersion, opt.IfNoneMatch = cur.ETag, cur.VersionID, false
		}
		if errors.Is(herr, bucket.ErrNotFound) {
			// Nothing is there: write as new, with If-None-Match, so that
			// a write landing in the bucket meanwhile is not overwritten.
			// Some stores (versitygw's posix backend) refuse If-None-Match
			// on a key whose latest version is a delete marker: when that
			// condition itself was refused and the HEAD still finds
			// nothing, write without it.
			opt.IfMatch, opt.IfMatchVersion, opt.IfNoneMatch = "", "", !opt.IfNoneMatch
		}
		info, err = write(opt)
	}
	return info, err
}

// echoed is write with the importer told that an upload of key is under
// way, and of the version it made: the store's event of it, which may come
// before write returns, is then known for the echo of this export (echo.go).
func (e *Exporter) echoed(key string, write func(bucket.PutOptions) (bucket.ObjectInfo, error)) func(bucket.PutOptions) (bucket.ObjectInfo, error) {
	if e.importer == nil {
		return write
	}
	return func(opt bucket.PutOptions) (bucket.ObjectInfo, error) {
		done := e.importer.echoes.uploading(key)
		info, err := write(opt)
		done(info, err)
		return info, err
	}
}

// uploadFile uploads a regular file as snap holds it, so writes during the
// upload never mix into the object (a write meanwhile changes the inode's
// Gen and the file is exported again). Bytes the tier does not hold come
// from the base version: whole parts by a server-side copy, the rest read
// from the bucket as the upload goes. Nothing is copied to local disk first,
// so a full tier never stops an export.
func (e *Exporter) uploadFile(ctx context.Context, snap *meta.Snapshot, in *meta.Inode, key string, opt bucket.PutOptions) (bucket.ObjectInfo, error) {
	if in.Size < e.cfg.PartSize {
		body := &exportBody{ctx: ctx, e: e, snap: snap, in: in, hi: in.Size}
		return e.bucket.Put(ctx, key, io.NewSectionReader(body, 0, in.Size), in.Size, opt)
	}
	missing, err := snap.Missing(in, 0, in.Size)
	if err != nil {
		return bucket.ObjectInfo{}, err
	}
	size := e.cfg.PartSize
	for in.Size/size >= bucket.MaxParts {
		size *= 2
	}
	var parts []bucket.Part
	for off := int64(0); off < in.Size; off += size {
		n := min(size, in.Size-off)
		gaps := clip(missing, off, n)
		if len(gaps) == 1 && gaps[0].Len == n && off+n <= in.Base.Size {
			parts = append(parts, bucket.Part{Off: off, Len: n, CopyKey: in.Base.Key, CopyVersion: in.Base.VersionID, CopyOff: off})
			continue
		}
		parts = append(parts, bucket.Part{Off: off, Len: n, Src: &exportBody{ctx: ctx, e: e, snap: snap, in: in, lo: off, hi: off + n}})
	}
	if err := e.meta.BeginUploadOf(ctx, key); err != nil {
		return bucket.ObjectInfo{}, err
	}
	defer func() {
		if err := e.meta.EndUploadOf(context.WithoutCancel(ctx), key); err != nil {
			e.log.Warn("forget an ended multipart upload; the next start looks for it, harmlessly", "key", key, "err", err)
		}
	}()
	return e.bucket.PutParts(ctx, key, parts, e.cfg.Parallel, e.journalUploads(key, opt))
}

// exportBody reads [lo, hi) of a file as a snapshot holds it: the tier's
// blocks, and the base version's bytes where the tier holds none. At the
// first read that needs the base it fetches, in one ranged GET, the span
// from the first to the last byte of [lo, hi) the tier lacks, and keeps it:
// the SDK may read a body twice (once to sign it), and a part of a
// multipart upload is at most a part size.
type exportBody struct {
	ctx    context.Context
	e      *Exporter
	snap   *meta.Snapshot
	in     *meta.Inode
	lo, hi int64

	mu   gosync.Mutex
	span []byte
	at   int64
	err  error
}

func (b *exportBody) ReadAt(p []byte, off int64) (int, error) {
	if off >= b.hi {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), b.hi-off))
	missing, err := b.snap.ReadData(b.in, p[:n], off)
	if err != nil {
		return 0, err
	}
	for _, r := range missing {
		if err := b.base(p[r.Off-off:r.End()-off], r.Off); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// base fills p with the base version's bytes at off.
func (b *exportBody) base(p []byte, off int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.span == nil && b.err == nil {
		b.err = b.fetch()
	}
	if b.err != nil {
		return b.err
	}
	if off < b.at || off+int64(len(p)) > b.at+int64(len(b.span)) {
		return fmt.Errorf("export inode %d: base bytes [%d,+%d) outside the fetched span", b.in.Ino, off, len(p))
	}
	copy(p, b.span[off-b.at:])
	return nil
}

func (b *exportBody) fetch() error {
	missing, err := b.snap.Missing(b.in, b.lo, b.hi-b.lo)
	if err != nil || len(missing) == 0 {
		return err
	}
	obj := b.in.Base
	lo, hi := missing[0].Off, min(missing[len(missing)-1].End(), obj.Size)
	buf := make([]byte, max(hi-lo, 0))
	if len(buf) > 0 {
		got, err := b.e.bucket.ReadAt(b.ctx, obj.Key, obj.VersionID, buf, lo)
		if err != nil && !(errors.Is(err, io.EOF) && got == len(buf)) {
			return fmt.Errorf("read base %q: %w", obj.Key, err)
		}
	}
	// Past the base's end (which Backed never reaches) the span is zeros.
	b.span, b.at = append(buf, make([]byte, missing[len(missing)-1].End()-lo-int64(len(buf)))...), lo
	return nil
}

// clip returns the parts of ranges inside [off, off+n).
func clip(ranges []tier.Range, off, n int64) []tier.Range {
	var out []tier.Range
	for _, r := range ranges {
		lo, hi := max(r.Off, off), min(r.Off+r.Len, off+n)
		if lo < hi {
			out = append(out, tier.Range{Off: lo, Len: hi - lo})
		}
	}
	return out
}

// reconcileDir keeps a marker object for a directory at its current path.
// A directory whose path changed (a rename of it or of an ancestor) first
// imports its whole listing from the old prefix, then queues its children
// so that each moves its own objects.
// requeueMisplaced queues the children of dir, whose key is now prefix,
// that were exported under another name than prefix+name: they follow the
// directory's rename. A child never exported waits for its own export.
func (e *Exporter) requeueMisplaced(ctx context.Context, dir meta.Ino, prefix string) error {
	ents, err := e.meta.ReadDir(ctx, dir, "", 1<<30)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		child, err := e.meta.Get(ctx, ent.Ino)
		if err != nil {
			return err
		}
		want := prefix + ent.Name
		if child.IsDir() {
			want += "/"
		}
		if len(child.Keys) == 0 || slices.ContainsFunc(child.Keys, func(k meta.Object) bool { return k.Key == want }) {
			continue
		}
		if err := e.meta.Enqueue(ctx, ent.Ino, time.Now(), false); err != nil {
			return err
		}
	}
	return nil
}

func (e *Exporter) reconcileDir(ctx context.Context, q meta.Queued, in *meta.Inode, want []string) error {
	gen := in.Gen
	newKey := ""
	if len(want) > 0 {
		newKey = want[0]
	}
	moved := in.Source != "" && in.Source != newKey
	if in.Source == "" && newKey != "" {
		// Never exported: children exported before it are under the path
		// it had then, which a rename since may have changed.
		if err := e.requeueMisplaced(ctx, in.Ino, newKey); err != nil {
			return err
		}
	}
	if moved || newKey == "" {
		if err := e.importer.EnsureListed(ctx, in); err != nil {
			return err
		}
		ents, err := e.meta.ReadDir(ctx, in.Ino, "", 1<<30)
		if err != nil {
			return err
		}
		for _, ent := range ents {
			// A new token even for a child due already: an export of it
			// under way saw the old path, and must not take it out of
			// the queue.
			if err := e.meta.Enqueue(ctx, ent.Ino, time.Now(), false); err != nil {
				return err
			}
		}
	}
	var keep []meta.Object
	var note exportNote
	if newKey != "" {
		old := meta.Object{}
		for _, k := range in.Keys {
			if k.Key == newKey {
				old = k
			}
		}
		if old.Key == "" || in.Dirty() {
			obj, err := e.upload(ctx, nil, in, newKey, old)
			if err != nil {
				return err
			}
			old = obj
			note.action = "uploaded"
		}
		keep = append(keep, old)
		note.key, note.version = old.Key, old.VersionID
	}
	var conflicts []string
	for _, k := range in.Keys {
		if k.Key != newKey {
			c, deleted, err := e.deleteIfUnchanged(ctx, in, k)
			if err != nil {
				return err
			}
			if c != "" {
				conflicts = append(conflicts, c)
			}
			if deleted {
				note.deleted = append(note.deleted, k.Key)
			}
		}
	}
	defer e.deletesRefused(in.Ino, conflicts)
	after, done, err := e.meta.Synced(ctx, q, gen, func(cur *meta.Inode) {
		cur.Keys = keep
		if newKey != "" {
			cur.Source = newKey
		}
	})
	if err != nil {
		return err
	}
	e.exported.Add(1)
	requeued := ""
	if !done {
		requeued = "changed during the export: exported again after the quiet period"
	}
	e.logExport(ctx, in, &note, requeued)
	if done && after.Nlink == 0 {
		return e.meta.Forget(ctx, after.Ino)
	}
	return nil
}
