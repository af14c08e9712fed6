package vfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/readahead"
	"bucketfs/internal/tier"
)

// Handle is one open of a regular file: the per-open state (access mode,
// the object version reads are pinned to, the read-ahead stream). What all
// opens share lives in meta and the tier.
type Handle struct {
	fs       *FS
	ino      Ino
	flags    uint32
	readable bool
	writable bool
	// pinned is the object version the inode's non-local bytes came from
	// when this handle was opened, and replacedAt the inode's Replaced
	// count then. Reads take what the tier lacks from the file's current
	// base object, which the exporter moves to each version it uploads
	// (the same bytes where the tier lacks them); but once an import has
	// replaced the file's content with another version, this handle keeps
	// reading the version it opened, whole, as an open of a file replaced
	// by a rename keeps the old file.
	pinned     meta.Object
	replacedAt uint64

	// replaced: the open imported a new version of the file.
	replaced bool

	mu      sync.Mutex
	ra      *readahead.Reader // streams raObj; made on the first direct read
	raObj   meta.Object
	retired []*readahead.Reader // readers of earlier bases, closed at Release
	// pieceEnd is where the last write through this handle ended if it
	// looked like a piece of a larger write(2) with more to come
	// (meta.Continues), else -1. Under mu.
	pieceEnd int64
	// pieceChained: that piece was a head that set its marker
	// (meta.Piece.Head), so that the next piece may end the write
	// without a sync. Under mu.
	pieceChained bool
	// chain names this handle's chains of pieces to the store
	// (meta.WritePiece): unique among the handles of the FS.
	chain uint64
}

// Ino returns the inode the handle is open on.
func (h *Handle) Ino() Ino { return h.ino }

// Open opens ino with open(2) flags, checking permissions. With
// ClearSetID among the flags, an O_TRUNC clears the file's set-id bits as
// a truncate by c does (setid.go).
func (fs *FS) Open(ctx context.Context, c Cred, ino Ino, flags uint32) (*Handle, error) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		if err := fs.writable(); err != nil {
			return nil, err
		}
	}
	in, err := fs.meta.Get(ctx, ino)
	if err != nil {
		return nil, err
	}
	if in.IsDir() {
		if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			return nil, syscall.EISDIR
		}
	}
	if err := access(c, &in, openMask(flags)); err != nil {
		return nil, err
	}
	if in.IsRegular() && in.Nlink > 0 && fs.lister != nil && fs.cfg.RevalidateTTL > 0 {
		// Close-to-open consistency with the bucket: a clean file whose
		// object may have changed is compared before it is opened. A file
		// already unlinked on the file side (the kernel may open one it
		// looked up just before a rename replaced it) has no object to
		// compare.
		keys, before := len(in.Keys), in.Base
		if err := fs.lister.RevalidateIfStale(ctx, &in, fs.cfg.RevalidateTTL); err != nil {
			if !errors.Is(err, bucket.ErrUnavailable) {
				return nil, err
			}
			// The store is away: open what the file side has. Reading
			// data the tier lacks fails on its own.
			fs.log.Debug("open without revalidation: the store is unavailable", "ino", ino, "err", err)
		}
		if in, err = fs.meta.Get(ctx, ino); err != nil {
			return nil, err
		}
		// The bucket deleted it if it lost its names with its objects; a
		// file-side unlink or rename meanwhile leaves the objects to the
		// exporter, and the open goes ahead as it would on a local disk.
		if in.Nlink == 0 && len(in.Keys) < keys {
			return nil, fmt.Errorf("inode %d was deleted in the bucket: %w", ino, syscall.ENOENT)
		}
		if in.Base != before {
			h, err := fs.open(ctx, c, &in, flags)
			if h != nil {
				h.replaced = true
			}
			return h, err
		}
	}
	return fs.open(ctx, c, &in, flags)
}

// KeepCache reports whether what a client cached of the file's data before
// this open is still good: false when the open found a new version in the
// bucket. Writes through the same front end keep the client's cache right;
// versions imported at other times invalidate it (see Invalidator).
func (h *Handle) KeepCache() bool { return !h.replaced }

