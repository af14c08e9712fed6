package meta

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"bucketfs/internal/kv"
)

// No key that every operation takes.
//
// Several servers may share one kv (issue 23: PostgreSQL, whose
// serializable transactions abort one of two that touch a key the other
// wrote). A key that every create, write or unlink read and wrote would
// make any two operations of the file system conflict, wherever they
// happen. So there is none: operations on different directories and
// files through different Stores touch disjoint keys
// (TestOperationsInTwoDirectoriesThroughTwoServersTouchNoCommonKey).
// What such keys would keep is kept so:
//
//   - Inode numbers. c/next is the first number no Store has claimed. A
//     Store claims inoClaim numbers at a time in a transaction of its own
//     (Open claims the first range) and gives them out from memory
//     (inoRange). Invariant: a number is given out at most once, ever, by
//     one Store, from a range that only it claimed; claims only move c/next
//     up, and a claim commits before any transaction that uses a number
//     of it, so a crash that loses the claim loses those too. Numbers a
//     Store claimed and did not give out before it stopped are skipped for
//     ever: inode numbers are unique and stable, not dense.
//   - Counters (the export queue's length, Usage). Each is the sum of the
//     values under its prefix, c/queued/ and c/usage/. A transaction that
//     changes what a counter counts writes the difference in the same
//     transaction as a delta of its own, c/queued/<store><seq>, which it
//     does not read first, so the sum is exact in every state the store
//     can be in, after a crash too; a reader adds up the values (one short
//     scan, outside any write: see Limits). <store> names the Store (the
//     first inode number it claimed, which no other Store ever claims) and
//     <seq> counts its deltas, so every delta key is written once. Not
//     reading matters on PostgreSQL beyond the keys: its SERIALIZABLE
//     transactions lock what they read by index page, so two transactions
//     that each read and wrote a cell of one page (all cells are one or
//     two pages) would abort one another although their keys differ;
//     writes alone never conflict so. A Store folds its deltas into one
//     cell of its own, c/queued/<store><0> (foldDeltas, after every
//     deltaFold of them, in a transaction of its own), and Open folds
//     every key of a counter (the cells and deltas of Stores that are
//     gone, the single key earlier versions kept, c/queued or c/usage)
//     into its cell, so keys do not pile up. Those two are the only
//     transactions that read the counters' keys inside a write, and
//     Open's the only one that touches other Stores' keys.

// inoClaim is how many inode numbers a Store claims at a time.
const inoClaim = 1024

// deltaFold is how many deltas a Store writes before it folds them
// into its cell (foldDeltas).
const deltaFold = 256

// deltaSeq gives out a Store's delta keys and folds them (foldDeltas).
type deltaSeq struct {
	seq, written atomic.Uint64
	due          atomic.Bool // a fold is due (delta)
	folding      sync.Mutex
}

// inoRange is the inode numbers a Store has claimed and not given out:
// [next, end).
type inoRange struct {
	claiming  sync.Mutex // held while one goroutine claims a new range
	mu        sync.Mutex // guards next and end
	next, end Ino
}

// take gives out the next number of the range, if any is left.
func (r *inoRange) take() (Ino, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= r.end {
		return 0, false
	}
	r.next++
	return r.next - 1, true
}

func (r *inoRange) left() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return uint64(r.end - r.next)
}

// set makes [first, first+n) the range, skipping what was left of the old one.
func (r *inoRange) set(first Ino, n uint64) {
	r.mu.Lock()
	r.next, r.end = first, first+Ino(n)
	r.mu.Unlock()
}

