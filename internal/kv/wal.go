package kv

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the write category Pebble gives its write-ahead log files
// when it creates or recycles them.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// walFS wraps the file system under a Pebble store so that the store can
// keep two promises with one log:
//
//   - Every commit that returned survives a kill of the process. Pebble
//     copies a committed record into its log writer's memory and writes it
//     to the file from a background loop; a NoSync commit returns before
//     that write, and while the loop is in a slow fsync the write can lag
//     by a hundred milliseconds. So commits use pebble.Sync, which returns
//     once the loop has written the record and called Sync. On a log file
//     of walFS that Sync only notes that the bytes reached the operating
//     system: it costs a write(2), not a disk flush, and the loop never
//     stalls behind the disk.
//   - Store.Sync makes every earlier commit durable: after a pebble.Sync
//     record is through the loop (so every earlier record is in the file),
//     it fsyncs every open log file with bytes not yet flushed
//     ([walFS.flush]).
//
// A log file is fsynced for real when Pebble closes it (at a memtable
// rotation, before the next log is written), so a log other than the
// newest is always wholly durable, as Pebble's recovery expects; only the
// newest can end in a torn record, which recovery stops at.
type walFS struct {
	vfs.FS
	mu   sync.Mutex
	open map[*walFile]struct{}
}

func newWALFS(fs vfs.FS) *walFS {
	return &walFS{FS: fs, open: make(map[*walFile]struct{})}
}

// Unwrap implements vfs.FS.
func (fs *walFS) Unwrap() vfs.FS { return fs.FS }

func (fs *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(f, category, err)
}

func (fs *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(f, category, err)
}

func (fs *walFS) wrap(f vfs.File, category vfs.DiskWriteCategory, err error) (vfs.File, error) {
	if err != nil || category != walCategory {
		return f, err
	}
	w := &walFile{File: f, fs: fs}
	fs.mu.Lock()
	fs.open[w] = struct{}{}
	fs.mu.Unlock()
	return w, nil
}

// flush fsyncs every open log file that has bytes written since its last
// fsync. Callers first push a pebble.Sync record through the log, so that
// every record committed before they were called is in some file.
func (fs *walFS) flush() error {
	fs.mu.Lock()
	files := make([]*walFile, 0, len(fs.open))
	for f := range fs.open {
		files = append(files, f)
	}
	fs.mu.Unlock()
	var errs []error
	for _, f := range files {
		errs = append(errs, f.flush())
	}
	return errors.Join(errs...)
}

// walFile is one write-ahead log file. Writes count the bytes handed to the
// operating system; Sync, SyncData and SyncTo only return (see walFS);
// flush and Close fsync.
type walFile struct {
	vfs.File
	fs      *walFS
	written atomic.Int64 // bytes written so far
	syncMu  sync.Mutex   // one fsync at a time; later callers find it done
	synced  int64        // written as of the start of the last fsync; under syncMu
	closed  bool         // under syncMu
}

func (f *walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.written.Add(int64(n))
	return n, err
}

func (f *walFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.written.Add(int64(n))
	return n, err
}

func (f *walFile) Sync() error                       { return nil }
func (f *walFile) SyncData() error                   { return nil }
func (f *walFile) SyncTo(length int64) (bool, error) { return false, nil }

// flush fsyncs the file if bytes were written since the last fsync began.
func (f *walFile) flush() error {
	target := f.written.Load()
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	if f.closed || f.synced >= target {
		return nil
	}
	now := f.written.Load()
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.synced = now
	return nil
}

func (f *walFile) Close() error {
	err := f.flush()
	f.syncMu.Lock()
	f.closed = true
	f.syncMu.Unlock()
	f.fs.mu.Lock()
	delete(f.fs.open, f)
	f.fs.mu.Unlock()
	return errors.Join(err, f.File.Close())
}