// Create makes a regular file and opens it. With exclusive, an existing
// name fails with EEXIST; otherwise an existing file is opened (and
// truncated with O_TRUNC) as open(2) with O_CREAT does.
//
// The existing file may turn out, as it is opened, to have been deleted in
// the bucket (its open revalidates it): then the name is free again and the
// create starts over, as open(O_CREAT) never fails with ENOENT on a local
// disk.
func (fs *FS) Create(ctx context.Context, c Cred, parent Ino, name string, mode, flags uint32) (Attr, *Handle, error) {
	if fs.ReadOnly() {
		return fs.createReadOnly(ctx, c, parent, name, flags)
	}
	for attempt := 0; ; attempt++ {
		a, h, err := fs.create1(ctx, c, parent, name, mode, flags)
		if !errors.Is(err, errDeletedMeanwhile) {
			return a, h, err
		}
		if attempt == 3 {
			return Attr{}, nil, syscall.ENOENT
		}
	}
}

// errDeletedMeanwhile marks a create whose existing file was deleted in the
// bucket while it was opened.
var errDeletedMeanwhile = errors.New("deleted in the bucket while opened")

func (fs *FS) create1(ctx context.Context, c Cred, parent Ino, name string, mode, flags uint32) (Attr, *Handle, error) {
	openExisting := func(in Attr) (Attr, *Handle, error) {
		if in.IsDir() {
			return Attr{}, nil, syscall.EISDIR
		}
		h, err := fs.Open(ctx, c, in.Ino, flags)
		if errors.Is(err, syscall.ENOENT) {
			return Attr{}, nil, errDeletedMeanwhile
		}
		if err != nil {
			return Attr{}, nil, err
		}
		in, err = fs.meta.Get(ctx, in.Ino)
		return in, h, err
	}
	// taken opens the file a create found at the name (EEXIST).
	taken := func() (Attr, *Handle, error) {
		in, err := fs.meta.Lookup(ctx, parent, name)
		if err != nil {
			return Attr{}, nil, err
		}
		return openExisting(in)
	}
	// A directory whose names the namespace knows fully, and where c may
	// create, goes straight to the create transaction, which finds an
	// existing name itself (EEXIST, opened below). Otherwise the name is
	// looked up first: in a directory not listed (or listed before this
	// start) only the bucket knows whether it exists, and opening an
	// existing file needs only search permission on the directory, not
	// write permission.
	//
	// The first try checks the directory inside the create transaction
	// itself (createFast): one transaction, which also writes the open
	// record of a shared server. It gives way to the steps below where
	// the directory is not such a one.
	tmpl := meta.Inode{Mode: syscall.S_IFREG | mode&0o7777}
	if in, epoch, err := fs.createFast(ctx, c, parent, name, tmpl, flags); !errors.Is(err, errSlowPath) {
		if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
			return taken()
		}
		if err != nil {
			return Attr{}, nil, err
		}
		if testHookCreated != nil {
			testHookCreated(fs, in.Ino)
		}
		h, err := fs.openCreated(ctx, c, &in, flags&^syscall.O_TRUNC, epoch)
		return in, h, err
	}
	d, err := fs.searchDir(ctx, c, parent, mayExec, false)
	if err != nil {
		return Attr{}, nil, err
	}
	listed := !fs.needsListing(&d)
	if flags&syscall.O_EXCL == 0 && (!listed || access(c, &d, mayWrite) != nil) {
		if in, err := fs.Lookup(ctx, c, parent, name); err == nil {
			return openExisting(in)
		}
	}
	var in Attr
	if listed {
		if err = validName(name); err == nil {
			fs.counters.metaOps.Add(1)
			in, err = fs.createListed(ctx, c, parent, name, tmpl)
		}
	} else {
		in, err = fs.create(ctx, c, parent, name, tmpl)
	}
	if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
		return taken()
	}
	if err != nil {
		return Attr{}, nil, err
	}
	// The creator may write the file it made whatever mode it gave it.
	h, err := fs.open(ctx, c, &in, flags&^syscall.O_TRUNC)
	return in, h, err
}

