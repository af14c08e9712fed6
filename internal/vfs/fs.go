package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/locks"
	"bucketfs/internal/meta"
	"bucketfs/internal/tier"
)

// Attr is the attribute view of an inode that front ends read.
type Attr = meta.Inode

// Ino is an inode number.
type Ino = meta.Ino

// Cred is the identity a request runs as.
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32 // supplementary groups, when the front end knows them
}

// Root is the superuser credential.
var Root = Cred{}

// Lister brings bucket-side state into meta (package sync's Importer).
type Lister interface {
	// EnsureListed returns once every child of dir is in meta.
	EnsureListed(ctx context.Context, dir *meta.Inode) error
	// LookupOne imports the child name of the not yet listed dir from the
	// bucket, or fails with ENOENT when the bucket has none.
	LookupOne(ctx context.Context, dir *meta.Inode, name string) error
	// Used notes that dir was looked into, so its listing is kept fresh.
	Used(dir Ino)
	// Fresh reports whether dir's listing was read by this process, so
	// that a name missing from it is missing from the bucket too. A
	// listed directory that is not fresh (after a start) is listed again
	// by EnsureListed.
	Fresh(dir Ino) bool
	// Made notes a directory the file side just made (fresh from birth).
	Made(dir Ino)
	// Refresh lists a stale directory again in the background.
	Refresh(ctx context.Context, dir *meta.Inode)
	// RevalidateIfStale compares a clean file with the bucket when it was
	// last compared more than ttl ago, importing a newer version.
	RevalidateIfStale(ctx context.Context, in *meta.Inode, ttl time.Duration) error
}

// Config tunes an FS.
type Config struct {
	// ImportThreshold: files smaller than this are fetched whole into the
	// tier on first open.
	ImportThreshold int64
	// DirectReadSize: files at least this large are streamed from the
	// bucket with read-ahead.
	DirectReadSize int64
	// ReadAhead tunes the streaming reader.
	ReadAheadChunk  int64
	ReadAheadWindow int
	// RevalidateTTL: opening a file whose attributes were compared with
	// the bucket longer ago than this compares them again (0: never).
	RevalidateTTL time.Duration
	// TierLimits bound what writes and fills add to the tier.
	TierLimits meta.Limits
	// StateDir is where the tier lives; writes fail with ENOSPC while its
	// disk has less than DiskReserve bytes free ("" : not checked).
	StateDir    string
	DiskReserve int64
	// ReadOnly refuses every change with EROFS (see writable).
	ReadOnly bool
	Logger   *slog.Logger

	// Liveness, when set, says this server shares its store with other
	// servers of the file system, and which of them are alive: locks and
	// opens then hold across servers (shared.go). nil: this server is
	// alone, and keeps its locks and opens in memory only.
	Liveness Liveness
	// SharedLockRetry is how often a lock wait blocked by another server's
	// lock asks again (0: DefaultSharedLockRetry).
	SharedLockRetry time.Duration
}

// FS is one mounted file system. It is safe for concurrent use.
type FS struct {
	meta   *meta.Store
	used   tier.Recency
	bucket *bucket.Client
	lister Lister
	cfg    Config
	log    *slog.Logger
	locks  locks.Table
	shared *sharedLocks // the locks.Table's Peers; nil when alone

	sharedOpens sharedOpens // orders the writes of open records (shared.go)

	mu    sync.Mutex
	opens map[Ino]int       // open handles per inode
	refs  map[Ino]frontRefs // front-end references per inode (refs.go)

	inv      invalidators
	counters counters
	disk     diskCheck
	holds    writeHolds    // new writes held for a flush (write.go)
	chains   atomic.Uint64 // the last Handle.chain given out
}

// New assembles an FS.
func New(m *meta.Store, b *bucket.Client, l Lister, cfg Config) *FS {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fs := &FS{meta: m, bucket: b, lister: l, cfg: cfg, log: cfg.Logger, opens: map[Ino]int{}}
	fs.enableSharing()
	return fs
}

