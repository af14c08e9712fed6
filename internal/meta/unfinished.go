package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"bucketfs/internal/kv"
	"bucketfs/internal/tier"
)

// Unfinished writes: an append kept whole or not at all across a crash
// without a sync.
//
// The kernel hands a write(2) over in pieces (Continues), each its own
// transaction. A crash after the write returned could keep its first
// pieces and lose the rest: a state the writer never saw. Syncing the
// store at the write's last piece prevents that, at the cost of a disk
// flush per such write. Most appends are such writes: the kernel sends
// the part of the page they start inside alone (the head), then the rest.
// So a head that lies at or past the end of the file sets instead a
// provisional marker (kv.ProvisionalTxn) of the file's size, mode and
// times before it, and of the writer's chain:
//
//	W<ino>  chain, from, end, gen, mode, mtime, ctime (varints)
//
// The store deletes the marker with the next commit of anything else (the
// piece that ends the write among them) and before any Sync. So a marker
// found at the next start was set by the last commit the store kept: the
// head's write lost the rest of its pieces, and nothing was kept after
// them. Open then sets the file back to its size, mode and times before
// the head (undoUnfinished): the file system is as it was just before
// the write began, a moment it really had, and after the last Sync, as
// the README promises.
//
// The piece after the head learns whether the marker is still there and
// is its writer's (Piece.Chained): if so, no commit came between the two,
// and its own commit, which deletes the marker, makes the write whole at
// once. If not, or if the write has more pieces still, the writer syncs
// at the write's last piece as before (vfs's endPieces). A chain is thus
// one head and the piece after it: a crash takes back at most the last
// write(2) of a file, and only one that a sync would have made whole.
// The marker is only set on a store whose Txn is a kv.ProvisionalTxn
// (Pebble); on PostgreSQL every commit is durable when it returns, and a
// write that returned is whole.

// pUnfinished starts the key of an unfinished write's marker.
const pUnfinished = 'W'

func unfinishedKey(ino Ino) []byte {
	return kv.AppendUint64([]byte{pUnfinished}, uint64(ino))
}

// unfinished is the marker of an unfinished write of one file: the
// writer's chain, the file's size, mode and times before the head (from,
// mode, mtime, ctime), and its size and generation after it (end, gen).
type unfinished struct {
	chain        uint64
	from, end    int64
	gen          uint64
	mode         uint32
	mtime, ctime int64
}

func (u unfinished) encode() []byte {
	b := binary.AppendUvarint(nil, u.chain)
	b = binary.AppendVarint(b, u.from)
	b = binary.AppendVarint(b, u.end)
	b = binary.AppendUvarint(b, u.gen)
	b = binary.AppendUvarint(b, uint64(u.mode))
	b = binary.AppendVarint(b, u.mtime)
	return binary.AppendVarint(b, u.ctime)
}

func decodeUnfinished(b []byte) (unfinished, error) {
	var u unfinished
	var mode uint64
	for _, f := range []any{&u.chain, &u.from, &u.end, &u.gen, &mode, &u.mtime, &u.ctime} {
		var n int
		switch f := f.(type) {
		case *uint64:
			*f, n = binary.Uvarint(b)
		case *int64:
			*f, n = binary.Varint(b)
		}
		if n <= 0 {
			return unfinished{}, errCorrupt
		}
		b = b[n:]
	}
	if len(b) != 0 || mode > 1<<32-1 {
		return unfinished{}, errCorrupt
	}
	u.mode = uint32(mode)
	return u, nil
}

// Piece is what WritePiece did besides writing.
type Piece struct {
	Inode Inode
	// Chained: the file's marker was there, set by the same chain, when
	// the piece's transaction began: the commit before it was that
	// chain's head, and the piece's own commit makes the two whole.
	Chained bool
	// Head: the piece set a marker: a head at the end of the file, with
	// the rest of its write to come (unfinished.go).
	Head bool
}

// head tells whether a write of [off, off+n) is a head: the part of the
// page it starts inside, past the page's beginning, that the kernel sends
// alone (the first case of Continues).
func head(off, n int64) bool {
	const page = tier.BlockSize
	end := off + n
	return n > 0 && off%page != 0 && end%page == 0 && end-off/page*page == page
}

// markPiece runs in the transaction of a piece of a write of chain (0:
// none): before is the file as the transaction first loaded it, after as
// the piece leaves it; continues says more of the write is to come.
func (s *Store) markPiece(tx kv.Txn, chain uint64, before, after *Inode, off, n int64, continues bool) (p Piece, err error) {
	ptx, ok := tx.(kv.ProvisionalTxn)
	if !ok || chain == 0 {
		return Piece{}, nil
	}
	key := unfinishedKey(before.Ino)
	v, err := tx.Get(key)
	switch {
	case err == nil:
		held, err := decodeUnfinished(v)
		if err != nil {
			return Piece{}, fmt.Errorf("unfinished write of inode %d: %w", before.Ino, err)
		}
		// end and gen hold whenever the marker is there: any commit
		// that changed the file since would have deleted it.
		p.Chained = held.chain == chain && held.end == before.Size && held.gen == before.Gen
	case !errors.Is(err, kv.ErrNotFound):
		return Piece{}, err
	}
	if !continues || !head(off, n) || off < before.Size {
		// The commit deletes the marker, if there is one.
		return p, nil
	}
	p.Head = true
	u := unfinished{chain: chain, from: before.Size, end: after.Size, gen: after.Gen,
		mode: before.Mode, mtime: before.Mtime, ctime: before.Ctime}
	return p, ptx.SetProvisional(key, u.encode())
}

// undoUnfinished sets back every file whose write the last run left
// unfinished and whose later pieces the crash lost (see above) to its
// size, mode and times before that write, counting them in s.undo. It
// runs when the Store opens, before anything reads the files.
func (s *Store) undoUnfinished(ctx context.Context) error {
	var inos []Ino
	err := s.kv.View(ctx, func(r kv.Reader) error {
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
		return err
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
			if errors.Is(err, syscall.ENOENT) {
				return nil
			}
			if err != nil {
				return err
			}
			if !in.IsRegular() || in.Size != u.end || in.Gen != u.gen || u.from > in.Size {
				// Not the file the marker describes, which should not
				// be: whatever changed it after the head deleted the
				// marker. The file stays as it is; the marker goes.
				s.undo.skipped++
				return nil
			}
			delta, err := cutData(tx, &in, u.from)
			if err != nil {
				return err
			}
			in.hold(delta)
			in.Size = u.from
			in.Mode = u.mode
			in.Mtime, in.Ctime = u.mtime, u.ctime
			in.UnfinishedWrite = 0
			undone = true
			return s.markChanged(tx, &in, DataChange, s.now(), &kept)
		})
		if err != nil {
			return fmt.Errorf("undo the unfinished write of inode %d: %w", ino, err)
		}
		s.reportKept(kept)
		if undone {
			s.undo.done++
		}
	}
	return nil
}

// UndoneWrites is how many files Open set back to their state before a
// write(2) that a crash cut short between its pieces, and how many
// markers of such writes it found not to describe their file (and left
// the file as it was).
func (s *Store) UndoneWrites() (undone, skipped int) { return s.undo.done, s.undo.skipped }
