package tier

import (
	"errors"
	"fmt"
	"math"

	"bucketfs/internal/kv"

	"golang.org/x/sys/unix"
)

// Every function here runs inside the caller's transaction or view and
// returns how many bytes of file data the blocks it changed store more
// (negative: less) than before (see cost), so that the caller can keep
// the inode's count of cached bytes in the same transaction.

// Write stores p at off: the written bytes become present. size is the
// file's size before the write: no block lies past it, so a write past the
// end (an append, a new file) looks up no old block there.
func Write(tx kv.Txn, ino uint64, p []byte, off, size int64) (delta int64, err error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return 0, fmt.Errorf("tier: write inode %d: %w", ino, err)
	}
	exist := (max(size, 0) + BlockSize - 1) / BlockSize
	return editExisting(tx, "write", ino, off, int64(len(p)), false, exist, func(b *block, lo, hi int64, abs int64) {
		copy(b.data[lo:hi], p[abs-off:])
		b.ext.add(lo, hi-lo)
	})
}

// Fill stores bytes fetched from the bucket's base object: p holds its
// bytes at off. Only bytes below backed that are not present are stored;
// present bytes may be newer local writes and stay as they are.
func Fill(tx kv.Txn, ino uint64, p []byte, off, backed int64) (delta int64, err error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return 0, fmt.Errorf("tier: fill inode %d: %w", ino, err)
	}
	hi := min(off+int64(len(p)), backed)
	if hi <= off {
		return 0, nil
	}
	return edit(tx, "fill", ino, off, hi-off, true, func(b *block, lo, hi int64, abs int64) {
		for _, g := range b.ext.missing(lo, hi-lo, nil) {
			copy(b.data[g.Off:g.End()], p[abs-off+(g.Off-lo):])
			b.ext.add(g.Off, g.Len)
		}
	})
}

// Punch makes [off, off+n) read as zeros: the part below backed becomes
// present zeros (the base object's bytes there no longer count), the part
// at or past backed holds nothing, which reads as zeros. The caller clips
// the range to the file's size.
func Punch(tx kv.Txn, ino uint64, off, n, backed int64) (delta int64, err error) {
	if err := checkRange(off, n); err != nil {
		return 0, fmt.Errorf("tier: punch inode %d: %w", ino, err)
	}
	if mid := min(off+n, backed); mid > off {
		d, err := edit(tx, "punch", ino, off, mid-off, false, func(b *block, lo, hi int64, _ int64) {
			clear(b.data[lo:hi])
			b.ext.add(lo, hi-lo)
		})
		if err != nil {
			return delta, err
		}
		delta += d
	}
	if lo := max(off, backed); off+n > lo {
		d, err := edit(tx, "punch", ino, lo, off+n-lo, false, func(b *block, lo, hi int64, _ int64) {
			b.ext.remove(lo, hi-lo)
		})
		if err != nil {
			return delta, err
		}
		delta += d
	}
	return delta, nil
}

// Cut drops every byte at or past size (a truncate down). cached is what
// the inode holds in all; cutting to 0 then needs no look at the blocks.
func Cut(tx kv.Txn, ino uint64, size, cached int64) (delta int64, err error) {
	if size < 0 {
		return 0, fmt.Errorf("tier: cut inode %d: %w", ino, unix.EINVAL)
	}
	if size == 0 {
		return -cached, Drop(tx, ino)
	}
	firstGone := (size + BlockSize - 1) / BlockSize
	lower, upper := blockKey(ino, firstGone), kv.PrefixEnd(blockPrefix(ino))
	var scanErr error
	err = tx.Scan(lower, upper, func(k, v []byte) bool {
		n, err := cost(v)
		if err != nil {
			scanErr = blockErr("cut", ino, blockIndex(k), err)
			return false
		}
		delta -= n
		return true
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return 0, err
	}
	if err := tx.DeleteRange(lower, upper); err != nil {
		return 0, err
	}
	if size%BlockSize != 0 {
		d, err := edit(tx, "cut", ino, size, BlockSize-size%BlockSize, false, func(b *block, lo, hi int64, _ int64) {
			b.ext.remove(lo, hi-lo)
		})
		if err != nil {
			return 0, err
		}
		delta += d
	}
	return delta, nil
}

// Clone gives to a copy of every block of from (to has none before). The
// blocks cost what they cost from, so the caller sets to's cached bytes to
// from's.
func Clone(tx kv.Txn, from, to uint64) error {
	p := blockPrefix(from)
	var err error
	scanErr := tx.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
		err = tx.Set(blockKey(to, blockIndex(k)), v)
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("tier: clone inode %d: %w", from, err)
	}
	return scanErr
}

