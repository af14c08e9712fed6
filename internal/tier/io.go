package tier

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ReadAt reads len(p) bytes of ino's data file at off. The caller guarantees
// the range is present (see Missing); holes read as zeros. As with
// os.File.ReadAt, a read that reaches the end of the data file returns the
// bytes read and a bare io.EOF. An inode without state fails with ErrNoState.
//
// epoch is what Epoch returned before the caller looked at which content to
// expect (as for Fill): if the content was replaced since, ReadAt reads
// nothing and returns an error wrapping ErrStale.
func (t *Tier) ReadAt(ino, epoch uint64, p []byte, off int64) (int, error) {
	n, err := t.shared(ino)
	if err != nil {
		return 0, opErr("read", ino, err)
	}
	defer n.life.RUnlock()
	n.mu.Lock()
	stale := uint64(n.epoch) != epoch
	n.mu.Unlock()
	if stale {
		return 0, opErr("read", ino, ErrStale)
	}
	return t.readShared(n, p, off)
}

// readShared reads p at off. Requires n.life held shared.
func (t *Tier) readShared(n *inode, p []byte, off int64) (int, error) {
	n.lastUse.Store(t.now())
	f, err := t.file(n)
	if err != nil {
		return 0, opErr("read", n.ino, err)
	}
	c, err := f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = opErr("read", n.ino, err)
	}
	return c, err
}

// WriteAt writes p at off and marks the written bytes present. A write that
// starts past the logical size also makes the gap present: it is local zeros.
// On a short write (ENOSPC, for instance) the bytes written are marked and
// returned with an error wrapping the cause; earlier data is untouched.
func (t *Tier) WriteAt(ino uint64, p []byte, off int64) (int, error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return 0, opErr("write", ino, err)
	}
	n, err := t.shared(ino)
	if err != nil {
		return 0, opErr("write", ino, err)
	}
	defer n.life.RUnlock()
	return t.writeShared(n, p, off)
}

// writeShared writes and marks p at off. Requires n.life held shared.
func (t *Tier) writeShared(n *inode, p []byte, off int64) (int, error) {
	n.fill.RLock()
	defer n.fill.RUnlock()
	n.lastUse.Store(t.now())
	f, err := t.file(n)
	if err != nil {
		return 0, opErr("write", n.ino, err)
	}
	c, err := pwriteAll(f, p, off)
	if c > 0 {
		n.mu.Lock()
		n.markLocked(off, int64(c), true)
		n.mu.Unlock()
		t.markStale(n)
	}
	if err != nil {
		return c, opErr("write", n.ino, err)
	}
	return c, nil
}

// Epoch returns the version of ino's content for Fill and ReadAt: take it before
// reading which object version the file shows, fetch, and pass it to Fill,
// which refuses the bytes if the content was replaced meanwhile.
func (t *Tier) Epoch(ino uint64) uint64 {
	n, err := t.lookup(ino)
	if err != nil || n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return uint64(n.epoch)
}

// Fill stores clean data fetched from the bucket: p holds the object's bytes
// at off. Only the sub-ranges that are not present are written and marked;
// present ranges may hold newer local writes and are left alone, and bytes
// past the logical size (cut by a Truncate since they were fetched) are
// dropped. Fill waits for in-flight WriteAt and Punch calls on ino and holds
// off new ones while it runs. epoch is what Epoch returned before the bytes
// were fetched; if the content was replaced since, Fill stores nothing and
// returns an error wrapping ErrStale.
func (t *Tier) Fill(ino uint64, epoch uint64, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p))); err != nil {
		return opErr("fill", ino, err)
	}
	n, err := t.shared(ino)
	if err != nil {
		return opErr("fill", ino, err)
	}
	defer n.life.RUnlock()
	n.fill.Lock()
	defer n.fill.Unlock()
	n.lastUse.Store(t.now())
	n.mu.Lock()
	if uint64(n.epoch) != epoch {
		n.mu.Unlock()
		return opErr("fill", ino, ErrStale)
	}
	var gaps []Range
	if hi := min(end(off, int64(len(p))), n.size); hi > off {
		gaps = n.ext.missing(off, hi-off, nil)
	}
	n.mu.Unlock()
	if len(gaps) == 0 {
		return nil
	}
	f, err := t.file(n)
	if err != nil {
		return opErr("fill", ino, err)
	}
	defer t.markStale(n)
	for _, g := range gaps {
		c, err := f.WriteAt(p[g.Off-off:g.End()-off], g.Off)
		if c > 0 {
			n.mu.Lock()
			n.markLocked(g.Off, int64(c), false)
			n.mu.Unlock()
		}
		if err != nil {
			return opErr("fill", ino, err)
		}
	}
	return nil
}

