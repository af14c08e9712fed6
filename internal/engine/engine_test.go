package engine

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// TestMain stops the shared S3 store and the PostgreSQL server the tests'
// stores run on with BUCKETFS_TEST_KV=postgres (package testkv) when they
// have run.
func TestMain(m *testing.M) { os.Exit(s3test.Main(pgtest.M(m))) }

func openEngine(t *testing.T) *Engine {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	e, err := Open(context.Background(), withTestKV(t, Config{StateDir: t.TempDir(), Bucket: name, Endpoint: srv.Endpoint,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1, WrapKV: replayFromEnv(t)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// withTestKV gives cfg the metadata store the tests run on (package
// testkv): with BUCKETFS_TEST_KV=postgres a PostgreSQL database for its
// state directory, which the engine uses as it uses a shared store in
// production (the sync lease is taken, not assumed); on Pebble none, and
// the engine opens its own under the state directory. cfg's bucket must
// be external, as every test's here is (s3test).
func withTestKV(t *testing.T, cfg Config) Config {
	t.Helper()
	if cfg.KV == nil && cfg.MetaFS == nil {
		cfg.KV = testkv.ForEngine(t, cfg.StateDir)
	}
	return cfg
}

// replayFromEnv is the Config.WrapKV of the tests' engines: kvreplay's
// wrapper when BUCKETFS_KV_REPLAY asks for it (see kvreplay.FromEnv).
func replayFromEnv(t *testing.T) func(kv.Store) kv.Store {
	return func(db kv.Store) kv.Store { return kvreplay.FromEnv(t, db) }
}

// metric scrapes /metrics and returns the value of the series named by
// name (with its labels, exactly as exposed).
func metric(t *testing.T, h http.Handler, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no series %s in:\n%s", series, body)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetricsMoveWithWritesExportsReadsAndConflicts(t *testing.T) {
	e := openEngine(t)
	ctx := context.Background()
	h := e.SocketHandler()
	root := vfs.Root
	if got := metric(t, h, "bucketfs_pending_exports"); got != 0 {
		t.Fatalf("pending exports on a new file system: %v", got)
	}
	_, f, err := e.FS.Create(ctx, root, meta.RootIno, "a.txt", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, []byte("hello metrics"), 0); err != nil {
		t.Fatal(err)
	}
	f.Release(ctx)
	if got := metric(t, h, "bucketfs_data_write_bytes_total"); got != 13 {
		t.Fatalf("write bytes %v, want 13", got)
	}
	if got := metric(t, h, "bucketfs_pending_exports"); got != 1 {
		t.Fatalf("pending exports %v, want 1", got)
	}
	if got := metric(t, h, `bucketfs_tier_storage_bytes{state="dirty"}`); got != 13 {
		t.Fatalf("dirty tier bytes %v, want 13", got)
	}
	puts := metric(t, h, `bucketfs_s3_requests_total{type="put"}`)
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, h, "bucketfs_pending_exports"); got != 0 {
		t.Fatalf("pending exports after flush %v", got)
	}
	if got := metric(t, h, "bucketfs_exports_total"); got < 1 {
		t.Fatalf("exports %v after flush", got)
	}
	if got := metric(t, h, `bucketfs_s3_requests_total{type="put"}`); got <= puts {
		t.Fatalf("PUT requests did not move (%v)", got)
	}

	// A read served by the tier.
	a, err := e.FS.Lookup(ctx, root, meta.RootIno, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.FS.Open(ctx, root, a.Ino, uint32(os.O_RDONLY))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := r.Read(ctx, buf, 0)
	r.Release(ctx)
	if err != nil || n != 13 {
		t.Fatalf("read %d, %v", n, err)
	}
	if got := metric(t, h, `bucketfs_data_read_bytes_total{source="tier"}`); got != 13 {
		t.Fatalf("tier read bytes %v, want 13", got)
	}
	if got := metric(t, h, "bucketfs_metadata_operations_total"); got < 2 {
		t.Fatalf("metadata operations %v", got)
	}

	// A conflict: dirty on the file side, changed in the bucket.
	w, err := e.FS.Open(ctx, root, a.Ino, uint32(os.O_WRONLY))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(ctx, []byte("J"), 0)
	w.Release(ctx)
	body := []byte("bucket side")
	if _, err := e.Bucket.Put(ctx, "a.txt", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Importer.Revalidate(ctx, "a.txt"); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, h, "bucketfs_conflicts_total"); got != 1 {
		t.Fatalf("conflicts %v, want 1", got)
	}
	if got := metric(t, h, "bucketfs_lost_found_files"); got != 1 {
		t.Fatalf("lost+found files %v, want 1", got)
	}
}

func TestStatusOfAStoppedFileSystemReadsTheQueue(t *testing.T) {
	srv, name := s3test.NewBucket(t)
	dir := t.TempDir()
	testkv.SkipOnPostgres(t, "the status of a stopped file system is read from the Pebble store in its state directory")
	cfg := Config{StateDir: dir, Bucket: name, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey, Region: srv.Region, ExportDelay: time.Hour, PollInterval: -1, WrapKV: replayFromEnv(t)}
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	ctx := context.Background()
	_, f, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "q", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(ctx, []byte("12345"), 0)
	f.Release(ctx)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := OfflineStatus(ctx, dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.PendingExports != 1 || st.PendingBytes != 5 || !strings.Contains(st.Bucket, name) {
		t.Fatalf("offline status %+v", st)
	}
	if _, err := OfflineStatus(ctx, t.TempDir(), time.Hour); err == nil {
		t.Fatal("status of an empty directory succeeded")
	}
}
