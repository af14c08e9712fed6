package vfs

import (
	"context"

	"bucketfs/internal/meta"
)

// maxCopy bounds one CopyRange; the caller copies the rest with further
// calls, as copy_file_range(2) may copy less than asked.
const maxCopy = 64 << 20

// CopyRange copies up to n bytes (at most maxCopy) of src at srcOff to dst
// at dstOff, as one write: copy_file_range(2) through FUSE, an NFS COPY.
// Every piece is written with more to come (as WriteContinued), so that a
// flush does not export dst in the middle of the copy, and once done the
// copy ends the write, synced first when it took several pieces, as a
// write(2) of more than two pieces is (endPieces; a copy's pieces carry
// no marker of an unfinished write). It stops at the end of src
// and returns the bytes copied; an error after some were copied makes a
// short copy, as it makes a short write. clearFor, if set, is the copier
// when it lacks CAP_FSETID: the first piece's transaction also clears
// dst's set-id bits, as WriteClearingSetID does (nil: a copier with
// CAP_FSETID, or a kernel that clears them by a setattr of its own, as
// FUSE's does for copy_file_range).
func CopyRange(ctx context.Context, src *Handle, srcOff int64, dst *Handle, dstOff, n int64, clearFor *Cred) (int64, error) {
	n = min(n, maxCopy)
	buf := make([]byte, min(n, maxWrite))
	var done int64
	var err error
	pieces := 0
	for done < n {
		p := buf[:min(int64(len(buf)), n-done)]
		got, rerr := src.Read(ctx, p, srcOff+done)
		if got == 0 {
			err = rerr
			break
		}
		var clear func(in *meta.Inode)
		if clearFor != nil && pieces == 0 {
			clear = func(in *meta.Inode) { clearSetID(in, *clearFor) }
		}
		if _, err = dst.write(ctx, p[:got], dstOff+done, true, clear); err != nil {
			break
		}
		pieces++
		done += int64(got)
	}
	if done == 0 {
		if eerr := dst.endWrite(ctx); err == nil {
			err = eerr
		}
		return 0, err
	}
	if pieces > 1 {
		if err := dst.fs.meta.Sync(ctx); err != nil {
			return 0, err
		}
	}
	if err := dst.endWrite(ctx); err != nil {
		return 0, err
	}
	return done, nil
}
