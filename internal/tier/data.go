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
// (negative: less) than before (see cost), in all and in unexported
// blocks, so that the caller can keep the inode's counts in the same
// transaction.

// Bytes counts bytes of file data the blocks of one inode store (or a
// change of them): in all, and in unexported blocks, those with a
// file-side change the bucket does not hold yet (see Stamp).
type Bytes struct {
	Cached, Dirty int64
}

// Add returns b plus d.
func (b Bytes) Add(d Bytes) Bytes { return Bytes{b.Cached + d.Cached, b.Dirty + d.Dirty} }

// Stamp tells the edits which blocks are unexported, and how to mark the
// blocks a file-side change writes.
//
// Every block carries a stamp: the inode's generation (package meta's Gen)
// of the last file-side change of its bytes, 0 if it holds only bytes
// fetched from the base object. A block is unexported while its stamp is
// above the inode's Exported generation: the export of that generation
// uploaded every block stamped at or below it, so those hold exactly the
// bytes of the inode's base object (the object that export made) and may
// be dropped (DropExported) for the bucket to provide them again. An
// unexported block holds bytes only the tier has. The tier's capacity for
// unexported data counts the bytes of unexported blocks: a write costs
// what it makes unexported, at a block's granularity, however large the
// file's clean cached part.
type Stamp struct {
	// Exported is the generation of the inode's last complete export.
	Exported uint64
	// Gen is the generation a file-side change gives the blocks it
	// writes: above Exported, so that they count as unexported until an
	// export of Gen or later.
	Gen uint64
}

// dirty reports whether a block stamped stamp is unexported.
func (s Stamp) dirty(stamp uint64) bool { return stamp > s.Exported }

// bytesOf is what a block that costs n bytes counts for.
func (s Stamp) bytesOf(n int64, stamp uint64) Bytes {
	if s.dirty(stamp) {
		return Bytes{n, n}
	}
	return Bytes{Cached: n}
}

// Write stores p at off: the written bytes become present, and the blocks
// they lie in are stamped st.Gen (unexported). size is the file's size
// before the write: no block lies past it, so a write past the end (an
// append, a new file) looks up no old block there.
func Write(tx kv.Txn, ino uint64, p []byte, off, size int64, st Stamp) (delta Bytes, err error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return Bytes{}, fmt.Errorf("tier: write inode %d: %w", ino, err)
	}
	exist := (max(size, 0) + BlockSize - 1) / BlockSize
	return editExisting(tx, "write", ino, off, int64(len(p)), false, exist, st, true, func(b *block, lo, hi int64, abs int64) {
		copy(b.data[lo:hi], p[abs-off:])
		b.ext.add(lo, hi-lo)
	})
}

// Fill stores bytes fetched from the bucket's base object: p holds its
// bytes at off. Only bytes below backed that are not present are stored;
// present bytes may be newer local writes and stay as they are. Blocks
// keep their stamps: a new block is exported (it holds the base's bytes),
// and bytes filled into an unexported block count as unexported, as the
// block does.
func Fill(tx kv.Txn, ino uint64, p []byte, off, backed int64, st Stamp) (delta Bytes, err error) {
	if err := checkRange(off, int64(len(p))); err != nil {
		return Bytes{}, fmt.Errorf("tier: fill inode %d: %w", ino, err)
	}
	hi := min(off+int64(len(p)), backed)
	if hi <= off {
		return Bytes{}, nil
	}
	return edit(tx, "fill", ino, off, hi-off, true, st, false, func(b *block, lo, hi int64, abs int64) {
		for _, g := range b.ext.missing(lo, hi-lo, nil) {
			copy(b.data[g.Off:g.End()], p[abs-off+(g.Off-lo):])
			b.ext.add(g.Off, g.Len)
		}
	})
}

// Punch makes [off, off+n) read as zeros: the part below backed becomes
// present zeros (the base object's bytes there no longer count), the part
// at or past backed holds nothing, which reads as zeros. The blocks it
// changes are stamped st.Gen. The caller clips the range to the file's
// size.
func Punch(tx kv.Txn, ino uint64, off, n, backed int64, st Stamp) (delta Bytes, err error) {
	if err := checkRange(off, n); err != nil {
		return Bytes{}, fmt.Errorf("tier: punch inode %d: %w", ino, err)
	}
	if mid := min(off+n, backed); mid > off {
		d, err := edit(tx, "punch", ino, off, mid-off, false, st, true, func(b *block, lo, hi int64, _ int64) {
			clear(b.data[lo:hi])
			b.ext.add(lo, hi-lo)
		})
		if err != nil {
			return delta, err
		}
		delta = delta.Add(d)
	}
	if lo := max(off, backed); off+n > lo {
		d, err := edit(tx, "punch", ino, lo, off+n-lo, false, st, true, func(b *block, lo, hi int64, _ int64) {
			b.ext.remove(lo, hi-lo)
		})
		if err != nil {
			return delta, err
		}
		delta = delta.Add(d)
	}
	return delta, nil
}

