package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"bucketfs/internal/kv"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options tunes the embedded Pebble store. The zero value gives
// defaults suited to a metadata workload: small keys and values, many point
// lookups, short scans of one directory.
type Options struct {
	// CacheSize is the block cache size in bytes. Default 64 MiB. Pebble
	// charges its memtables to the block cache, so the cache is made
	// larger by two memtables: without that, two live memtables (one
	// being written, one flushing or kept for reuse) took the whole
	// default cache, and every lookup read its blocks from the files.
	CacheSize int64
	// MemTableSize is the size of one memtable in bytes. Default: sized to
	// the disk the store is on (memTableFor), 32 MiB on a disk of 4 GiB
	// or more.
	MemTableSize uint64
	// FS is the file system the store lives on; nil means the operating
	// system's. Power-loss tests pass Pebble's strict in-memory file
	// system, which drops every write not synced when a crash is simulated.
	FS vfs.FS
}

const (
	defaultPebbleCacheSize = 64 << 20
	maxPebbleMemTableSize  = 32 << 20
	minPebbleMemTableSize  = 4 << 20
)

// memTableFor returns the memtable size for a store in dir: a 128th of
// its disk, between 4 and 32 MiB.
//
// The memtable size is also the size of the store's preallocated files,
// which take disk space however little they hold: Pebble gives every log
// file (one per memtable) 110% of MemTableSize up front, keeps up to
// three old ones for reuse, and at start ramps its memtables up from
// 256 KiB, with a log file each, before the first flush. With 32 MiB
// memtables that was up to eight files of 36 MiB: on a 160 MiB state
// disk holding 5 MiB of data the free space fell below the reserve that
// writes leave (vfs: DiskReserve, 64 MiB), and every write failed with
// ENOSPC. Sized to the disk, the log files take at most about 7% of a
// disk of 512 MiB or more (eight of 1.1 x disk/128), some 35 MiB of a
// smaller one, and 280 MiB of any. 4 MiB is the floor because a batch of
// half the memtable or more is flushed on its own, and the file system
// writes pieces of 1 MiB (meta.WritePiece).
func memTableFor(fs vfs.FS, dir string) uint64 {
	du, err := fs.GetDiskUsage(dir)
	if err != nil || du.TotalBytes == 0 {
		return maxPebbleMemTableSize // a file system that cannot tell (in memory)
	}
	return min(max(du.TotalBytes/128&^(1<<20-1), minPebbleMemTableSize), maxPebbleMemTableSize)
}

// pebbleStore implements kv.Store on one Pebble database.
type pebbleStore struct {
	db   *pdb.DB
	lock *pdb.Lock // the directory lock; released after db.Close

	// writer is the single writer slot: an Update holds it (a buffered
	// channel of capacity 1, so that waiting honors ctx) from the start of fn
	// until its batch is committed or discarded. Views never take it.
	writer chan struct{}

	// provisional holds the keys the last commit set provisionally
	// (kv.ProvisionalTxn), which the next commit deletes unless it sets
	// them again. Under the writer slot; nProvisional is its length, read
	// by Sync without the slot.
	provisional  [][]byte
	nProvisional atomic.Int32
}

var _ kv.Store = (*pebbleStore)(nil)