// Punch deallocates [off, off+n) of the data file (fallocate PUNCH_HOLE |
// KEEP_SIZE). The part inside the logical size is present afterwards and
// reads as zeros, whether or not it was present before.
func (t *Tier) Punch(ino uint64, off, length int64) error {
	if err := checkRange(off, length); err != nil || length == 0 {
		if err == nil {
			err = unix.EINVAL
		}
		return opErr("punch", ino, err)
	}
	n, err := t.shared(ino)
	if err != nil {
		return opErr("punch", ino, err)
	}
	defer n.life.RUnlock()
	n.fill.RLock()
	defer n.fill.RUnlock()
	f, err := t.file(n)
	if err != nil {
		return opErr("punch", ino, err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length); err != nil {
		return opErr("punch", ino, err)
	}
	defer t.markStale(n)
	n.mu.Lock()
	hi := min(end(off, length), n.size)
	n.mu.Unlock()
	if hi <= off {
		return nil
	}
	// Reads of the newly present range must not hit the end of the file.
	fi, err := f.Stat()
	if err != nil {
		return opErr("punch", ino, err)
	}
	if fi.Size() < hi {
		if err := f.Truncate(hi); err != nil {
			return opErr("punch", ino, err)
		}
	}
	n.mu.Lock()
	n.markLocked(off, hi-off, false)
	n.cuts++
	n.mu.Unlock()
	return nil
}

// Allocate preallocates disk blocks for [off, off+n) of the data file
// (fallocate KEEP_SIZE). It changes neither the present ranges nor the
// logical size: after growing a file this way the caller marks the new range
// present with Truncate. Allocated blocks count in Usage.
func (t *Tier) Allocate(ino uint64, off, length int64) error {
	if err := checkRange(off, length); err != nil || length == 0 {
		if err == nil {
			err = unix.EINVAL
		}
		return opErr("allocate", ino, err)
	}
	n, err := t.shared(ino)
	if err != nil {
		return opErr("allocate", ino, err)
	}
	defer n.life.RUnlock()
	f, err := t.file(n)
	if err != nil {
		return opErr("allocate", ino, err)
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, length)
	t.markStale(n)
	if err != nil {
		return opErr("allocate", ino, err)
	}
	return nil
}

// SeekData returns the first offset at or after off where the data file holds
// data (lseek SEEK_DATA). Ranges that are not present are holes in the data
// file, so this is meaningful for a fully present inode. Past the end of the
// file the error wraps unix.ENXIO.
func (t *Tier) SeekData(ino uint64, off int64) (int64, error) {
	return t.seek("seek data", ino, off, unix.SEEK_DATA)
}

// SeekHole returns the first offset at or after off where the data file has
// a hole (lseek SEEK_HOLE); the end of the file counts as a hole. Past the
// end of the file the error wraps unix.ENXIO.
func (t *Tier) SeekHole(ino uint64, off int64) (int64, error) {
	return t.seek("seek hole", ino, off, unix.SEEK_HOLE)
}

func (t *Tier) seek(op string, ino uint64, off int64, whence int) (int64, error) {
	if off < 0 {
		return 0, opErr(op, ino, unix.EINVAL)
	}
	n, err := t.shared(ino)
	if err != nil {
		return 0, opErr(op, ino, err)
	}
	defer n.life.RUnlock()
	f, err := t.file(n)
	if err != nil {
		return 0, opErr(op, ino, err)
	}
	// The descriptor is shared, but nothing else uses its file offset: all
	// I/O is pread/pwrite.
	pos, err := unix.Seek(int(f.Fd()), off, whence)
	if err != nil {
		return 0, opErr(op, ino, err)
	}
	return pos, nil
}

// pwriteAll writes p at off with pwrite(2), looping over short writes. Unlike
// os.File.WriteAt it reports the bytes a write that ends in an error (ENOSPC)
// did put on disk, so the caller can mark them present.
func pwriteAll(f *os.File, p []byte, off int64) (int, error) {
	fd := int(f.Fd())
	done := 0
	for done < len(p) {
		n, err := unix.Pwrite(fd, p[done:], off+int64(done))
		if n > 0 {
			done += n
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, &os.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		if n == 0 {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}