// testHookCreated, set by tests, runs between createFast and the open of
// the file it made.
var testHookCreated func(fs *FS, ino Ino)

// errSlowPath is createFast's answer where the directory needs the
// careful steps of create1.
var errSlowPath = errors.New("not a create in one transaction")

// createFast makes the file parent/name in one transaction that checks the
// directory too: that it is one, c may search and write it, and its names
// are all known (listed, and fresh). Otherwise it fails with errSlowPath
// (O_EXCL in a directory c may not write: the error itself). On a shared
// server the transaction writes the new file's open record as well, and
// epoch is sharedOpens.epoch from before it, for openCreated.
func (fs *FS) createFast(ctx context.Context, c Cred, parent Ino, name string, tmpl meta.Inode, flags uint32) (in Attr, epoch uint64, err error) {
	if err := fs.writable(); err != nil {
		return Attr{}, 0, errSlowPath
	}
	if validName(name) != nil {
		return Attr{}, 0, errSlowPath
	}
	tmpl.Uid, tmpl.Gid = c.Uid, c.Gid
	create := mayCreate(c)
	check := func(p, child *meta.Inode) error {
		if !p.IsDir() || access(c, p, mayExec) != nil || fs.needsListing(p) {
			return errSlowPath
		}
		if err := access(c, p, mayWrite); err != nil && flags&syscall.O_EXCL == 0 {
			return errSlowPath // an existing file may still be opened
		}
		return create(p, child)
	}
	fs.counters.metaOps.Add(1)
	if fs.cfg.Liveness == nil {
		in, err = fs.meta.Create(ctx, parent, name, tmpl, check)
	} else {
		epoch = fs.sharedOpens.epoch.Load()
		in, err = fs.meta.CreateOpen(ctx, parent, name, tmpl, check, fs.cfg.Liveness.Self())
	}
	if fs.lister != nil && !errors.Is(err, errSlowPath) {
		fs.lister.Used(parent)
	}
	if err != nil {
		return Attr{}, 0, err
	}
	return in, epoch, nil
}

// openCreated opens the file createFast made. Its open record, written
// with the file, stands unless a batch of last closes ran since (epoch):
// one may have deleted it, if another open of the new file came and went
// in between; then the record is written again.
func (fs *FS) openCreated(ctx context.Context, c Cred, in *meta.Inode, flags uint32, epoch uint64) (*Handle, error) {
	return fs.open1(ctx, c, in, flags, fs.cfg.Liveness != nil, epoch)
}

func (fs *FS) open(ctx context.Context, c Cred, in *meta.Inode, flags uint32) (*Handle, error) {
	return fs.open1(ctx, c, in, flags, false, 0)
}

// open1 is open; recorded says the inode's open record was written before
// sharedOpens.epoch was epoch (openCreated).
func (fs *FS) open1(ctx context.Context, c Cred, in *meta.Inode, flags uint32, recorded bool, epoch uint64) (*Handle, error) {
	acc := flags & syscall.O_ACCMODE
	h := &Handle{fs: fs, ino: in.Ino, flags: flags, pinned: in.Base, replacedAt: in.Replaced, pieceEnd: -1,
		chain:    fs.chains.Add(1),
		readable: acc == syscall.O_RDONLY || acc == syscall.O_RDWR,
		writable: acc == syscall.O_WRONLY || acc == syscall.O_RDWR}
	// Counted open from the start, so eviction leaves the tier state alone
	// while the open prepares it.
	fs.mu.Lock()
	fs.opens[in.Ino]++
	first := fs.opens[in.Ino] == 1
	fs.mu.Unlock()
	// A batch of last closes bumps the epoch before it looks at the
	// count this open has raised: one that did not see the raise shows
	// here as a new epoch.
	if first && fs.cfg.Liveness != nil && !(recorded && fs.sharedOpens.epoch.Load() == epoch) {
		// Recorded before the open returns, so that no other server
		// reclaims the file while this handle may read it.
		if err := fs.recordOpen(ctx, in.Ino); err != nil {
			h.Release(ctx)
			return nil, err
		}
	}
	if in.IsRegular() {
		if err := fs.prepare(ctx, c, in, h); err != nil {
			h.Release(ctx)
			return nil, err
		}
	}
	return h, nil
}