// Open opens, or creates, a Pebble store in dir. It fails with an error
// matching kv.ErrLocked if dir is held open by another process or Store.
func Open(dir string, opt Options) (kv.Store, error) {
	if opt.CacheSize <= 0 {
		opt.CacheSize = defaultPebbleCacheSize
	}
	if opt.FS == nil {
		opt.FS = vfs.Default
	}
	if err := MkdirAllSynced(opt.FS, dir); err != nil {
		return nil, fmt.Errorf("kv: open pebble %s: %w", dir, err)
	}
	if opt.MemTableSize == 0 {
		opt.MemTableSize = memTableFor(opt.FS, dir)
	}
	// Take the directory lock ourselves so a lock failure is told apart
	// from any other open error.
	lock, err := pdb.LockDirectory(dir, opt.FS)
	if err != nil {
		// Failing to create the LOCK file is a *fs.PathError; failing to
		// lock it (fcntl, or Pebble's in-process check) is not.
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			return nil, fmt.Errorf("kv: open pebble %s: %w", dir, err)
		}
		return nil, fmt.Errorf("kv: open pebble %s: %w (%v)", dir, kv.ErrLocked, err)
	}
	o := &pdb.Options{
		CacheSize:    opt.CacheSize + 2*int64(opt.MemTableSize),
		MemTableSize: opt.MemTableSize,
		// The MANIFEST (the log of the store's file set) grows with
		// every flush and compaction until it is rewritten at this
		// size; Pebble's default, 128 MiB, would be most of a small
		// disk. It is sized with the memtables, to the disk.
		MaxManifestFileSize: int64(opt.MemTableSize),
		FormatMajorVersion:  pdb.FormatNewest,
		Lock:                lock,
		FS:                  opt.FS,
		Logger:              quietLogger{},
	}
	// Bloom filters let a lookup of a missing name (every create does one)
	// skip most sstables. Levels below L0 inherit from L0.
	o.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	// File data (package tier) is 4 KiB values: written once to the log
	// and once, at a flush, into blob files that compactions then move by
	// reference instead of rewriting, so a large write costs about twice
	// its size on disk rather than once per level. Blob files with a fifth
	// of their values dead are rewritten to give the space back.
	o.Experimental.ValueSeparationPolicy = func() pdb.ValueSeparationPolicy {
		return pdb.ValueSeparationPolicy{Enabled: true, MinimumSize: 1024, MaxBlobReferenceDepth: 10,
			RewriteMinimumAge: time.Minute, TargetGarbageRatio: 0.2}
	}
	// A flush writes its blob files, and its sstables, in blocks of this
	// size (Pebble takes a blob file's block size from the level's
	// options). At the default 4 KiB each file data value is a block of
	// its own, with a compression, a checksum and a hand-over to the
	// writing goroutine each; 64 KiB blocks wrote 512 MiB of file data
	// 1.5 times as fast (BenchmarkSeqWrite512MiB). Compactions write the
	// sstables again in the lower levels' 4 KiB blocks; a read of one
	// value of a blob file reads its 64 KiB block.
	o.Levels[0].BlockSize = 64 << 10
	db, err := pdb.Open(dir, o)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: open pebble %s: %w", dir, err), lock.Close())
	}
	s := &pebbleStore{db: db, lock: lock, writer: make(chan struct{}, 1)}
	return s, nil
}