// Cut drops every byte at or past size (a truncate down); the blocks keep
// their stamps, as what stays of them is unchanged. held is what the inode
// holds in all; cutting to 0 then needs no look at the blocks.
func Cut(tx kv.Txn, ino uint64, size int64, held Bytes, st Stamp) (delta Bytes, err error) {
	if size < 0 {
		return Bytes{}, fmt.Errorf("tier: cut inode %d: %w", ino, unix.EINVAL)
	}
	if size == 0 {
		return Bytes{-held.Cached, -held.Dirty}, Drop(tx, ino)
	}
	firstGone := (size + BlockSize - 1) / BlockSize
	lower, upper := blockKey(ino, firstGone), kv.PrefixEnd(blockPrefix(ino))
	var scanErr error
	err = tx.Scan(lower, upper, func(k, v []byte) bool {
		n, err := cost(v)
		var stamp uint64
		if err == nil {
			stamp, err = stampOf(v)
		}
		if err != nil {
			scanErr = blockErr("cut", ino, blockIndex(k), err)
			return false
		}
		gone := st.bytesOf(n, stamp)
		delta = delta.Add(Bytes{-gone.Cached, -gone.Dirty})
		return true
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return Bytes{}, err
	}
	if err := tx.DeleteRange(lower, upper); err != nil {
		return Bytes{}, err
	}
	if size%BlockSize != 0 {
		d, err := edit(tx, "cut", ino, size, BlockSize-size%BlockSize, false, st, false, func(b *block, lo, hi int64, _ int64) {
			b.ext.remove(lo, hi-lo)
		})
		if err != nil {
			return Bytes{}, err
		}
		delta = delta.Add(d)
	}
	return delta, nil
}

// DropExported deletes the blocks of ino that hold no unexported change
// (stamped at or below st.Exported) and whose bytes all lie below backed:
// they hold the base object's bytes, which reads take from the bucket once
// the block is gone. It returns what that frees (Dirty is 0).
func DropExported(tx kv.Txn, ino uint64, backed int64, st Stamp) (delta Bytes, err error) {
	p := blockPrefix(ino)
	var gone [][]byte
	var scanErr error
	err = tx.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
		idx := blockIndex(k)
		stamp, err := stampOf(v)
		if err != nil {
			scanErr = blockErr("drop", ino, idx, err)
			return false
		}
		if st.dirty(stamp) {
			return true
		}
		end := int64(0)
		if err := eachRange(v, func(off int64, _ []byte, n int64) { end = max(end, off+n) }); err != nil {
			scanErr = blockErr("drop", ino, idx, err)
			return false
		}
		if idx*BlockSize+end > backed {
			return true
		}
		n, err := cost(v)
		if err != nil {
			scanErr = blockErr("drop", ino, idx, err)
			return false
		}
		delta.Cached -= n
		gone = append(gone, append([]byte(nil), k...))
		return true
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return Bytes{}, err
	}
	for _, k := range gone {
		if err := tx.Delete(k); err != nil {
			return Bytes{}, err
		}
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
// DropSome deletes up to max of ino's blocks, the first in order, and
// returns what they held as st counts it (negative), and whether blocks
// are left. A file of many blocks is dropped so in several transactions
// (Drop is one, as long as the file).
func DropSome(tx kv.Txn, ino uint64, st Stamp, max int) (delta Bytes, more bool, err error) {
	p := blockPrefix(ino)
	var gone [][]byte
	var scanErr error
	err = tx.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
		if len(gone) == max {
			more = true
			return false
		}
		idx := blockIndex(k)
		stamp, err := stampOf(v)
		if err != nil {
			scanErr = blockErr("drop", ino, idx, err)
			return false
		}
		n, err := cost(v)
		if err != nil {
			scanErr = blockErr("drop", ino, idx, err)
			return false
		}
		b := st.bytesOf(n, stamp)
		delta.Cached -= b.Cached
		delta.Dirty -= b.Dirty
		gone = append(gone, append([]byte(nil), k...))
		return true
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return Bytes{}, false, err
	}
	for _, k := range gone {
		if err := tx.Delete(k); err != nil {
			return Bytes{}, false, err
		}
	}
	return delta, more, nil
}

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
// does not matter to a write. Blocks left with nothing present are
// deleted. With restamp the blocks changed are stamped st.Gen, else they
// keep their stamps.
func edit(tx kv.Txn, op string, ino uint64, off, n int64, needOld bool, st Stamp, restamp bool,
	change func(b *block, lo, hi int64, abs int64)) (delta Bytes, err error) {
	return editExisting(tx, op, ino, off, n, needOld, math.MaxInt64, st, restamp, change)
}

// editExisting is edit knowing that no block of index exist or more is
// stored, so that it looks none of them up.
func editExisting(tx kv.Txn, op string, ino uint64, off, n int64, needOld bool, exist int64, st Stamp, restamp bool,
	change func(b *block, lo, hi int64, abs int64)) (delta Bytes, err error) {
	if n <= 0 {
		return Bytes{}, nil
	}
	// A window of blocks at a time, so that a huge range costs no memory
	// in proportion to its length (only its batch does).
	const window = 1024
	first, last := off/BlockSize, (off+n-1)/BlockSize
	w := editWindow{tx: tx, op: op, ino: ino, off: off, n: n, needOld: needOld, exist: exist, st: st, restamp: restamp}
	for lo := first; lo <= last; lo += window {
		d, err := w.apply(lo, min(lo+window-1, last), change)
		delta = delta.Add(d)
		if err != nil {
			return delta, err
		}
	}
	return delta, nil
}

// editWindow is one edit of [off, off+n), applied a window of blocks at
// a time.
type editWindow struct {
	tx      kv.Txn
	op      string
	ino     uint64
	off, n  int64
	needOld bool
	exist   int64
	st      Stamp
	restamp bool
}

// apply is the edit for the blocks first to last of [off, off+n).
func (w *editWindow) apply(first, last int64, change func(b *block, lo, hi int64, abs int64)) (delta Bytes, err error) {
	count := last - first + 1
	olds := make([][]byte, count) // old values the edit needs
	old := make([]oldBlock, count)
	if first < w.exist { // else no block of the window is stored
		if err := w.scanOld(first, min(last+1, w.exist), olds, old); err != nil {
			return Bytes{}, err
		}
	}
	var b block
	for idx := first; idx <= last; idx++ {
		i := idx - first
		start := idx * BlockSize
		lo, hi := max(w.off, start)-start, min(w.off+w.n, start+BlockSize)-start
		if v := olds[i]; v != nil {
			if err := b.decode(v); err != nil {
				return delta, blockErr(w.op, w.ino, idx, err)
			}
		} else {
			b.reset()
		}
		change(&b, lo, hi, start+lo)
		b.settle()
		b.stamp = old[i].stamp
		if w.restamp {
			b.stamp = w.st.Gen
		}
		key := blockKey(w.ino, idx)
		if n := b.encodedLen(); n == 0 {
			if old[i].stored {
				if err := w.tx.Delete(key); err != nil {
					return delta, err
				}
			}
		} else if err := w.tx.SetWith(key, n, func(v []byte) { b.encode(v[:0]) }); err != nil {
			return delta, err
		}
		now := Bytes{}
		if len(b.ext) > 0 {
			now = w.st.bytesOf(b.cost(), b.stamp)
		}
		delta = delta.Add(Bytes{now.Cached - old[i].was.Cached, now.Dirty - old[i].was.Dirty})
	}
	return delta, nil
}

// oldBlock is what an edit knows of a block before it: whether it is
// stored, what it counts for and its stamp.
type oldBlock struct {
	stored bool
	was    Bytes
	stamp  uint64
}

// scanOld reads the blocks [first, end) for apply: what each is, and the
// old value of those the edit needs (all with needOld, else those it
// covers only in part).
func (w *editWindow) scanOld(first, end int64, olds [][]byte, old []oldBlock) error {
	var bad error
	err := w.tx.Scan(blockKey(w.ino, first), blockKey(w.ino, end), func(k, v []byte) bool {
		idx := blockIndex(k)
		c, err := cost(v)
		var stamp uint64
		if err == nil {
			stamp, err = stampOf(v)
		}
		if err != nil {
			bad = blockErr(w.op, w.ino, idx, err)
			return false
		}
		i := idx - first
		old[i] = oldBlock{stored: true, was: w.st.bytesOf(c, stamp), stamp: stamp}
		start := idx * BlockSize
		whole := w.off <= start && start+BlockSize <= w.off+w.n
		if w.needOld || !whole {
			olds[i] = append([]byte(nil), v...)
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