// Drop deletes every block of ino.
func Drop(tx kv.Txn, ino uint64) error {
	p := blockPrefix(ino)
	return tx.DeleteRange(p, kv.PrefixEnd(p))
}

// Read reads [off, off+len(p)) into p. Bytes no block holds read as zeros;
// those below backed belong to the base object, and are returned, in order,
// as missing: the caller reads them from the bucket (or Fills them first).
func Read(r kv.Reader, ino uint64, p []byte, off, backed int64) (missing []Range, err error) {
	clear(p)
	end := off + int64(len(p))
	lim := min(end, backed)
	pos := off // everything below pos that is below lim is accounted for
	err = ranges(r, "read", ino, off, end, func(rg Range, data []byte) {
		lo, hi := max(rg.Off, off), min(rg.End(), end)
		if data != nil {
			copy(p[lo-off:hi-off], data[lo-rg.Off:])
		}
		if lo > pos && pos < lim {
			missing = append(missing, Range{pos, min(lo, lim) - pos})
		}
		pos = max(pos, hi)
	})
	if err != nil {
		return nil, err
	}
	if pos < lim {
		missing = append(missing, Range{pos, lim - pos})
	}
	return missing, nil
}

// Missing returns the parts of [off, off+n) below backed that no block
// holds, in order: what a read would have to take from the base object.
func Missing(r kv.Reader, ino uint64, off, n, backed int64) ([]Range, error) {
	lim := min(off+n, backed)
	if lim <= off {
		return nil, nil
	}
	var missing []Range
	pos := off
	err := ranges(r, "missing", ino, off, lim, func(rg Range, _ []byte) {
		lo, hi := max(rg.Off, off), min(rg.End(), lim)
		if lo > pos {
			missing = append(missing, Range{pos, lo - pos})
		}
		pos = max(pos, hi)
	})
	if err != nil {
		return nil, err
	}
	if pos < lim {
		missing = append(missing, Range{pos, lim - pos})
	}
	return missing, nil
}

// SeekData returns the first offset at or after off that holds data
// (lseek SEEK_DATA): everything below backed is data, and past it what a
// block holds. A hole to the end of the file fails with ENXIO.
func SeekData(r kv.Reader, ino uint64, off, size, backed int64) (int64, error) {
	if off < 0 || off >= size {
		return 0, unix.ENXIO
	}
	if off < backed {
		return off, nil
	}
	found := int64(-1)
	err := ranges(r, "seek", ino, off, size, func(rg Range, _ []byte) {
		if found < 0 && rg.End() > off {
			found = max(rg.Off, off)
		}
	})
	if err != nil {
		return 0, err
	}
	if found < 0 {
		return 0, unix.ENXIO
	}
	return found, nil
}

// SeekHole returns the first offset at or after off in a hole (lseek
// SEEK_HOLE); the end of the file counts as one.
func SeekHole(r kv.Reader, ino uint64, off, size, backed int64) (int64, error) {
	if off < 0 || off >= size {
		return 0, unix.ENXIO
	}
	pos := max(off, backed)
	done := false
	err := ranges(r, "seek", ino, pos, size, func(rg Range, _ []byte) {
		if done {
			return
		}
		if rg.Off > pos {
			done = true
			return
		}
		pos = max(pos, rg.End())
	})
	if err != nil {
		return 0, err
	}
	return min(pos, size), nil
}

// ranges calls fn, in order, for every present range that overlaps
// [off, end), with its bytes (nil for zeros). Adjacent ranges of
// consecutive blocks are reported apart.
func ranges(r kv.Reader, op string, ino uint64, off, end int64, fn func(rg Range, data []byte)) error {
	if end <= off {
		return nil
	}
	lower := blockKey(ino, off/BlockSize)
	upper := blockKey(ino, (end-1)/BlockSize+1)
	var bad error
	err := r.Scan(lower, upper, func(k, v []byte) bool {
		idx := blockIndex(k)
		start := idx * BlockSize
		err := eachRange(v, func(roff int64, data []byte, n int64) {
			rg := Range{start + roff, n}
			if rg.End() > off && rg.Off < end {
				fn(rg, data)
			}
		})
		if err != nil {
			bad = blockErr(op, ino, idx, err)
			return false
		}
		return true
	})
	if err == nil {
		err = bad
	}
	return err
}