// MkdirAllSynced creates dir and any missing parents, and makes each new
// entry durable by syncing the directory that holds it: otherwise a power
// loss soon after the first start could take the whole store with it,
// however carefully its own files were synced.
func MkdirAllSynced(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	parent := fs.PathDir(dir)
	if parent != dir {
		if err := MkdirAllSynced(fs, parent); err != nil {
			return err
		}
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d, err := fs.OpenDir(parent)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// quietLogger drops Pebble's routine messages (WAL replay, opening) and
// keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(format string, args ...any)  {}
func (quietLogger) Errorf(format string, args ...any) { pdb.DefaultLogger.Errorf(format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { pdb.DefaultLogger.Fatalf(format, args...) }

// View implements Store. It does not take the writer slot. Its reads go
// through one Pebble iterator, created at the first read, that pins the
// database state (sequence number, memtables, sstables) of that moment; scans
// use clones of it, which see exactly the same state. This is cheaper than a
// pebble.Snapshot, whose Close takes the database mutex and reconsiders
// compactions on every call.
func (s *pebbleStore) View(ctx context.Context, fn func(r kv.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := viewReaderPool.Get().(*viewReader)
	r.db = s.db
	defer func() {
		if r.root != nil {
			r.root.Close()
		}
		*r = viewReader{}
		viewReaderPool.Put(r)
	}()
	return fn(r)
}

// Update implements Store. It holds the writer slot while fn runs and the
// batch commits, so transactions are serialized.
func (s *pebbleStore) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return s.UpdateSized(ctx, 0, fn)
}

// UpdateSized implements Store.
func (s *pebbleStore) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	if err := s.takeWriter(ctx); err != nil {
		return err
	}
	defer func() { <-s.writer }()
	if err := ctx.Err(); err != nil {
		return err
	}

	var b *pdb.Batch
	if size > 0 {
		b = s.db.NewIndexedBatchWithSize(size)
	} else {
		b = s.db.NewIndexedBatch()
	}
	defer b.Close() // discards the batch if it was not committed
	tx := batchTxn{b: b}
	if err := fn(&tx); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	// The keys the last commit set provisionally go with this one, unless
	// it sets them again.
	for _, k := range s.provisional {
		if !hasKey(tx.provisional, k) {
			if err := b.Delete(k, nil); err != nil {
				return fmt.Errorf("kv: commit: %w", err)
			}
		}
	}
	// NoSync: the commit is in the WAL's buffer and visible at once; Sync
	// makes it durable. (Pebble's log writer stamps each chunk with the
	// offset its last Sync made durable, and recovery after a power loss
	// relies on that stamp: a Sync that does not reach the disk, to get
	// commits written out sooner, would turn a torn tail into "corruption"
	// that stops the store from opening.)
	// The keys this commit sets provisionally are published before it
	// is visible: a Sync that sees the commit must settle them. Should
	// the commit fail, the earlier ones are still there too (a settle
	// of keys that are not there deletes nothing).
	earlier := s.provisional
	s.provisional = tx.provisional
	s.nProvisional.Store(int32(len(tx.provisional)))
	if err := b.Commit(pdb.NoSync); err != nil {
		s.provisional = append(earlier, tx.provisional...)
		s.nProvisional.Store(int32(len(s.provisional)))
		return fmt.Errorf("kv: commit: %w", err)
	}
	return nil
}

// takeWriter waits for the writer slot, or for ctx to end; the caller
// gives the slot back with <-s.writer.
func (s *pebbleStore) takeWriter(ctx context.Context) error {
	select {
	case s.writer <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hasKey reports whether keys holds k.
func hasKey(keys [][]byte, k []byte) bool {
	return slices.ContainsFunc(keys, func(p []byte) bool { return bytes.Equal(p, k) })
}

// settle commits the deletion of the provisional keys of the last commit,
// if there are any, so that no Sync makes them durable.
func (s *pebbleStore) settle(ctx context.Context) error {
	if s.nProvisional.Load() == 0 {
		return nil
	}
	if err := s.takeWriter(ctx); err != nil {
		return err
	}
	defer func() { <-s.writer }()
	if len(s.provisional) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range s.provisional {
		if err := b.Delete(k, nil); err != nil {
			return fmt.Errorf("kv: settle: %w", err)
		}
	}
	if err := b.Commit(pdb.NoSync); err != nil {
		return fmt.Errorf("kv: settle: %w", err)
	}
	s.provisional = nil
	s.nProvisional.Store(0)
	return nil
}

// Sync implements Store. It writes an empty LogData record to the WAL with
// pebble.Sync. The WAL is one append-only file (per memtable); syncing it up
// to this record fsyncs every record before it, that is every batch committed
// earlier with NoSync. WAL files rotated out before this call were synced
// when they were closed. Sync does not take the writer slot, but to delete
// the last commit's provisional keys first (settle): commits that race with
// it may or may not be covered, commits that returned before it are.
func (s *pebbleStore) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.settle(ctx); err != nil {
		return err
	}
	if err := s.db.LogData(nil, pdb.Sync); err != nil {
		return fmt.Errorf("kv: sync: %w", err)
	}
	return nil
}

// Close implements Store. It flushes nothing to sstables; unsynced commits
// are written to the WAL (Pebble syncs the WAL when it closes it), after
// the deletion of the last commit's provisional keys.
func (s *pebbleStore) Close() error {
	err := s.settle(context.Background())
	err = errors.Join(err, s.db.Close())
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("kv: close: %w", err)
	}
	return nil
}

// Snapshot implements kv.Store with a pebble.Snapshot, which is safe for
// concurrent use.
func (s *pebbleStore) Snapshot(ctx context.Context) (kv.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &snapshotReader{snap: s.db.NewSnapshot()}, nil
}

type snapshotReader struct {
	snap *pdb.Snapshot
}

func (r *snapshotReader) Get(key []byte) ([]byte, error) {
	v, closer, err := r.snap.Get(key)
	return copyValue(v, closer, err)
}

func (r *snapshotReader) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	it, err := r.snap.NewIter(&pdb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("kv: scan: %w", err)
	}
	return scan(it, fn)
}

func (r *snapshotReader) Close() error { return r.snap.Close() }

// Prefetch implements kv.Reader: Pebble's reads are local, so it reads
// nothing ahead (nor does batchTxn's).
func (r *snapshotReader) Prefetch(...[]byte) error { return nil }
func (t *batchTxn) Prefetch(...[]byte) error       { return nil }

func (r *snapshotReader) PrefetchRef([]byte, []byte, int, ...[]byte) error { return nil }
func (t *batchTxn) PrefetchRef([]byte, []byte, int, ...[]byte) error       { return nil }
func (r *viewReader) PrefetchRef([]byte, []byte, int, ...[]byte) error     { return r.Prefetch() }

// Prefetch implements kv.Reader. It reads nothing ahead, but it is a read:
// the View's state is fixed from here, as by a Get.
func (r *viewReader) Prefetch(...[]byte) error {
	if _, err := r.state(); err != nil {
		return fmt.Errorf("kv: get: %w", err)
	}
	return nil
}

// viewReader is the kv.Reader a View hands to fn. It is pooled: View is on
// the path of every lookup and getattr.
type viewReader struct {
	db   *pdb.DB
	root *pdb.Iterator // nil until the first read; unbounded
}

var viewReaderPool = sync.Pool{New: func() any { return new(viewReader) }}

// state returns the iterator that fixes the state this View reads.
func (r *viewReader) state() (*pdb.Iterator, error) {
	if r.root == nil {
		it, err := r.db.NewIter(nil)
		if err != nil {
			return nil, err
		}
		r.root = it
	}
	return r.root, nil
}

func (r *viewReader) Get(key []byte) ([]byte, error) {
	it, err := r.state()
	if err != nil {
		return nil, fmt.Errorf("kv: get: %w", err)
	}
	// With the default comparer a key's prefix is the whole key, so this is
	// a point lookup that consults bloom filters.
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("kv: get: %w", err)
		}
		return nil, kv.ErrNotFound
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, fmt.Errorf("kv: get: %w", err)
	}
	out := make([]byte, len(v))
	copy(out, v)
	return out, nil
}

