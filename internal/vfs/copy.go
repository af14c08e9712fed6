package vfs

import "context"

// maxCopy bounds one CopyRange; the caller copies the rest with further
// calls, as copy_file_range(2) may copy less than asked.
const maxCopy = 64 << 20

// CopyRange copies up to n bytes (at most maxCopy) of src at srcOff to dst
// at dstOff, as one write: copy_file_range(2) through FUSE, an NFS COPY.
// Every piece is written with more to come (WriteContinued), so that a
// flush does not export dst in the middle of the copy, and once done the
// copy ends the write, synced first when it took several pieces, as a
// write(2) of several pieces is (endPieces). It stops at the end of src
// and returns the bytes copied; an error after some were copied makes a
// short copy, as it makes a short write.
func CopyRange(ctx context.Context, src *Handle, srcOff int64, dst *Handle, dstOff, n int64) (int64, error) {
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
		if _, err = dst.WriteContinued(ctx, p[:got], dstOff+done); err != nil {
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
