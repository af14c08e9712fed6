package engine

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Issue 21, corner 8, through the vfs as the FUSE front end drives it: the
// kernel hands one write(2) over in pieces (1 MiB requests; the part of a
// page it does not hold whole first), and a flush while the process wrote
// exported the state between two pieces. Now every version a flush
// exports is the file before the write or after its last piece; a new
// write(2) to the file waits while the flush waits for the rest.
func TestAFlushThroughTheVFSExportsNoStateBetweenThePiecesOfOneWrite(t *testing.T) {
	for _, c := range []struct {
		name   string
		start  int   // where the write(2) begins
		pieces []int // lengths of its requests
	}{
		{"in pieces of 1 MiB", 0, []int{1 << 20, 1 << 20, 100}},
		{"from inside a page", 3969, []int{127, 5000}},
		{"from inside a page, more than 1 MiB", 3969, []int{127, 1 << 20, 100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := openEngineCfg(t, nil)
			before := bytes.Repeat([]byte("before the write"), (c.start+200)/16)
			_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			if _, err := h.Write(ctx, before, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.Exporter.FlushInode(ctx, h.Ino()); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range c.pieces {
				n += p
			}
			after := bytes.Clone(before)
			after = append(after, make([]byte, max(c.start+n-len(after), 0))...)
			copy(after[c.start:], bytes.Repeat([]byte("the one write(2)"), n/16+1)[:n])
			off := c.start
			for _, p := range c.pieces[:len(c.pieces)-1] {
				if _, err := h.Write(ctx, after[off:off+p], int64(off)); err != nil {
					t.Fatal(err)
				}
				off += p
			}
			flushed := make(chan error, 1)
			go func() { flushed <- e.Exporter.FlushInode(ctx, h.Ino()) }()
			// The last piece comes once the flush waits for it (it holds
			// the file's new writes then), or once it returned.
			var flushErr error
			returned := false
			for held, _ := e.FS.WritesHeld(h.Ino()); !held && !returned; held, _ = e.FS.WritesHeld(h.Ino()) {
				select {
				case flushErr = <-flushed:
					returned = true
				case <-time.After(time.Millisecond):
				}
				if ctx.Err() != nil {
					t.Fatal("the flush neither waited nor returned")
				}
			}
			if !returned {
				// Another process's write(2) waits meanwhile.
				other, err := e.FS.Open(ctx, vfs.Root, h.Ino(), syscall.O_WRONLY)
				if err != nil {
					t.Fatal(err)
				}
				short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
				_, err = other.Write(short, []byte("another write(2)"), 0)
				stop()
				other.Release(ctx)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a new write(2) while the flush waits for the rest of one: %v, want it held", err)
				}
			}
			last := c.pieces[len(c.pieces)-1]
			if _, err := h.Write(ctx, after[off:off+last], int64(off)); err != nil {
				t.Fatal(err)
			}
			if !returned {
				flushErr = <-flushed
			}
			if flushErr != nil {
				t.Fatal(flushErr)
			}
			if err := e.Exporter.FlushInode(ctx, h.Ino()); err != nil {
				t.Fatal(err)
			}
			l, err := e.Bucket.ListVersions(ctx, "", "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range l.Versions {
				got := make([]byte, len(after)+1)
				n, _ := e.Bucket.ReadAt(ctx, "f", v.VersionID, got, 0)
				switch {
				case bytes.Equal(got[:n], after):
				case bytes.Equal(got[:n], before) && i > 0:
				default:
					t.Fatalf("version %d of %d (newest first) holds %d bytes, %q at %d: neither the file before the write (%d bytes) nor after it (%d)",
						i, len(l.Versions), n, got[off:min(off+16, n)], off, len(before), len(after))
				}
			}
		})
	}
}

// A write(2) whose end only looks like a piece with more to come (dd with
// bs=1M) has ended once its writer closes or syncs the file: a flush then
// has nothing to wait for.
func TestAWriteThatLookedUnfinishedEndsAtCloseAndAtFsync(t *testing.T) {
	ctx := context.Background()
	e := openEngineCfg(t, nil)
	_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	unfinished := func() bool {
		in, err := e.Meta.Get(ctx, h.Ino())
		if err != nil {
			t.Fatal(err)
		}
		return in.UnfinishedWrite != 0
	}
	mib := bytes.Repeat([]byte{'x'}, 1<<20)
	for i, end := range []struct {
		name string
		fn   func(context.Context) error
	}{{"a close", h.Closed}, {"an fsync", h.Fsync}} {
		if _, err := h.Write(ctx, mib, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		if !unfinished() {
			t.Fatal("a write of a whole 1 MiB of pages does not look like a piece with more to come")
		}
		if err := end.fn(ctx); err != nil {
			t.Fatal(err)
		}
		if unfinished() {
			t.Fatalf("after %s the file still has an unfinished write", end.name)
		}
	}
}

// The requests of one write may come out of order (an NFS client's
// writeback, the kernel's mmap writeback). One held for a flush as the
// start of a new write goes on once an earlier request, written
// meanwhile, makes it the next piece of the write under way; the flush
// then exports the whole write, without waiting out its bound.
func TestAHeldRequestThatTurnsOutToContinueTheWriteGoesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := openEngineCfg(t, nil)
	_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	body := bytes.Repeat([]byte("out of order"), (2<<20+100)/12+1)[:2<<20+100]
	held := func(n int) {
		for {
			if ok, waiting := e.FS.WritesHeld(h.Ino()); ok && waiting >= n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("writes not held with %d waiting", n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	if _, err := h.Write(ctx, body[:1<<20], 0); err != nil { // 1 MiB of pages: more to come
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- e.Exporter.FlushInode(ctx, h.Ino()) }()
	held(0)
	last := make(chan error, 1)
	go func() {
		_, err := h.Write(ctx, body[2<<20:], 2<<20)
		last <- err
	}()
	held(1) // the last request came before the middle one
	if _, err := h.Write(ctx, body[1<<20:2<<20], 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := <-last; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	l, err := e.Bucket.ListVersions(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range l.Versions {
		got := make([]byte, len(body)+1)
		n, _ := e.Bucket.ReadAt(ctx, "f", v.VersionID, got, 0)
		if !bytes.Equal(got[:n], body) {
			t.Fatalf("version %d of %d (newest first) holds %d bytes, want the whole write, %d", i, len(l.Versions), n, len(body))
		}
	}
}