func (r *viewReader) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	root, err := r.state()
	if err != nil {
		return fmt.Errorf("kv: scan: %w", err)
	}
	it, err := root.Clone(pdb.CloneOptions{
		IterOptions: &pdb.IterOptions{LowerBound: lower, UpperBound: upper},
	})
	if err != nil {
		return fmt.Errorf("kv: scan: %w", err)
	}
	return scan(it, fn)
}

// batchTxn is the kv.Txn an Update hands to fn.
type batchTxn struct {
	b           *pdb.Batch
	provisional [][]byte // keys set with SetProvisional
}

var _ kv.ProvisionalTxn = (*batchTxn)(nil)

// SetProvisional implements kv.ProvisionalTxn.
func (t *batchTxn) SetProvisional(key, value []byte) error {
	if err := t.Set(key, value); err != nil {
		return err
	}
	if !hasKey(t.provisional, key) {
		t.provisional = append(t.provisional, bytes.Clone(key))
	}
	return nil
}

func (t *batchTxn) Get(key []byte) ([]byte, error) {
	v, closer, err := t.b.Get(key)
	return copyValue(v, closer, err)
}

func (t *batchTxn) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	it, err := t.b.NewIter(&pdb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("kv: scan: %w", err)
	}
	return scan(it, fn)
}

func (t *batchTxn) Set(key, value []byte) error {
	if err := t.b.Set(key, value, nil); err != nil {
		return fmt.Errorf("kv: set: %w", err)
	}
	return nil
}

func (t *batchTxn) SetWith(key []byte, n int, fill func(value []byte)) error {
	op := t.b.SetDeferred(len(key), n)
	copy(op.Key, key)
	fill(op.Value)
	if err := op.Finish(); err != nil {
		return fmt.Errorf("kv: set: %w", err)
	}
	return nil
}

func (t *batchTxn) Delete(key []byte) error {
	if err := t.b.Delete(key, nil); err != nil {
		return fmt.Errorf("kv: delete: %w", err)
	}
	return nil
}

func (t *batchTxn) DeleteRange(lower, upper []byte) error {
	if upper == nil {
		return errors.New("kv: delete range: upper bound required")
	}
	if err := t.b.DeleteRange(lower, upper, nil); err != nil {
		return fmt.Errorf("kv: delete range: %w", err)
	}
	return nil
}

// copyValue turns the result of a Pebble Get into a value the caller owns.
func copyValue(v []byte, closer interface{ Close() error }, err error) ([]byte, error) {
	if err != nil {
		if errors.Is(err, pdb.ErrNotFound) {
			return nil, kv.ErrNotFound
		}
		return nil, fmt.Errorf("kv: get: %w", err)
	}
	out := make([]byte, len(v))
	copy(out, v)
	return out, closer.Close()
}

// scan walks it from the first key to the end or until fn returns false,
// then closes it.
func scan(it *pdb.Iterator, fn func(k, v []byte) bool) (err error) {
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("kv: scan: %w", cerr)
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		v, verr := it.ValueAndErr()
		if verr != nil {
			return fmt.Errorf("kv: scan: %w", verr)
		}
		if !fn(it.Key(), v) {
			return nil
		}
	}
	return nil
}
