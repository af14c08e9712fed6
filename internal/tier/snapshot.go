package tier

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Snapshot copies the first size bytes of ino's data file, as they are at
// one instant, into a private file that no later write touches, and returns
// it open for reading and writing, with the ranges of [0, size) that were
// not present at that instant (the caller fills them from the bucket into
// the snapshot itself). Writes and hole punches on ino wait while the copy
// runs, so the snapshot never holds half of a write. The file is already
// unlinked: closing it frees the space, and a crash leaves nothing behind.
//
// The copy uses copy_file_range, which file systems with reflinks (XFS,
// btrfs) turn into a clone; elsewhere it is an in-kernel copy.
func (t *Tier) Snapshot(ino uint64, size int64) (*os.File, []Range, error) {
	n, err := t.shared(ino)
	if err != nil {
		return nil, nil, opErr("snapshot", ino, err)
	}
	defer n.life.RUnlock()
	n.fill.Lock()
	defer n.fill.Unlock()
	src, err := t.file(n)
	if err != nil {
		return nil, nil, opErr("snapshot", ino, err)
	}
	dst, err := os.CreateTemp(t.dir, "snapshot-*")
	if err != nil {
		return nil, nil, opErr("snapshot", ino, err)
	}
	os.Remove(dst.Name())
	if err := copyRange(dst, src, size); err != nil {
		dst.Close()
		return nil, nil, opErr("snapshot", ino, err)
	}
	var missing []Range
	if size > 0 {
		n.mu.Lock()
		if !n.ext.covers(0, size) {
			missing = n.ext.missing(0, size, nil)
		}
		n.mu.Unlock()
	}
	return dst, missing, nil
}

// copyRange copies [0, size) of src to dst; past src's end dst reads zeros.
func copyRange(dst, src *os.File, size int64) error {
	var off int64
	for off < size {
		soff, doff := off, off
		c, err := unix.CopyFileRange(int(src.Fd()), &soff, int(dst.Fd()), &doff, int(min(size-off, 1<<30)), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			_, err = io.Copy(io.NewOffsetWriter(dst, off), io.NewSectionReader(src, off, size-off))
			if err != nil {
				return err
			}
			break
		}
		if err != nil {
			return err
		}
		if c == 0 {
			break // end of src: the rest reads as zeros
		}
		off += int64(c)
	}
	return dst.Truncate(size)
}