// edit applies change to every block that [off, off+n) touches. change
// gets the decoded block, the part [lo, hi) of it the edit covers
// (relative to the block), and the absolute offset of lo. A block the edit
// covers whole is handed over empty unless needOld is set: its old content
// does not matter to a write. Blocks left with nothing present are deleted.
func edit(tx kv.Txn, op string, ino uint64, off, n int64, needOld bool,
	change func(b *block, lo, hi int64, abs int64)) (delta int64, err error) {
	return editExisting(tx, op, ino, off, n, needOld, math.MaxInt64, change)
}

// editExisting is edit knowing that no block of index exist or more is
// stored, so that it looks none of them up.
func editExisting(tx kv.Txn, op string, ino uint64, off, n int64, needOld bool, exist int64,
	change func(b *block, lo, hi int64, abs int64)) (delta int64, err error) {
	if n <= 0 {
		return 0, nil
	}
	// A window of blocks at a time, so that a huge range costs no memory
	// in proportion to its length (only its batch does).
	const window = 1024
	first, last := off/BlockSize, (off+n-1)/BlockSize
	for w := first; w <= last; w += window {
		d, err := editWindow(tx, op, ino, off, n, w, min(w+window-1, last), needOld, exist, change)
		delta += d
		if err != nil {
			return delta, err
		}
	}
	return delta, nil
}

// editWindow is edit for the blocks first to last of [off, off+n).
func editWindow(tx kv.Txn, op string, ino uint64, off, n, first, last int64, needOld bool, exist int64,
	change func(b *block, lo, hi int64, abs int64)) (delta int64, err error) {
	count := last - first + 1
	olds := make([][]byte, count) // old values the edit needs
	sizes := make([]int64, count) // what every old block costs
	if first < exist {            // else no block of the window is stored
		if err := scanOld(tx, op, ino, off, n, first, min(last+1, exist), needOld, olds, sizes); err != nil {
			return 0, err
		}
	}
	var b block
	for idx := first; idx <= last; idx++ {
		start := idx * BlockSize
		lo, hi := max(off, start)-start, min(off+n, start+BlockSize)-start
		if old := olds[idx-first]; old != nil {
			if err := b.decode(old); err != nil {
				return delta, blockErr(op, ino, idx, err)
			}
		} else {
			b.reset()
		}
		change(&b, lo, hi, start+lo)
		b.settle()
		key := blockKey(ino, idx)
		if n := b.encodedLen(); n == 0 {
			if sizes[idx-first] > 0 {
				if err := tx.Delete(key); err != nil {
					return delta, err
				}
			}
		} else if err := tx.SetWith(key, n, func(v []byte) { b.encode(v[:0]) }); err != nil {
			return delta, err
		}
		delta += b.cost() - sizes[idx-first]
	}
	return delta, nil
}

// scanOld reads the blocks [first, end) for edit: what each costs, and the
// old value of those the edit needs (all with needOld, else those it
// covers only in part).
func scanOld(tx kv.Txn, op string, ino uint64, off, n, first, end int64, needOld bool, olds [][]byte, sizes []int64) error {
	var bad error
	err := tx.Scan(blockKey(ino, first), blockKey(ino, end), func(k, v []byte) bool {
		idx := blockIndex(k)
		c, err := cost(v)
		if err != nil {
			bad = blockErr(op, ino, idx, err)
			return false
		}
		sizes[idx-first] = c
		start := idx * BlockSize
		whole := off <= start && start+BlockSize <= off+n
		if needOld || !whole {
			olds[idx-first] = append([]byte(nil), v...)
		}
		return true
	})
	if err == nil {
		err = bad
	}
	return err
}

// ErrStale is returned (wrapped) by a fill of bytes fetched from an object
// version that is no longer the file's base.
var ErrStale = errors.New("tier: fill of replaced content")

func checkRange(off, n int64) error {
	if off < 0 || n < 0 || n > math.MaxInt64-off {
		return unix.EINVAL
	}
	return nil
}