// prepare readies a new handle of a regular file opened by c: truncated
// for O_TRUNC (set-id bits cleared too with ClearSetID), and a small
// imported file copied into the tier.
func (fs *FS) prepare(ctx context.Context, c Cred, in *meta.Inode, h *Handle) error {
	if h.flags&syscall.O_TRUNC != 0 && h.writable {
		var clear *Cred
		if h.flags&ClearSetID != 0 {
			clear = &c
		}
		_, err := fs.truncate(ctx, in.Ino, 0, clear)
		return err
	}
	if in.AllLocal() || in.Size >= fs.cfg.ImportThreshold {
		return nil
	}
	// Copy the small file in. Best effort: a full tier leaves the data in
	// the bucket, and a version replaced meanwhile is fetched by the reads.
	missing, err := fs.meta.MissingData(ctx, in.Ino, 0, in.Size)
	if err != nil {
		return err
	}
	if err := fs.fetch(ctx, in.Ino, h.pinned, missing); err != nil && !tierFull(err) && !errors.Is(err, tier.ErrStale) {
		return err
	}
	return nil
}

// fetch copies the ranges of the object obj into the tier, where the file
// still shows obj's bytes; never over anything written locally. If an import
// replaced obj as the file's base meanwhile, nothing is stored and the error
// wraps tier.ErrStale, as the bytes belong to the old version.
func (fs *FS) fetch(ctx context.Context, ino Ino, obj meta.Object, ranges []tier.Range) error {
	for _, r := range ranges {
		if r.Off >= obj.Size {
			continue // past the end of the object: local zeros
		}
		if end := r.Off + r.Len; end > obj.Size {
			r.Len = obj.Size - r.Off
		}
		buf := make([]byte, r.Len)
		got, err := fs.bucket.ReadAt(ctx, obj.Key, obj.VersionID, buf, r.Off)
		if err != nil && !(errors.Is(err, io.EOF) && int64(got) == r.Len) {
			return fmt.Errorf("fetch %q [%d,+%d): %w", obj.Key, r.Off, r.Len, err)
		}
		if err := fs.meta.FillData(ctx, ino, obj, buf, r.Off, fs.cfg.TierLimits); err != nil {
			return err
		}
	}
	return nil
}

// Read reads into p at off. It returns fewer bytes only at end of file.
func (h *Handle) Read(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := h.count(h.read(ctx, p, off, nil))
	return n, err
}

// Shared is the result of ReadShared: the bytes read, in Bufs, which the
// caller may read until it calls Release.
type Shared struct {
	Bufs    [][]byte
	Release func() // nil when Bufs is p[:n], the caller's own buffer
}

// ReadShared is Read for a caller that can send bytes it does not own, such
// as a FUSE reply written with writev: when the whole range streams from
// the bucket it returns the read-ahead buffers themselves, saving a copy of
// every byte of a large cold read. Otherwise it reads into p as Read does.
// The caller calls Release, if set, once it has sent the bytes.
func (h *Handle) ReadShared(ctx context.Context, p []byte, off int64) (Shared, error) {
	var sh Shared
	n, err := h.count(h.read(ctx, p, off, &sh))
	if err != nil || sh.Release != nil {
		return sh, err
	}
	return Shared{Bufs: [][]byte{p[:n]}}, nil
}

// count adds a read's bytes to the counters.
func (h *Handle) count(n int, direct int64, err error) (int, error) {
	if direct > 0 {
		h.fs.counters.readDirect.Add(direct)
	}
	h.fs.counters.readTier.Add(int64(n) - direct)
	return n, err
}

// read serves Read and says how many of the bytes came straight from the
// bucket. With share set, a range that streams from the pinned object as a
// whole is returned in share instead of copied into p. A read that raced an
// import of a new version is done again: it then reads the new version.
func (h *Handle) read(ctx context.Context, p []byte, off int64, share *Shared) (n int, direct int64, err error) {
	for range 3 {
		n, direct, err = h.readOnce(ctx, p, off, share)
		if !errors.Is(err, tier.ErrStale) {
			break
		}
	}
	return n, direct, err
}

