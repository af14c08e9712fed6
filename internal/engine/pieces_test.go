package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Found by the crash checker: the kernel hands a large write(2) over in
// pieces of 1 MiB, each committed on its own without a sync, and a crash
// soon after the write returned kept its first pieces and lost the last:
// the file held a state its writer never saw returned. The rule: once a
// write of several pieces has returned, a crash keeps all of it or none
// of it. The pieces come as the kernel sends them (1 MiB requests, then
// the rest) or as one call of the vfs that splits them itself.
//
// An append that starts inside a page and ends in its second piece costs
// no sync (meta's unfinished.go): a power loss that keeps nothing
// unsynced takes all of it back, and one that keeps a random share of the
// log (each seed another) keeps all of it or none, never its first piece
// alone. Any other write in pieces (more than two, or whose pieces
// another commit came between, or that overwrites the file's bytes) is
// made durable by its last piece.
func TestAWriteOfSeveralPiecesIsKeptWholeOnceItReturned(t *testing.T) {
	const size = 2<<20 + 100
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	other := bytes.Repeat([]byte("FEDCBA9876543210"), size/16+1)[:size]
	base := uint64(time.Now().UnixNano())
	t.Logf("seed base %d", base)
	for _, c := range []struct {
		name   string
		start  int   // bytes of body written and synced before the write
		at     int   // where the write begins (the start, if it extends)
		pieces []int // lengths of the calls
		after  int   // between is done after this many pieces (0: never)
		// between: "sync" syncs the store, "create" creates another file
		between string
		// undoable: a crash may take the write back whole (no sync)
		undoable bool
	}{
		{"as the kernel sends it", 0, 0, []int{1 << 20, 1 << 20, 100}, 0, "", false},
		{"one call", 0, 0, []int{size}, 0, "", false},
		// A write(2) that starts inside a page the kernel's cache does not
		// hold whole: the kernel sends that page's part alone, then the
		// rest (found by the crash checker, separate store, seed
		// 320359682: an append of 320 KB kept its first 127 bytes).
		{"from inside a page", 3969, 3969, []int{127, 320315}, 0, "", true},
		{"from inside a page, more than 1 MiB", 3969, 3969, []int{127, 1 << 20, 100}, 0, "", false},
		{"a sync between the pieces", 3969, 3969, []int{127, 320315}, 1, "sync", false},
		{"another commit between the pieces", 3969, 3969, []int{127, 320315}, 1, "create", false},
		{"an overwrite", size, 3969, []int{127, 1 << 20, 100}, 0, "", false},
		{"an overwrite from inside a page", size, 3969, []int{127, 320315}, 0, "", false},
		{"an overwrite that extends", 1 << 20, 3969, []int{127, 1 << 20, 100}, 0, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			extends := c.undoable
			for i := range uint64(6) {
				seed := base + i
				pct := 0
				if i > 0 {
					pct = int(seed % 101)
				}
				before := body[:c.start]
				after := append(bytes.Clone(before[:c.at]), other[c.at:c.at+sum(c.pieces)]...)
				if len(before) > len(after) {
					after = append(after, before[len(after):]...)
				}
				got := crashAfterPieces(t, before, other, c.at, c.pieces, c.after, c.between, pct, seed)
				switch {
				case bytes.Equal(got, after):
				case bytes.Equal(got, before) && extends:
				default:
					t.Fatalf("seed %d (%d%% of the unsynced writes kept): after the power loss the file holds %d bytes, the first %d as the write left them; want the whole write (%d bytes)%s",
						seed, pct, len(got), commonPrefix(got, after), len(after), map[bool]string{true: " or the file before it (" + fmt.Sprint(len(before)) + " bytes)"}[extends])
				}
				if pct == 0 && extends && !bytes.Equal(got, before) {
					t.Fatalf("seed %d: a power loss that keeps nothing unsynced left the append whole: its last piece synced", seed)
				}
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func sum(ns []int) (s int) {
	for _, n := range ns {
		s += n
	}
	return s
}

// crashAfterPieces writes before to a new file and syncs it, writes
// other's bytes at at in calls of the given lengths (doing between after
// the first after of them, if not 0), closes the file, loses power
// keeping pct percent of what was not synced, and returns what the file
// holds after the restart.
func crashAfterPieces(t *testing.T, before, other []byte, at int, pieces []int, after int, between string, pct int, seed uint64) []byte {
	t.Helper()
	ctx := context.Background()
	e, cfg, mem := openCrashable(t)
	_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_WRONLY)
	if err == nil {
		_, err = h.Write(ctx, before, 0)
	}
	if err == nil {
		err = h.Fsync(ctx) // the file before the write is durable
	}
	off := at
	for i, n := range pieces {
		if err == nil {
			_, err = h.Write(ctx, other[off:off+n], int64(off))
		}
		if err == nil && i+1 == after {
			switch between {
			case "sync":
				err = e.FS.Meta().Sync(ctx)
			case "create":
				var o *vfs.Handle
				if _, o, err = e.FS.Create(ctx, vfs.Root, meta.RootIno, "other", 0o644, syscall.O_WRONLY); err == nil {
					o.Release(ctx)
				}
			}
		}
		off += n
	}
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	h.Release(ctx)
	got, attr := readAll(t, plCrash(t, e, cfg, mem, pct, seed), "f")
	if int64(len(got)) != attr.Size {
		t.Fatalf("read %d bytes of a file of %d", len(got), attr.Size)
	}
	return got
}

// openCrashable opens an engine whose metadata store lives on a crashable
// in-memory file system (crashableConfig).
func openCrashable(t *testing.T) (*Engine, Config, *pebblevfs.MemFS) {
	t.Helper()
	mem := pebblevfs.NewCrashableMem()
	cfg := crashableConfig(t, mem)
	e, err := Open(context.Background(), cfg)
	check(t, err)
	return e, cfg, mem
}

// plCrash loses power on e's store keeping pct percent of what was not
// synced, closes e, and opens an engine on what the disk kept.
func plCrash(t *testing.T, e *Engine, cfg Config, mem *pebblevfs.MemFS, pct int, seed uint64) *Engine {
	t.Helper()
	crashed := mem.CrashClone(pebblevfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, 1))})
	e.Close()
	cfg.MetaFS = crashed
	e2, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2.Close() })
	return e2
}

