package engine

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

func openEngineCfg(t *testing.T, mod func(*Config)) *Engine {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	cfg := Config{StateDir: t.TempDir(), Bucket: name, Endpoint: srv.Endpoint,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, WrapKV: replayFromEnv(t)}
	if mod != nil {
		mod(&cfg)
	}
	e, err := Open(context.Background(), withTestKV(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func mustRead(t *testing.T, h *vfs.Handle, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	got, err := h.Read(context.Background(), buf, 0)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return buf[:got]
}

// Found in review: a handle streamed what the tier lacks from the base it
// saw at open. After a truncate to 0 and a regrow the file is zeros
// (Backed 0); the export makes its new object the base (Backed = size), so
// the zeros are "base bytes", and the handle read them from the old
// version A.
func TestAnOpenHandleReadsWhatTheFileHoldsAfterAnExport(t *testing.T) {
	e := openEngineCfg(t, func(c *Config) { c.ImportThreshold = 1; c.DirectReadSize = 1 })
	ctx := context.Background()
	const n = 16 << 10
	old := bytes.Repeat([]byte("A"), n)
	if _, err := e.Bucket.Put(ctx, "f", bytes.NewReader(old), n, bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.FS.Open(ctx, vfs.Root, a.Ino, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	for _, sz := range []int64{0, n} {
		if _, err := e.FS.SetAttr(ctx, vfs.Root, a.Ino, vfs.SetAttrIn{Valid: vfs.SetSize, Size: sz, Handle: h}); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustRead(t, h, n); !bytes.Equal(got, make([]byte, n)) {
		t.Fatalf("before export: not zeros")
	}
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, h, n); !bytes.Equal(got, make([]byte, n)) {
		t.Fatalf("after export the file reads %q... (bytes of the old version it no longer holds), want zeros", got[:8])
	}
}

// Found in review: a hole punched into a file the bucket backs is stored as
// blocks of zeros, and was counted byte for byte in Cached and in the dirty
// usage, although it takes a few bytes per block: a punch larger than the
// capacity made every write fail with ENOSPC, and after the export, while
// the file stayed open, it still did.
func TestAPunchedHoleTakesNoTierCapacity(t *testing.T) {
	e := openEngineCfg(t, func(c *Config) { c.TierCapacity = 1 << 20 })
	ctx := context.Background()
	const n = 4 << 20
	body := bytes.Repeat([]byte("B"), n)
	if _, err := e.Bucket.Put(ctx, "big", bytes.NewReader(body), n, bucket.PutOptions{}); err != nil {
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
	if err := h.Fallocate(ctx, 0x3, 0, 2<<20); err != nil { // PUNCH_HOLE|KEEP_SIZE
		t.Fatal(err)
	}
	if u, _ := e.Meta.Usage(ctx); u.Total > 64<<10 {
		t.Errorf("after punching 2 MiB the tier counts %+v", u)
	}
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.evict(ctx)
	if _, err := h.Write(ctx, []byte("x"), 3<<20); err != nil {
		t.Fatalf("a 1-byte write to a clean, exported file fails: %v", err)
	}
}

// Found in review (older than file data in the kv): a handle opened on
// version A streamed A after an import replaced the file by a larger C,
// padded with zeros to C's size: no state the file had. It now reads A,
// whole, as an open of a file replaced by a rename reads the old file.
func TestAHandleOpenedBeforeAnImportReadsOneWholeVersion(t *testing.T) {
	e := openEngineCfg(t, func(c *Config) { c.ImportThreshold = 1; c.DirectReadSize = 1 })
	ctx := context.Background()
	a := bytes.Repeat([]byte("A"), 8<<10)
	c := bytes.Repeat([]byte("C"), 16<<10)
	if _, err := e.Bucket.Put(ctx, "f", bytes.NewReader(a), int64(len(a)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.FS.Open(ctx, vfs.Root, f.Ino, uint32(os.O_RDONLY))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, err := e.Bucket.Put(ctx, "f", bytes.NewReader(c), int64(len(c)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Importer.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, h, len(c))
	if !bytes.Equal(got, a) {
		t.Fatalf("read %d bytes: %q...%q, neither A nor C", len(got), got[:4], got[len(got)-4:])
	}
}

// A create of a name only the bucket knows, in a directory the namespace
// has not listed, opens the bucket's file rather than hiding it behind a
// new empty one: vfs.Create asks the bucket first, whatever the front end
// did before (the FUSE and NFS front ends look the name up first, so only
// a direct call reaches this path).
func TestCreateInADirectoryNotListedOpensTheBucketsFile(t *testing.T) {
	e := openEngineCfg(t, nil)
	ctx := context.Background()
	body := []byte("from the bucket")
	if _, err := e.Bucket.Put(ctx, "d/x", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := e.FS.Lookup(ctx, vfs.Root, meta.RootIno, "d")
	if err != nil {
		t.Fatal(err)
	}
	a, h, err := e.FS.Create(ctx, vfs.Root, d.Ino, "x", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if a.Size != int64(len(body)) {
		t.Fatalf("create of d/x gave a file of %d bytes, want the bucket's %d", a.Size, len(body))
	}
	if got := mustRead(t, h, 100); !bytes.Equal(got, body) {
		t.Fatalf("d/x reads %q, want %q", got, body)
	}
}
