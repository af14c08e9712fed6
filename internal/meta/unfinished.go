package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// Unfinished writes: the pieces of one write(2) that extends a file are
// kept whole or not at all across a crash without a sync each.
//
// The kernel hands a write(2) over in pieces (Continues), each its own
// transaction. A crash after the write returned could keep its first
// pieces and lose the rest: a state the writer never saw. Syncing the
// store at the write's last piece prevents that, at the cost of a disk
// flush per such write (most appends: their first piece fills the page
// they start inside). For a write that only extends the file, each piece
// that announces more to come sets instead a provisional marker
// (kv.ProvisionalTxn) holding the file's size and times before the write:
//
//	W<ino>  from, end, gen, mtime, ctime (varints)
//
// The store deletes the marker with the next commit of anything else,
// the piece that ends the write included, and before any Sync; a piece
// that continues the write sets it again, keeping from. So a marker
// found at the next start was set by the last commit the store kept:
// the write's later pieces, and everything after them, were lost. Open
// then cuts the file back to from and restores its times: the file
// system is as it was just before the write began (undoUnfinished), a
// moment it really had, and after the last Sync, as the README promises.
//
// A write whose pieces were not one uninterrupted run of commits (another
// commit, or a Sync, came between two of them and deleted the marker), or
// that overwrites bytes the file had, still syncs at its last piece (vfs).
// The marker is only kept on a store whose Txn is a kv.ProvisionalTxn
// (Pebble); on PostgreSQL every commit is durable when it returns, and a
// write that returned is whole.

// pUnfinished starts the key of an unfinished write's marker.
const pUnfinished = 'W'

func unfinishedKey(ino Ino) []byte {
	return kv.AppendUint64([]byte{pUnfinished}, uint64(ino))
}

// unfinished is the marker of an unfinished write of one file: its size
// and times before the write's first piece (from, mtime, ctime), and its
// size and generation after the last piece committed (end, gen).
type unfinished struct {
	from, end    int64
	gen          uint64
	mtime, ctime int64
}

func (u unfinished) encode() []byte {
	b := binary.AppendVarint(nil, u.from)
	b = binary.AppendVarint(b, u.end)
	b = binary.AppendUvarint(b, u.gen)
	b = binary.AppendVarint(b, u.mtime)
	return binary.AppendVarint(b, u.ctime)
}

func decodeUnfinished(b []byte) (unfinished, error) {
	var u unfinished
	for _, f := range []*int64{&u.from, &u.end, nil, &u.mtime, &u.ctime} {
		if f == nil {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return unfinished{}, errCorrupt
			}
			u.gen, b = v, b[n:]
			continue
		}
		v, n := binary.Varint(b)
		if n <= 0 {
			return unfinished{}, errCorrupt
		}
		*f, b = v, b[n:]
	}
	if len(b) != 0 {
		return unfinished{}, errCorrupt
	}
	return u, nil
}

// Piece is what WritePiece did besides writing.
type Piece struct {
	Inode Inode
	// Chained: the file's marker was there when the piece's transaction
	// began, so no commit came between the piece before (which set it)
	// and this one.
	Chained bool
	// Extends: the piece only extended the file, on a store that keeps
	// markers, so it set the marker (more to come) or its commit deleted
	// it (the last piece): a crash keeps it with all the pieces of an
	// uninterrupted chain before it, or undoes them all.
	Extends bool
}

// markPiece runs in the transaction of a piece of a write: before is the
// file before the piece (in its first state loaded in the transaction),
// after as the piece leaves it; continues says more of the write follows.
func (s *Store) markPiece(tx kv.Txn, before, after *Inode, off int64, continues bool) (p Piece, err error) {
	ptx, ok := tx.(kv.ProvisionalTxn)
	if !ok {
		return Piece{}, nil
	}
	key := unfinishedKey(before.Ino)
	u := unfinished{from: before.Size, mtime: before.Mtime, ctime: before.Ctime}
	v, err := tx.Get(key)
	switch {
	case err == nil:
		held, err := decodeUnfinished(v)
		if err != nil {
			return Piece{}, fmt.Errorf("unfinished write of inode %d: %w", before.Ino, err)
		}
		if held.end == before.Size && held.gen == before.Gen {
			p.Chained = true
			u.from, u.mtime, u.ctime = held.from, held.mtime, held.ctime
		}
	case !errors.Is(err, kv.ErrNotFound):
		return Piece{}, err
	}
	p.Extends = off >= before.Size
	if !p.Extends || !continues {
		// The commit deletes the marker, if there is one: the write
		// ends here, or it changed bytes a cut cannot give back.
		return p, nil
	}
	u.end, u.gen = after.Size, after.Gen
	return p, ptx.SetProvisional(key, u.encode())
}

// undoUnfinished cuts back every file whose write the last run left
// unfinished and whose later pieces the crash lost (see above), to its
// size and times before that write. It runs when the Store opens, before
// anything reads the files. It returns how many files it cut back.
func (s *Store) undoUnfinished(ctx context.Context) (n int, err error) {
	var inos []Ino
	err = s.kv.View(ctx, func(r kv.Reader) error {
		inos = inos[:0]
		lower := []byte{pUnfinished}
		return r.Scan(lower, kv.PrefixEnd(lower), func(k, _ []byte) bool {
			if len(k) == 9 {
				inos = append(inos, Ino(kv.Uint64(k[1:])))
			}
			return true
		})
	})
	if err != nil {
		return 0, err
	}
	for _, ino := range inos {
		var kept keptFile
		var undone bool
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			kept, undone = keptFile{}, false
			key := unfinishedKey(ino)
			v, err := tx.Get(key)
			if errors.Is(err, kv.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := tx.Delete(key); err != nil {
				return err
			}
			u, err := decodeUnfinished(v)
			if err != nil {
				return fmt.Errorf("unfinished write of inode %d: %w", ino, err)
			}
			in, err := s.getInode(tx, ino)
			if err != nil || !in.IsRegular() || in.Size != u.end || in.Gen != u.gen || u.from > in.Size {
				// Not the file the marker describes: what changed it
				// after was kept, and so was the whole write.
				return nil
			}
			delta, err := cutData(tx, &in, u.from)
			if err != nil {
				return err
			}
			in.hold(delta)
			in.Size = u.from
			in.Mtime, in.Ctime = u.mtime, u.ctime
			in.UnfinishedWrite = 0
			undone = true
			return s.markChanged(tx, &in, DataChange, s.now(), &kept)
		})
		if err != nil {
			return n, fmt.Errorf("undo the unfinished write of inode %d: %w", ino, err)
		}
		s.reportKept(kept)
		if undone {
			n++
		}
	}
	return n, nil
}