// readAll returns the bytes and attributes of the file name at the root.
func readAll(t *testing.T, e *Engine, name string) ([]byte, vfs.Attr) {
	t.Helper()
	ctx := context.Background()
	in, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.FS.Open(ctx, vfs.Root, in.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	got := make([]byte, in.Size+1)
	n, err := r.Read(ctx, got, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	at, err := e.FS.GetAttr(ctx, in.Ino)
	if err != nil {
		t.Fatal(err)
	}
	return got[:n], at
}

// notTheHeadAlone fails the test if the file f of e holds before and a1
// alone: the first piece of A's write, which returned, without the rest.
func notTheHeadAlone(t *testing.T, e *Engine, before, a1 []byte) {
	t.Helper()
	got, _ := readAll(t, e, "f")
	if bytes.Equal(got, append(bytes.Clone(before), a1...)) {
		t.Fatalf("after the power loss the file holds %d bytes: A's first piece without its second, though A's write returned", len(got))
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Found by review: the piece after a head took any marker of the file
// for its own chain. Here A's head is followed by a sync (which settles
// A's marker), then B truncates and writes a head of its own, whose
// marker A's second piece found: A's write returned without a sync, and
// a power loss kept A's first piece without its second. A marker names
// the writer's chain; another's does not end this write.
func TestAMarkerOfAnotherWriterDoesNotEndAWriteWithoutASync(t *testing.T) {
	ctx := context.Background()
	e, cfg, mem := openCrashable(t)
	before := bytes.Repeat([]byte("b"), 3969)
	a1, a2 := bytes.Repeat([]byte("A"), 127), bytes.Repeat([]byte("a"), 100)
	at, ha, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o666, syscall.O_WRONLY)
	check(t, err)
	_, err = ha.Write(ctx, before, 0)
	check(t, err)
	check(t, ha.Fsync(ctx))
	hb, err := e.FS.Open(ctx, vfs.Root, at.Ino, syscall.O_WRONLY)
	check(t, err)
	_, err = ha.Write(ctx, a1, 3969) // A's head
	check(t, err)
	check(t, e.FS.Meta().Sync(ctx)) // a checkpoint
	_, err = e.FS.SetAttr(ctx, vfs.Root, at.Ino, vfs.SetAttrIn{Valid: vfs.SetSize, Size: 4000})
	check(t, err)
	_, err = hb.Write(ctx, bytes.Repeat([]byte("B"), 96), 4000) // B's head
	check(t, err)
	_, err = ha.Write(ctx, a2, 4096) // A's second piece: A's write returns
	check(t, err)
	ha.Release(ctx)
	hb.Release(ctx)
	notTheHeadAlone(t, plCrash(t, e, cfg, mem, 0, 1), before, a1)
}

// Found by review: the undo set back size and times but not the mode,
// which the head of a writer without CAP_FSETID changed (it clears the
// set-id bits): the file had its old size and ctime with a mode it never
// had with them.
func TestAnUndoneWriteGetsBackTheSetIDBitsItsHeadCleared(t *testing.T) {
	ctx := context.Background()
	e, cfg, mem := openCrashable(t)
	before := bytes.Repeat([]byte("b"), 3969)
	at, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o4777, syscall.O_WRONLY)
	check(t, err)
	_, err = h.Write(ctx, before, 0)
	check(t, err)
	_, err = e.FS.SetAttr(ctx, vfs.Root, at.Ino, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o4777})
	check(t, err)
	check(t, h.Fsync(ctx))
	old, err := e.FS.GetAttr(ctx, at.Ino)
	check(t, err)
	user := vfs.Cred{Uid: 1000, Gid: 1000}
	_, cleared, err := h.WriteClearingSetID(ctx, user, bytes.Repeat([]byte("A"), 127), 3969)
	check(t, err)
	if !cleared {
		t.Fatal("the head did not clear the set-id bits: the test sets up nothing")
	}
	// The power fails in the middle of the next piece of the write (of 1
	// MiB, with more to come), after everything written reached the disk:
	// the store's log writer writes out full blocks only, so the end of
	// that piece's record is still in memory, torn, and the next open
	// drops the record, keeping the head and its marker.
	_, _, err = h.WriteClearingSetID(ctx, user, bytes.Repeat([]byte("a"), 1<<20), 4096)
	check(t, err)
	e2 := plCrash(t, e, cfg, mem, 100, 1)
	got, now := readAll(t, e2, "f")
	if n, _ := e2.Meta.UndoneWrites(); n != 1 || !bytes.Equal(got, before) {
		t.Fatalf("after the crash %d writes were undone and the file holds %d bytes; want the head undone (%d bytes)", n, len(got), len(before))
	}
	if now.Mode != old.Mode || now.Ctime != old.Ctime || now.Mtime != old.Mtime {
		t.Fatalf("the undone file has mode %o, ctime %d, mtime %d; it had %o, %d, %d before the write",
			now.Mode, now.Ctime, now.Mtime, old.Mode, old.Ctime, old.Mtime)
	}
}

// Found by review (older than the markers): on an O_APPEND handle,
// another writer's bytes between the two pieces of a write made its last
// piece land away from where its first ended; endPieces took it for a
// new write of one piece, and nothing synced it.
func TestAnAppendAnotherWriterCameBetweenIsKeptWhole(t *testing.T) {
	ctx := context.Background()
	e, cfg, mem := openCrashable(t)
	before := bytes.Repeat([]byte("b"), 3969)
	a1, a2 := bytes.Repeat([]byte("A"), 127), bytes.Repeat([]byte("a"), 100)
	at, hb, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o666, syscall.O_WRONLY)
	check(t, err)
	_, err = hb.Write(ctx, before, 0)
	check(t, err)
	check(t, hb.Fsync(ctx))
	ha, err := e.FS.Open(ctx, vfs.Root, at.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	check(t, err)
	_, err = ha.Write(ctx, a1, 0)
	check(t, err)
	check(t, e.FS.Meta().Sync(ctx)) // a checkpoint between the pieces
	_, err = hb.Write(ctx, []byte("0123456789"), 4096)
	check(t, err)
	_, err = ha.Write(ctx, a2, 0)
	check(t, err)
	ha.Release(ctx)
	hb.Release(ctx)
	notTheHeadAlone(t, plCrash(t, e, cfg, mem, 0, 1), before, a1)
}

// Found by review: a run of writes of whole 1 MiB pieces (dd bs=1M) was
// one chain, so a crash that kept all of them took all of them back. A
// marker is set by a head only: no crash undoes such writes, whatever
// share of the log it keeps.
func TestWritesOfWholePiecesAreNeverUndone(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	t.Logf("seed base %d", base)
	for i := range uint64(4) {
		seed := base + i
		ctx := context.Background()
		e, cfg, mem := openCrashable(t)
		_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o666, syscall.O_WRONLY)
		check(t, err)
		check(t, h.Fsync(ctx))
		for i := range 3 {
			_, err = h.Write(ctx, bytes.Repeat([]byte{byte('a' + i)}, 1<<20), int64(i)<<20)
			check(t, err)
		}
		h.Release(ctx)
		e2 := plCrash(t, e, cfg, mem, int(seed%101), seed)
		got, _ := readAll(t, e2, "f")
		if n, _ := e2.Meta.UndoneWrites(); n != 0 {
			t.Fatalf("seed %d: %d writes undone after writes of whole pieces (the file holds %d bytes)", seed, n, len(got))
		}
		if len(got)%(1<<20) != 0 {
			t.Fatalf("seed %d: the file holds %d bytes, not a number of the 1 MiB writes", seed, len(got))
		}
		for i := range len(got) >> 20 {
			if !bytes.Equal(got[i<<20:(i+1)<<20], bytes.Repeat([]byte{byte('a' + i)}, 1<<20)) {
				t.Fatalf("seed %d: MiB %d of the file is not the write made there", seed, i)
			}
		}
	}
}
