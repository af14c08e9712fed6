package sync

import (
	"bytes"
	"context"
	"testing"
	"time"

	"bucketfs/internal/meta"
)

// piecesCases are write(2)s as the kernel hands them over: start is where
// the write begins (the file holds that many bytes before it), pieces are
// the lengths of its requests.
var piecesCases = []struct {
	name   string
	start  int
	pieces []int
}{
	{"in pieces of 1 MiB", 0, []int{1 << 20, 1 << 20, 100}},
	// A write that starts inside a page the kernel does not hold whole:
	// that page's part first, then the rest.
	{"from inside a page", 3969, []int{127, 5000}},
	{"from inside a page, more than 1 MiB", 3969, []int{127, 1 << 20, 100}},
}

// piecesBody is the bytes of a test file: the first start bytes are the
// file before the write, the rest the write.
func piecesBody(start int, pieces []int) []byte {
	n := start
	for _, p := range pieces {
		n += p
	}
	body := bytes.Repeat([]byte("before the write"), start/16+1)[:start]
	return append(body, bytes.Repeat([]byte("the one write(2)"), (n-start)/16+1)[:n-start]...)
}

// forEachPiecesCase runs test for every case of piecesCases, once with a
// flush of everything and once with a flush of the file (one).
func forEachPiecesCase(t *testing.T, test func(t *testing.T, start int, pieces []int, one bool)) {
	for _, c := range piecesCases {
		for _, one := range []bool{false, true} {
			name := c.name + ", flush of everything"
			if one {
				name = c.name + ", flush of the file"
			}
			t.Run(name, func(t *testing.T) { test(t, c.start, c.pieces, one) })
		}
	}
}

// writeAllButLast makes file f of body's first start bytes, then writes
// every piece of the write but its last, and returns the file's inode and
// where the last piece goes.
func writeAllButLast(t *testing.T, m *meta.Store, body []byte, start int, pieces []int) (meta.Inode, int) {
	t.Helper()
	ctx := context.Background()
	in := newFile(t, m, "f", nil)
	if start > 0 {
		if _, err := m.WriteData(ctx, in.Ino, body[:start], 0, false, 0, meta.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	off := start
	for _, n := range pieces[:len(pieces)-1] {
		if _, err := m.WriteData(ctx, in.Ino, body[off:off+n], int64(off), false, 0, meta.Limits{}, nil); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	return in, off
}

// flushFor is a flush of everything, or with one of ino alone.
func flushFor(ctx context.Context, e *Exporter, ino meta.Ino, one bool) error {
	if one {
		return e.FlushInode(ctx, ino)
	}
	return e.Flush(ctx)
}

// Issue 21, corner 8: the kernel hands one write(2) over in pieces, and
// `bucketfs flush` while a process wrote exported the state between two
// pieces of one syscall (183 of 4,544 versions under fsx with a flush
// loop). A flush waits for the rest of a write whose last piece announced
// more (meta.Continues), holding new writes meanwhile: it exports the
// state before the write or after its last piece, never one between. Here
// the rest comes while the flush waits (the hold is where it waits).
func TestAFlushExportsAWriteInPiecesWholeNeverBetweenItsPieces(t *testing.T) {
	forEachPiecesCase(t, func(t *testing.T, start int, pieces []int, one bool) {
		ctx := context.Background()
		b := fakeStore(t)
		m := newMeta(t)
		body := piecesBody(start, pieces)
		in, off := writeAllButLast(t, m, body, start, pieces)
		last := pieces[len(pieces)-1]
		held, released := 0, 0
		e := NewExporter(m, b, nil, ExporterConfig{HoldWrites: func(ino meta.Ino) func() {
			held++
			// The kernel sends the last piece while the flush waits.
			if _, err := m.WriteData(ctx, ino, body[off:off+last], int64(off), false, 0, meta.Limits{}, nil); err != nil {
				t.Error(err)
			}
			return func() { released++ }
		}})
		if err := flushFor(ctx, e, in.Ino, one); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(body)+1)
		n, _ := b.ReadAt(ctx, "f", "", got, 0)
		if !bytes.Equal(got[:n], body) {
			t.Fatalf("the flush exported %d bytes, want the whole write: %d (held writes %d times)", n, len(body), held)
		}
		if held != 1 || released != 1 {
			t.Fatalf("writes held %d times and released %d times, want once each", held, released)
		}
	})
}

// The rest of a write in pieces may never come (the writer stalled, or
// its last piece only looked like one with more to come): a flush waits
// for it at most PieceWait, then exports the file as it is, at a piece
// boundary, and lets new writes go again.
func TestAFlushWhoseWriteNeverContinuesReturnsAfterTheBound(t *testing.T) {
	forEachPiecesCase(t, func(t *testing.T, start int, pieces []int, one bool) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := fakeStore(t)
		m := newMeta(t)
		body := piecesBody(start, pieces)
		in, off := writeAllButLast(t, m, body, start, pieces)
		held, released := 0, 0
		e := NewExporter(m, b, nil, ExporterConfig{PieceWait: 200 * time.Millisecond,
			HoldWrites: func(meta.Ino) func() { held++; return func() { released++ } }})
		if err := flushFor(ctx, e, in.Ino, one); err != nil {
			t.Fatalf("a flush whose write never continued: %v", err)
		}
		got := make([]byte, len(body)+1)
		n, _ := b.ReadAt(ctx, "f", "", got, 0)
		if !bytes.Equal(got[:n], body[:off]) {
			t.Fatalf("the flush exported %d bytes, want the file as it was at the last piece: %d", n, off)
		}
		if held != 1 || released != 1 {
			t.Fatalf("writes held %d times and released %d times, want once each", held, released)
		}
	})
}