// claimInos takes n numbers from c/next in tx, the first of which it
// returns. They are the caller's once tx commits.
func claimInos(tx kv.Txn, n uint64) (Ino, error) {
	v, err := tx.Get(keyNext)
	if err != nil {
		return 0, fmt.Errorf("claim inode numbers: %w", err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("claim inode numbers: %w", errCorrupt)
	}
	first := kv.Uint64(v)
	return Ino(first), tx.Set(keyNext, kv.AppendUint64(nil, first+n))
}

// reserveInos makes sure the Store holds at least n inode numbers not
// given out, claiming a new range in a transaction of its own when it
// does not. It is called before the transaction that allocates (never
// inside one: kv transactions do not nest).
func (s *Store) reserveInos(ctx context.Context, n int) error {
	s.inos.claiming.Lock()
	defer s.inos.claiming.Unlock()
	if s.inos.left() >= uint64(n) {
		return nil
	}
	size := max(inoClaim, uint64(n))
	var first Ino
	err := s.kv.Update(ctx, func(tx kv.Txn) (err error) {
		first, err = claimInos(tx, size)
		return err
	})
	if err != nil {
		return err
	}
	s.inos.set(first, size)
	return nil
}

// allocIno gives out an inode number: the next of the Store's range, or,
// when other transactions took the numbers reserveInos made sure of, one
// claimed from c/next in tx itself. Either way nothing can hold the number
// already (see the invariant above), so a new inode has nothing to replace
// (enqueueNew relies on it).
func (s *Store) allocIno(tx kv.Txn) (Ino, error) {
	if ino, ok := s.inos.take(); ok {
		return ino, nil
	}
	return claimInos(tx, 1)
}

// NextIno returns the first inode number no Store has claimed. Numbers at
// or above it name no inode; after a crash that lost the end of the log,
// they may have named inodes that are gone and will be given out again.
func (s *Store) NextIno(ctx context.Context) (Ino, error) {
	var next Ino
	err := s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyNext)
		if err != nil {
			return fmt.Errorf("next inode: %w", err)
		}
		next = Ino(kv.Uint64(v))
		return nil
	})
	return next, err
}

// counter is one sum the store keeps in cells.
type counter struct {
	prefix []byte // of the cells: prefix<store><sub>
	legacy []byte // the single key that held it before cells
	width  int    // int64 values in a cell
}

var (
	// queuedCounter counts the inodes in the export queue (q keys).
	queuedCounter = counter{prefix: []byte("c/queued/"), legacy: []byte("c/queued"), width: 1}
	// usageCounter is Usage: Total, Dirty.
	usageCounter = counter{prefix: []byte("c/usage/"), legacy: []byte("c/usage"), width: 2}
)

// cell is the key of the Store's cell of c, into which its deltas fold.
func (s *Store) cell(c counter) []byte {
	return append(s.ownKeys(c), 0)
}

// ownKeys is the prefix of the Store's cell and deltas of c.
func (s *Store) ownKeys(c counter) []byte {
	return kv.AppendUint64(append([]byte(nil), c.prefix...), s.cells)
}

// delta is the key of a new delta of c: ownKeys, then a sequence number
// given out once (its 8 bytes tell it from the cell's one). Every
// deltaFold of them make a fold due, which foldingKV runs after the
// transaction that wrote the last one.
func (s *Store) delta(c counter) []byte {
	k := kv.AppendUint64(s.ownKeys(c), s.deltas.seq.Add(1))
	if s.deltas.written.Add(1)%deltaFold == 0 {
		s.deltas.due.Store(true)
	}
	return k
}

// foldingKV runs a fold of the Store's deltas when one is due, after the
// Update that made it due returned: in the caller's goroutine, so that no
// fold outlives the operations of the Store (nor the kv under it), and in
// a transaction of its own, so that the operation itself reads no counter.
type foldingKV struct {
	kv.Store
	s *Store
}

func (f foldingKV) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return f.UpdateSized(ctx, 0, fn)
}

func (f foldingKV) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	err := f.Store.UpdateSized(ctx, size, fn)
	if f.s.deltas.due.Load() {
		f.s.foldDeltas(context.WithoutCancel(ctx))
	}
	return err
}

