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
		pieces []int // lengths of the calls; 0: one call of the whole
	}{
		{"as the kernel sends it", []int{1 << 20, 1 << 20, 100}},
		{"one call", []int{size}},
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
			if err := h.Fsync(ctx); err != nil { // the empty file is durable
				e.Close()
				t.Fatal(err)
			}
			off := 0
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
			got := make([]byte, size+1)
			n, err := r.Read(ctx, got, 0)
			if err != nil || !bytes.Equal(got[:n], body) {
				t.Fatalf("after the power loss the file holds %d bytes (%v), want the whole write of %d", n, err, size)
			}
		})
	}
}