// LastUse returns when ino's data was last read or written (unix ns; 0 if
// not since this start), for eviction.
func (fs *FS) LastUse(ino Ino) int64 { return fs.used.LastUse(uint64(ino)) }

// Meta returns the namespace store.
func (fs *FS) Meta() *meta.Store { return fs.meta }

// IsOpen reports whether any handle holds ino open, on this server or,
// with Config.Liveness, on another live one. The exporter keeps an
// unlinked inode's data while it is open.
func (fs *FS) IsOpen(ino Ino) bool {
	fs.mu.Lock()
	open := fs.opens[ino] > 0
	fs.mu.Unlock()
	return open || fs.openElsewhere(ino)
}

func (fs *FS) now() int64 { return time.Now().UnixNano() }

// Errno maps an error from any layer to the errno a front end returns.
// Store and network errors come first: an operation that needed a store it
// could not reach is EIO whatever errno the socket gave (ECONNRESET,
// ECONNREFUSED, EPIPE are the network's, not the caller's).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var (
		e      syscall.Errno
		netErr *net.OpError // not net.Error: every syscall.Errno is one
	)
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return syscall.EIO // the object behind a known inode vanished
	case errors.Is(err, bucket.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return syscall.EIO
	case errors.As(err, &netErr):
		return syscall.EIO
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, os.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, io.ErrUnexpectedEOF):
		return syscall.EIO
	}
	return syscall.EIO
}

// GetAttr returns the attributes of ino.
func (fs *FS) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	fs.counters.metaOps.Add(1)
	return fs.meta.Get(ctx, ino)
}

// AttrsOf returns the attributes of the inodes of a listing's entries, by
// number, read together (one round trip on PostgreSQL): a listing with
// attributes. An inode removed since the listing was read is missing.
func (fs *FS) AttrsOf(ctx context.Context, ents []DirEntry) (map[Ino]Attr, error) {
	fs.counters.metaOps.Add(1)
	inos := make([]Ino, len(ents))
	for i, e := range ents {
		inos[i] = e.Ino
	}
	got, err := fs.meta.GetMany(ctx, inos)
	if err != nil {
		return nil, err
	}
	out := make(map[Ino]Attr, len(got))
	for _, a := range got {
		out[a.Ino] = a
	}
	return out, nil
}

// Lookup finds name in directory parent, importing the directory's listing
// from the bucket on first access.
func (fs *FS) Lookup(ctx context.Context, c Cred, parent Ino, name string) (Attr, error) {
	fs.counters.metaOps.Add(1)
	if name == "." || name == ".." || len(name) > maxNameLen {
		p, err := fs.searchDir(ctx, c, parent, mayExec, false)
		switch {
		case err != nil:
			return Attr{}, err
		case name == ".":
			return p, nil
		case name == "..":
			return fs.parentOf(ctx, p)
		}
		// No such name can exist: say so as a local file system does
		// (the kernel passes FUSE names up to 1024 bytes).
		return Attr{}, syscall.ENAMETOOLONG
	}
	// The directory and the name in one read; the directory is checked
	// before the name's answer counts.
	p, in, err := fs.meta.LookupIn(ctx, parent, name)
	if p.Ino == 0 {
		return Attr{}, err
	}
	if _, err := fs.searchRead(ctx, c, p, mayExec, false); err != nil {
		return Attr{}, err
	}
	if err == nil || fs.lister == nil || !errors.Is(err, syscall.ENOENT) || !fs.needsListing(&p) {
		return in, err
	}
	// A name in a directory not listed yet is looked for in the bucket
	// alone: finding one file must not wait for a listing of thousands.
	// A stale directory (listed before a restart) is listed again in the
	// background meanwhile; until then a miss in it asks the bucket, and
	// if the bucket cannot answer, the names it had stand.
	if err := validName(name); err != nil {
		return Attr{}, syscall.ENOENT
	}
	stale := p.Has(meta.Listed)
	if stale {
		fs.lister.Refresh(ctx, &p)
	}
	if err := fs.lister.LookupOne(ctx, &p, name); err != nil {
		if stale && !errors.Is(err, syscall.ENOENT) {
			return Attr{}, syscall.ENOENT
		}
		return Attr{}, err
	}
	return fs.meta.Lookup(ctx, parent, name)
}