// foldDeltas replaces the Store's deltas and cell of every counter by one
// cell holding their sum, in one transaction; one fold at a time. A delta
// written meanwhile by a transaction that commits later is not in the
// fold's state and stays for the next one. A fold that fails leaves the
// deltas (they still count) and the fold due.
func (s *Store) foldDeltas(ctx context.Context) {
	if !s.deltas.folding.TryLock() {
		return
	}
	defer s.deltas.folding.Unlock()
	s.deltas.due.Store(false)
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for _, c := range []counter{queuedCounter, usageCounter} {
			own := s.ownKeys(c)
			total := make([]int64, c.width)
			var keys [][]byte
			var bad error
			err := tx.Scan(own, kv.PrefixEnd(own), func(k, v []byte) bool {
				if err := decodeCell(v, c.width, total); err != nil {
					bad = fmt.Errorf("counter cell %q: %w", k, err)
					return false
				}
				keys = append(keys, bytes.Clone(k))
				return true
			})
			if err = cmp.Or(err, bad); err != nil {
				return err
			}
			for _, k := range keys {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			if err := tx.Set(s.cell(c), encodeCell(total)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.deltas.due.Store(true)
	}
}

// encodeCell is the value of a cell or delta holding v.
func encodeCell(v []int64) []byte {
	out := make([]byte, 0, 8*len(v))
	for _, n := range v {
		out = kv.AppendUint64(out, uint64(n))
	}
	return out
}

func decodeCell(v []byte, width int, into []int64) error {
	if len(v) != 8*width {
		return errCorrupt
	}
	for i := range width {
		into[i] += int64(kv.Uint64(v[8*i:]))
	}
	return nil
}

// add adds d (width values) to the counter as a new delta of s, written
// without a read (see the top of this file).
func (c counter) add(tx kv.Txn, s *Store, d ...int64) error {
	return tx.Set(s.delta(c), encodeCell(d))
}

// sum adds up the cells of c.
func (c counter) sum(r kv.Reader) ([]int64, error) {
	total := make([]int64, c.width)
	var bad error
	err := r.Scan(c.prefix, kv.PrefixEnd(c.prefix), func(k, v []byte) bool {
		if err := decodeCell(v, c.width, total); err != nil {
			bad = fmt.Errorf("counter cell %q: %w", k, err)
			return false
		}
		return true
	})
	if err == nil {
		err = bad
	}
	return total, err
}

// fold replaces every cell of c, and the single key of earlier versions,
// by one cell at into holding their sum.
func (c counter) fold(tx kv.Txn, into []byte) error {
	total, err := c.sum(tx)
	if err != nil {
		return err
	}
	v, err := tx.Get(c.legacy)
	switch {
	case err == nil:
		if err := decodeCell(v, c.width, total); err != nil {
			return fmt.Errorf("counter %q: %w", c.legacy, err)
		}
		if err := tx.Delete(c.legacy); err != nil {
			return err
		}
	case !errors.Is(err, kv.ErrNotFound):
		return err
	}
	if err := tx.DeleteRange(c.prefix, kv.PrefixEnd(c.prefix)); err != nil {
		return err
	}
	return tx.Set(into, encodeCell(total))
}

// addQueued adds d to the length of the export queue, for a change of
// ino's entry.
func (s *Store) addQueued(tx kv.Txn, ino Ino, d int64) error {
	return queuedCounter.add(tx, s, d)
}

// queuedCount is the length of the export queue.
func queuedCount(r kv.Reader) (int64, error) {
	n, err := queuedCounter.sum(r)
	if err != nil {
		return 0, err
	}
	return max(n[0], 0), nil
}

// addUsage adds d to Usage, for a change of ino.
func (s *Store) addUsage(tx kv.Txn, ino Ino, d Usage) error {
	if d == (Usage{}) {
		return nil
	}
	return usageCounter.add(tx, s, d.Total, d.Dirty)
}

func getUsage(r kv.Reader) (Usage, error) {
	u, err := usageCounter.sum(r)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Total: max(u[0], 0), Dirty: max(u[1], 0)}, nil
}
