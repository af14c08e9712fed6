package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// tierCapacity is the capacity of the tier in these tests.
const tierCapacity = 4 << 20

func openSmallTier(t *testing.T) *Engine {
	t.Helper()
	// Reads of files up to 64 MiB fill the tier, as they do of small files.
	return openEngineCfg(t, func(c *Config) { c.TierCapacity = tierCapacity; c.DirectReadSize = 64 << 20 })
}

func noise(seed uint64, n int) []byte {
	p := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed)})
	rng.Read(p)
	return p
}

// fileReads checks that the file at ino reads want.
func fileReads(t *testing.T, e *Engine, ino meta.Ino, want []byte, when string) {
	t.Helper()
	ctx := context.Background()
	h, err := e.FS.Open(ctx, vfs.Root, ino, uint32(os.O_RDONLY))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if got := mustRead(t, h, len(want)+1); !bytes.Equal(got, want) {
		t.Fatalf("%s: the file reads %d bytes that differ from the %d written", when, len(got), len(want))
	}
}

// writeAll writes p at 0 as write(2) callers do: again after a short
// write, until all is written or an error comes.
func writeAll(ctx context.Context, h *vfs.Handle, p []byte) error {
	for done := 0; done < len(p); {
		n, err := h.Write(ctx, p[done:], int64(done))
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// unexported returns the tier's count of unexported bytes.
func unexported(t *testing.T, e *Engine) int64 {
	t.Helper()
	u, err := e.Meta.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u.Dirty
}

// Issue 21: a clean file's whole cached size counted as unexported at its
// first write. Every way of changing an exported file as large as the
// tier counts only what it makes unexported: an overwrite and an append
// their blocks, a truncate up, a fallocate and a punched hole nothing.
// The clean blocks of the changed file are then evicted like any clean
// data, and a write past the capacity in unexported bytes still fails.
func TestOnlyWhatAChangeMakesUnexportedCountsAgainstTheTier(t *testing.T) {
	e := openSmallTier(t)
	ctx := context.Background()
	a, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	want := noise(1, tierCapacity)
	if _, err := h.Write(ctx, want, 0); err != nil {
		t.Fatalf("writing a file as large as the tier: %v", err)
	}
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := unexported(t, e); got != 0 {
		t.Fatalf("after the export the tier counts %d unexported bytes", got)
	}
	steps := []struct {
		what       string
		do         func() error
		unexported int64 // in all, after the step
	}{
		{"overwrite 64 KiB in place", func() error {
			p := noise(2, 64<<10)
			copy(want[8192:], p)
			_, err := h.Write(ctx, p, 8192)
			return err
		}, 64 << 10},
		{"overwrite the same 64 KiB again", func() error {
			p := noise(3, 64<<10)
			copy(want[8192:], p)
			_, err := h.Write(ctx, p, 8192)
			return err
		}, 64 << 10},
		{"append 1 MiB", func() error {
			p := noise(4, 1<<20)
			want = append(want, p...)
			_, err := h.Write(ctx, p, tierCapacity)
			return err
		}, 64<<10 + 1<<20},
		{"truncate up by 1 MiB", func() error {
			want = append(want, make([]byte, 1<<20)...)
			_, err := e.FS.SetAttr(ctx, vfs.Root, a.Ino, vfs.SetAttrIn{Valid: vfs.SetSize, Size: int64(len(want)), Handle: h})
			return err
		}, 64<<10 + 1<<20},
		{"fallocate 1 MiB more", func() error {
			want = append(want, make([]byte, 1<<20)...)
			return h.Fallocate(ctx, 0, int64(len(want))-1<<20, 1<<20)
		}, 64<<10 + 1<<20},
		{"punch a hole of 256 KiB", func() error {
			clear(want[2<<20 : 2<<20+256<<10])
			return h.Fallocate(ctx, 0x3, 2<<20, 256<<10)
		}, 64<<10 + 1<<20},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if got := unexported(t, e); got != s.unexported {
			t.Fatalf("after %s the tier counts %d unexported bytes, want %d", s.what, got, s.unexported)
		}
	}
	h.Release(ctx)
	fileReads(t, e, a.Ino, want, "after the changes")

	// The file's clean blocks are as evictable as a clean file.
	e.evict(ctx)
	u, err := e.Meta.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.Total != u.Dirty {
		t.Fatalf("after an eviction the tier holds %+v: clean blocks of the changed file stayed", u)
	}
	fileReads(t, e, a.Ino, want, "after the eviction of its clean blocks")

	// 1 MiB + 64 KiB are unexported: 3 MiB more do not fit.
	_, g, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "g", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(ctx)
	if err := writeAll(ctx, g, noise(5, 3<<20)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 3 MiB with %d bytes unexported in a 4 MiB tier: %v, want ENOSPC", u.Dirty, err)
	}

	// Once exported, the file can be changed as much again.
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := unexported(t, e); got != 0 {
		t.Fatalf("after the second export the tier counts %d unexported bytes", got)
	}
	fileReads(t, e, a.Ino, want, "after the second export")
}

// A file the tier holds only in part: the bytes read from the bucket are
// clean, and a write into the rest counts only itself.
func TestAWriteIntoAPartlyCachedFileCountsOnlyItself(t *testing.T) {
	e := openSmallTier(t)
	ctx := context.Background()
	const n = 8 << 20
	want := noise(6, n)
	if _, err := e.Bucket.Put(ctx, "big", bytes.NewReader(want), n, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, "big")
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.FS.Open(ctx, vfs.Root, a.Ino, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	head := make([]byte, 3<<20+512<<10)
	if _, err := h.Read(ctx, head, 0); err != nil {
		t.Fatal(err)
	}
	if in, err := e.Meta.Get(ctx, a.Ino); err != nil || in.Cached != int64(len(head)) {
		t.Fatalf("after reading %d bytes the tier holds %d of the file (%v)", len(head), in.Cached, err)
	}
	p := noise(7, 1<<20)
	copy(want[6<<20:], p)
	if _, err := h.Write(ctx, p, 6<<20); err != nil {
		t.Fatalf("writing 1 MiB into a file of which the tier holds 3.5 MiB read from the bucket: %v", err)
	}
	if got := unexported(t, e); got != 1<<20 {
		t.Fatalf("the tier counts %d unexported bytes, want 1 MiB", got)
	}
	fileReads(t, e, a.Ino, want, "after the write")
}