func (fs *FS) parentOf(ctx context.Context, dir Attr) (Attr, error) {
	if dir.Ino == meta.RootIno {
		return dir, nil
	}
	ls, err := fs.meta.Links(ctx, dir.Ino)
	if err != nil {
		return Attr{}, err
	}
	if len(ls) == 0 {
		return Attr{}, syscall.ENOENT
	}
	return fs.meta.Get(ctx, ls[0].Parent)
}

// Within reports whether ino is dir or lies below it through any of its
// names, for front ends that confine a client to a subtree (access
// points). An inode without a name is within nothing but itself.
func (fs *FS) Within(ctx context.Context, ino, dir Ino) (bool, error) {
	return fs.meta.Within(ctx, ino, dir)
}

// dir loads directory ino, checks the caller has mask on it, and makes sure
// its children are imported.
func (fs *FS) dir(ctx context.Context, c Cred, ino Ino, mask uint32) (Attr, error) {
	return fs.searchDir(ctx, c, ino, mask, true)
}

// searchDir is dir, importing the children only when list is set.
func (fs *FS) searchDir(ctx context.Context, c Cred, ino Ino, mask uint32, list bool) (Attr, error) {
	d, err := fs.meta.Get(ctx, ino)
	if err != nil {
		return Attr{}, err
	}
	return fs.searchRead(ctx, c, d, mask, list)
}

// searchRead is searchDir on the directory d, read already.
func (fs *FS) searchRead(ctx context.Context, c Cred, d Attr, mask uint32, list bool) (Attr, error) {
	ino := d.Ino
	if !d.IsDir() {
		return Attr{}, fmt.Errorf("inode %d: %w", ino, syscall.ENOTDIR)
	}
	if err := access(c, &d, mask); err != nil {
		return Attr{}, err
	}
	if fs.lister == nil {
		return d, nil
	}
	if list && fs.needsListing(&d) {
		if err := fs.lister.EnsureListed(ctx, &d); err != nil {
			return Attr{}, fmt.Errorf("list directory %d: %w", ino, err)
		}
	}
	fs.lister.Used(ino)
	return d, nil
}

// needsListing reports whether dir's children must be read from the
// bucket before the namespace can answer for them: never listed, or listed
// before this process started (see Lister.Fresh).
// Directories kept out of the bucket (lost+found) never need it.
func (fs *FS) needsListing(dir *meta.Inode) bool {
	if fs.lister == nil || dir.Has(meta.NoExport) {
		return false
	}
	return !dir.Has(meta.Listed) || !fs.lister.Fresh(dir.Ino)
}

// Access checks mask (R_OK=4, W_OK=2, X_OK=1) for c on ino.
func (fs *FS) Access(ctx context.Context, c Cred, ino Ino, mask uint32) error {
	if mask&mayWrite != 0 {
		if err := fs.writable(); err != nil {
			return err
		}
	}
	in, err := fs.meta.Get(ctx, ino)
	if err != nil {
		return err
	}
	return access(c, &in, mask)
}

// StatFS describes the file system's capacity: effectively unbounded, as
// the bucket is.
type StatFS struct {
	Bsize               uint32
	Blocks, Bfree       uint64
	Files, Ffree        uint64
	NameLen             uint32
	TierUsed, TierLimit int64
}

// StatFs reports a size of 8 EiB, as S3 Files does: the bucket has no
// fixed capacity.
func (fs *FS) StatFs(ctx context.Context) StatFS {
	const bsize = 4096
	blocks := uint64(1<<63) / bsize
	u, _ := fs.meta.Usage(ctx)
	used := uint64(u.Total) / bsize
	return StatFS{Bsize: bsize, Blocks: blocks, Bfree: blocks - used,
		Files: 1 << 40, Ffree: 1<<40 - 1, NameLen: 255, TierUsed: u.Total, TierLimit: fs.cfg.TierLimits.Total}
}
