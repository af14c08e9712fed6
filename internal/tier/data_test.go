package tier

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	kvpebble "bucketfs/internal/kv/pebble"
	"bucketfs/internal/kv/testkv"

	"golang.org/x/sys/unix"
)

func openKV(t testing.TB) kv.Store {
	t.Helper()
	db, err := testkv.OpenOptions(t, t.TempDir(), kvpebble.Options{CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	t.Cleanup(func() { db.Close() })
	return db
}

// model is what one file must read as: its content, the base object it was
// imported from (or last exported as), and Backed.
type model struct {
	want   []byte
	base   []byte
	backed int64
	held   Bytes // the sum of the deltas the functions returned
	st     Stamp // Gen: the generation of the last change
}

// change is the Stamp of the next file-side change.
func (m *model) change() Stamp {
	m.st.Gen++
	return m.st
}

// readAll reads the whole file through Read, taking missing ranges from
// the base object as a caller does.
func readAll(t *testing.T, db kv.Store, ino uint64, m *model) []byte {
	t.Helper()
	p := make([]byte, len(m.want))
	err := db.View(context.Background(), func(r kv.Reader) error {
		missing, err := Read(r, ino, p, 0, m.backed)
		if err != nil {
			return err
		}
		for _, g := range missing {
			if g.End() > m.backed {
				t.Fatalf("missing range %v reaches past backed %d", g, m.backed)
			}
			copy(p[g.Off:g.End()], m.base[g.Off:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stored sums what the blocks of ino store (their cost), in all and in
// blocks stamped above exported, and checks that no block holds a byte at
// or past size.
func stored(t *testing.T, db kv.Store, ino uint64, size int64, exported uint64) (n Bytes) {
	t.Helper()
	err := db.View(context.Background(), func(r kv.Reader) error {
		if err := ranges(r, "test", ino, 0, 1<<62, func(rg Range, _ []byte) {
			if rg.End() > size {
				t.Fatalf("block range %v past the size %d", rg, size)
			}
		}); err != nil {
			return err
		}
		p := blockPrefix(ino)
		return r.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
			c, err := cost(v)
			if err != nil {
				t.Fatal(err)
			}
			stamp, err := stampOf(v)
			if err != nil {
				t.Fatal(err)
			}
			n.Cached += c
			if stamp > exported {
				n.Dirty += c
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRandomEditsReadBackTheModelAndCountWhatTheyStore applies random
// writes, fills, punches, truncates, exports and drops of exported blocks
// to a file imported from a base object, and checks after every step the
// rules the package keeps: a read (missing ranges taken from the base)
// returns exactly the file's content, the deltas sum to what the blocks
// hold, in all and unexported, and no block holds bytes past the size.
func TestRandomEditsReadBackTheModelAndCountWhatTheyStore(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		db := openKV(t)
		const ino = 42
		base := make([]byte, rng.IntN(5*BlockSize))
		for i := range base {
			base[i] = byte(rng.IntN(255) + 1)
		}
		m := &model{want: bytes.Clone(base), base: base, backed: int64(len(base))}
		if rng.IntN(3) == 0 { // a file made on the file side
			m.want, m.base, m.backed = nil, nil, 0
		}
		for step := 0; step < 60; step++ {
			// The step is chosen, and the model changed, outside the
			// transaction: its fn may run more than once (kvreplay).
			size := int64(len(m.want))
			var edit func(tx kv.Txn) (Bytes, error)
			var op string
			switch rng.IntN(7) {
			case 0, 1:
				off := rng.Int64N(size + 2*BlockSize)
				p := make([]byte, rng.IntN(3*BlockSize)+1)
				for i := range p {
					p[i] = byte(rng.IntN(256))
				}
				op = "write"
				st := m.change()
				edit = func(tx kv.Txn) (Bytes, error) { return Write(tx, ino, p, off, size, st) }
				if end := off + int64(len(p)); end > size {
					m.want = append(m.want, make([]byte, end-size)...)
				}
				copy(m.want[off:], p)
			case 2:
				if size == 0 {
					continue
				}
				off := rng.Int64N(size)
				n := min(rng.Int64N(2*BlockSize)+1, size-off)
				op = "punch"
				backed, st := m.backed, m.change()
				edit = func(tx kv.Txn) (Bytes, error) { return Punch(tx, ino, off, n, backed, st) }
				clear(m.want[off : off+n])
			case 3:
				ns := rng.Int64N(size + BlockSize + 1)
				op = "truncate"
				if ns < size {
					held, st := m.held, m.change()
					edit = func(tx kv.Txn) (Bytes, error) { return Cut(tx, ino, ns, held, st) }
					m.want = m.want[:ns]
					m.backed = min(m.backed, ns)
				} else {
					m.want = append(m.want, make([]byte, ns-size)...)
				}
			case 4:
				if m.backed == 0 {
					continue
				}
				off := rng.Int64N(m.backed)
				n := min(rng.Int64N(2*BlockSize)+1, int64(len(m.base))-off)
				op = "fill"
				p, backed, st := m.base[off:off+n], m.backed, m.st
				edit = func(tx kv.Txn) (Bytes, error) { return Fill(tx, ino, p, off, backed, st) }
			case 5:
				// An export of the file as it is: the bucket holds
				// it all, and no block is unexported.
				op = "export"
				m.base, m.backed = bytes.Clone(m.want), size
				m.st.Exported = m.st.Gen
				d := Bytes{Dirty: -m.held.Dirty}
				edit = func(kv.Txn) (Bytes, error) { return d, nil }
			case 6:
				op = "drop exported"
				backed, st := m.backed, m.st
				edit = func(tx kv.Txn) (Bytes, error) { return DropExported(tx, ino, backed, st) }
			}
			var delta Bytes
			err := db.Update(context.Background(), func(tx kv.Txn) error {
				if edit == nil {
					delta = Bytes{}
					return nil
				}
				var err error
				delta, err = edit(tx)
				return err
			})
			if err != nil {
				t.Fatalf("seed %d step %d %s: %v", seed, step, op, err)
			}
			if op == "drop exported" && delta.Dirty != 0 {
				t.Fatalf("seed %d step %d: dropping exported blocks changes the unexported bytes by %d", seed, step, delta.Dirty)
			}
			m.held = m.held.Add(delta)
			if got := readAll(t, db, ino, m); !bytes.Equal(got, m.want) {
				t.Fatalf("seed %d step %d after %s: the file reads differently from its model", seed, step, op)
			}
			if n := stored(t, db, ino, int64(len(m.want)), m.st.Exported); n != m.held {
				t.Fatalf("seed %d step %d after %s: blocks hold %+v bytes, the deltas say %+v", seed, step, op, n, m.held)
			}
		}
	}
}

func TestSeekFindsWrittenDataAndHolesPastBacked(t *testing.T) {
	db := openKV(t)
	const ino = 7
	// A local file: data at [8192, 8292), hole elsewhere, size 20000.
	err := db.Update(context.Background(), func(tx kv.Txn) error {
		_, err := Write(tx, ino, bytes.Repeat([]byte{1}, 100), 2*BlockSize, 0, Stamp{Gen: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(context.Background(), func(r kv.Reader) error {
		if got, err := SeekData(r, ino, 0, 20000, 0); err != nil || got != 2*BlockSize {
			t.Errorf("SeekData(0) = %d, %v; want %d", got, err, 2*BlockSize)
		}
		if got, err := SeekHole(r, ino, 2*BlockSize, 20000, 0); err != nil || got != 2*BlockSize+100 {
			t.Errorf("SeekHole(8192) = %d, %v; want %d", got, err, 2*BlockSize+100)
		}
		if _, err := SeekData(r, ino, 9000, 20000, 0); !errors.Is(err, unix.ENXIO) {
			t.Errorf("SeekData in the trailing hole: %v, want ENXIO", err)
		}
		// Backed bytes are data.
		if got, err := SeekHole(r, ino, 0, 20000, 5000); err != nil || got != 5000 {
			t.Errorf("SeekHole(0) with backed 5000 = %d, %v; want 5000", got, err)
		}
		return nil
	})
}

func TestACorruptBlockIsAnErrorNotWrongBytes(t *testing.T) {
	db := openKV(t)
	const ino = 9
	for _, v := range [][]byte{{}, {kindZero, 0}, {kindRanges, 1, 0}, {9, 1, 2}, {kindFull | stamped, 1, 2}} {
		err := db.Update(context.Background(), func(tx kv.Txn) error { return tx.Set(blockKey(ino, 0), v) })
		if err != nil {
			t.Fatal(err)
		}
		err = db.View(context.Background(), func(r kv.Reader) error {
			_, err := Read(r, ino, make([]byte, 10), 0, 0)
			return err
		})
		if !errors.Is(err, errCorruptBlock) {
			t.Errorf("reading block %v: %v, want a corrupt block error", v, err)
		}
	}
}

// A punched range of an imported file is stored as zero blocks, which cost
// nothing in the tier's usage (a 2 MiB punch once counted 2 MiB, and the
// writes that followed failed with ENOSPC), and edits longer than one
// window of blocks read back right.
func TestAPunchCostsNothingAndLongEditsReadBack(t *testing.T) {
	db := openKV(t)
	const ino, size = 5, 6 << 20
	base := bytes.Repeat([]byte{7}, size)
	m := &model{want: bytes.Clone(base), base: base, backed: size}
	var d Bytes
	st := m.change()
	err := db.Update(context.Background(), func(tx kv.Txn) (err error) {
		d, err = Punch(tx, ino, 4096, 5<<20, size, st)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m.held = m.held.Add(d)
	clear(m.want[4096 : 4096+5<<20])
	if m.held != (Bytes{}) {
		t.Fatalf("a 5 MiB punch costs %+v bytes", m.held)
	}
	if got := readAll(t, db, ino, m); !bytes.Equal(got, m.want) {
		t.Fatal("the punched file reads wrong")
	}
	p := bytes.Repeat([]byte{9}, 5<<20+100)
	st = m.change()
	err = db.Update(context.Background(), func(tx kv.Txn) (err error) {
		d, err = Write(tx, ino, p, 1000, size, st)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m.held = m.held.Add(d)
	copy(m.want[1000:], p)
	if got := readAll(t, db, ino, m); !bytes.Equal(got, m.want) {
		t.Fatal("a 5 MiB write reads back wrong")
	}
	if n := stored(t, db, ino, size, m.st.Exported); n != m.held {
		t.Fatalf("blocks hold %+v bytes, the deltas say %+v", n, m.held)
	}
}