func (h *Handle) readOnce(ctx context.Context, p []byte, off int64, share *Shared) (n int, direct int64, err error) {
	if !h.readable {
		return 0, 0, syscall.EBADF
	}
	fs := h.fs
	fs.used.Touch(uint64(h.ino))
	in, n, missing, err := fs.meta.ReadData(ctx, h.ino, p, off)
	if err != nil {
		return 0, 0, err
	}
	if in.Replaced != h.replacedAt {
		return h.readPinned(ctx, p, off, share)
	}
	if n == 0 || len(missing) == 0 {
		return n, 0, nil
	}
	p = p[:n]
	if in.Size < fs.cfg.DirectReadSize {
		// The tier caches the inode's current version: fetch from Base,
		// then read again (an import meanwhile makes the fill stale, and
		// the read is done again on the new version).
		err := fs.fetch(ctx, h.ino, in.Base, missing)
		if err == nil {
			in, n, missing, err = fs.meta.ReadData(ctx, h.ino, p, off)
			if err != nil || len(missing) == 0 {
				return n, 0, err
			}
			if in.Replaced != h.replacedAt {
				return h.readPinned(ctx, p, off, share)
			}
			p = p[:n]
		} else if !tierFull(err) {
			return 0, 0, err
		}
		// The tier cannot cache it: stream it as a large file is.
	}
	// Large file: what the tier holds is in p; the rest streams from the
	// base object of this same view of the file.
	base := in.Base
	if share != nil && len(missing) == 1 && missing[0] == (tier.Range{Off: off, Len: int64(n)}) {
		ok, err := h.directShared(ctx, share, base, off, int64(n))
		if err != nil {
			return 0, 0, err
		}
		if ok {
			return n, int64(n), nil
		}
	}
	for _, r := range missing {
		if err := h.direct(ctx, base, p[r.Off-off:r.End()-off], r.Off); err != nil {
			return 0, 0, err
		}
		direct += r.Len
	}
	return n, direct, nil
}

// readPinned reads the version this handle opened, for a file an import
// has replaced since: all of it from that object version.
func (h *Handle) readPinned(ctx context.Context, p []byte, off int64, share *Shared) (n int, direct int64, err error) {
	obj := h.pinned
	if off >= obj.Size {
		return 0, 0, nil
	}
	p = p[:min(int64(len(p)), obj.Size-off)]
	if share != nil {
		ok, err := h.directShared(ctx, share, obj, off, int64(len(p)))
		if err != nil {
			return 0, 0, err
		}
		if ok {
			return len(p), int64(len(p)), nil
		}
	}
	if err := h.direct(ctx, obj, p, off); err != nil {
		return 0, 0, err
	}
	return len(p), int64(len(p)), nil
}

// tierFull tells whether err is the tier's disk running out of space: a
// read must not fail for that, only a write may.
func tierFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// direct fills p from the object version obj at off; bytes past its end
// (the file grew locally) are zeros.
func (h *Handle) direct(ctx context.Context, obj meta.Object, p []byte, off int64) error {
	if off >= obj.Size {
		clear(p)
		return nil
	}
	if end := off + int64(len(p)); end > obj.Size {
		clear(p[obj.Size-off:])
		p = p[:obj.Size-off]
	}
	n, err := h.readahead(obj).ReadAt(ctx, p, off)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(p)) {
		return fmt.Errorf("read %q at %d: %w", obj.Key, off, err)
	}
	return nil
}

// directShared is direct into share when [off, off+n) lies within obj and
// the read-ahead can buffer it; ok says it did.
func (h *Handle) directShared(ctx context.Context, share *Shared, obj meta.Object, off, n int64) (ok bool, err error) {
	if off+n > obj.Size {
		return false, nil
	}
	bufs, release, ok, err := h.readahead(obj).ReadShared(ctx, off, n)
	if err != nil {
		return false, fmt.Errorf("read %q at %d: %w", obj.Key, off, err)
	}
	share.Bufs, share.Release = bufs, release
	return ok, nil
}

