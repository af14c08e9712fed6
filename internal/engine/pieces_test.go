package engine

import (
	"bytes"
	"context"
	"syscall"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Found by the crash checker: the kernel hands a large write(2) over in
// pieces of 1 MiB, each committed on its own without a sync, and a crash
// soon after the write returned kept its first pieces and lost the last:
// the file held a state its writer never saw returned. The rule: once a
// write of several pieces has returned, a crash keeps all of it (here a
// power loss, which drops everything not synced). The pieces come as the
// kernel sends them (1 MiB requests, then the rest) or as one call of the
// vfs that splits them itself.
func TestAWriteOfSeveralPiecesIsKeptWholeOnceItReturned(t *testing.T) {
	const size = 2<<20 + 100
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	for _, c := range []struct {
		name   string
		start  int   // bytes of body written and synced before the write
		pieces []int // lengths of the calls
	}{
		{"as the kernel sends it", 0, []int{1 << 20, 1 << 20, 100}},
		{"one call", 0, []int{size}},
		// A write(2) that starts inside a page the kernel's cache does not
		// hold whole: the kernel sends that page's part alone, then the
		// rest (found by the crash checker, separate store, seed
		// 320359682: an append of 320 KB kept its first 127 bytes).
		{"from inside a page", 3969, []int{127, 320315}},
		{"from inside a page, more than 1 MiB", 3969, []int{127, 1 << 20, 100}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := pebblevfs.NewCrashableMem()
			cfg := crashableConfig(t, mem)
			e, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, syscall.O_WRONLY)
			if err != nil {
				e.Close()
				t.Fatal(err)
			}
			if _, err := h.Write(ctx, body[:c.start], 0); err != nil {
				e.Close()
				t.Fatal(err)
			}
			if err := h.Fsync(ctx); err != nil { // the file before the write is durable
				e.Close()
				t.Fatal(err)
			}
			off := c.start
			for _, n := range c.pieces {
				if _, err := h.Write(ctx, body[off:off+n], int64(off)); err != nil {
					e.Close()
					t.Fatal(err)
				}
				off += n
			}
			h.Release(ctx)
			crashed := mem.CrashClone(pebblevfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			e.Close()
			cfg.MetaFS = crashed
			e2, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e2.Close()
			in, err := e2.FS.Lookup(ctx, vfs.Root, meta.RootIno, "f")
			if err != nil {
				t.Fatal(err)
			}
			r, err := e2.FS.Open(ctx, vfs.Root, in.Ino, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release(ctx)
			want := body[:off]
			got := make([]byte, size+1)
			n, err := r.Read(ctx, got, 0)
			if err != nil || !bytes.Equal(got[:n], want) {
				t.Fatalf("after the power loss the file holds %d bytes (%v), want the whole write: %d", n, err, len(want))
			}
		})
	}
}