// readahead returns the handle's streaming reader of obj. A reader of an
// earlier object (the base moved on with an export) is kept until Release:
// a concurrent read may still be using it.
func (h *Handle) readahead(obj meta.Object) *readahead.Reader {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ra == nil || h.raObj != obj {
		if h.ra != nil {
			h.retired = append(h.retired, h.ra)
		}
		h.ra, h.raObj = readahead.New(objectSource{h.fs, obj}, obj.Size,
			readahead.Options{ChunkSize: h.fs.cfg.ReadAheadChunk, Window: h.fs.cfg.ReadAheadWindow}), obj
	}
	return h.ra
}

// objectSource reads one pinned object version with ranged GETs.
type objectSource struct {
	fs  *FS
	obj meta.Object
}

func (s objectSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.fs.bucket.ReadAt(ctx, s.obj.Key, s.obj.VersionID, p, off)
}

// Release closes the handle; the last close of an unlinked file lets the
// exporter reclaim it.
func (h *Handle) Release(ctx context.Context) {
	if err := h.endWrite(ctx); err != nil {
		h.fs.log.Warn("end the last write at the close of a handle", "ino", h.ino, "err", err)
	}
	h.mu.Lock()
	if h.ra != nil {
		h.ra.Close()
		h.ra = nil
	}
	for _, ra := range h.retired {
		ra.Close()
	}
	h.retired = nil
	h.mu.Unlock()
	fs := h.fs
	fs.mu.Lock()
	fs.opens[h.ino]--
	last := fs.opens[h.ino] <= 0
	if last {
		delete(fs.opens, h.ino)
	}
	fs.mu.Unlock()
	if last && fs.cfg.Liveness != nil {
		fs.closed(h.ino) // records the close and reclaims, after this returns
		return
	}
	if last {
		if in, err := fs.meta.Get(ctx, h.ino); err == nil {
			fs.reclaim(&in)
		}
	}
}

// reclaim frees the tier space of a file that has no name left and is not
// open, nor known to a front end that may still open it: nothing can read
// that data again, and the exporter needs none of it to delete the file's
// objects. Without this a full tier would stay full until the export delay
// has passed.
func (fs *FS) reclaim(in *meta.Inode) {
	if in == nil || in.Nlink != 0 || !in.IsRegular() || fs.reclaimLater(in.Ino) {
		return
	}
	if err := fs.meta.ReclaimData(context.Background(), in.Ino); err != nil {
		fs.log.Warn("free the tier data of a deleted file", "ino", in.Ino, "err", err)
	}
	fs.used.Forget(uint64(in.Ino))
}

// Fallocate implements fallocate(2) modes 0, KEEP_SIZE and
// PUNCH_HOLE|KEEP_SIZE. The tier allocates as it writes, so mode 0 only
// grows the file and KEEP_SIZE reserves nothing.
func (h *Handle) Fallocate(ctx context.Context, mode uint32, off, n int64) error {
	const keepSize, punchHole = 0x1, 0x2
	if err := h.fs.writable(); err != nil {
		return err
	}
	if !h.writable {
		return syscall.EBADF
	}
	if off < 0 || n <= 0 {
		return syscall.EINVAL
	}
	fs := h.fs
	switch mode {
	case 0:
		now := fs.now()
		_, err := fs.meta.ResizeData(ctx, h.ino, off+n, true, func(in *meta.Inode) { in.Ctime = now })
		return err
	case keepSize:
		_, err := fs.meta.Get(ctx, h.ino)
		return err
	case punchHole | keepSize:
		return fs.meta.PunchData(ctx, h.ino, off, n, fs.now())
	}
	return syscall.EOPNOTSUPP
}

// Seek implements SEEK_DATA (whence 3) and SEEK_HOLE (whence 4). Ranges
// still in the bucket count as data.
func (h *Handle) Seek(ctx context.Context, off int64, whence int) (int64, error) {
	return h.fs.meta.Seek(ctx, h.ino, off, whence == 3)
}
