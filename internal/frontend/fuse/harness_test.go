package fuse_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hanwen/go-fuse/v2/fuse"

	"bucketfs/internal/engine"
	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(catchingReaderEnv); path != "" {
		catchingReader(path)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		// FUSE is part of what these tests test; without it they cannot run.
		os.Stderr.WriteString("fuse tests: /dev/fuse missing\n")
		os.Exit(1)
	}
	// Stops the shared S3 store and the PostgreSQL server the tests'
	// stores run on with BUCKETFS_TEST_KV=postgres (package testkv) when
	// they have run.
	os.Exit(s3test.Main(pgtest.M(m)))
}

// env is one test's file system: a fresh bucket in the shared embedded
// store, an engine with its own state directory, and a real FUSE mount.
type env struct {
	t        testing.TB
	srv      *s3local.Server
	bucket   string
	stateDir string
	mnt      string
	cfg      engine.Config
	eng      *engine.Engine
	fuse     *fuse.Server
	s3       *s3.Client // a plain SDK client on the same bucket, as another tool would use
	mount    bfuse.Options
}

type option func(*engine.Config)

func withExportDelay(d time.Duration) option { return func(c *engine.Config) { c.ExportDelay = d } }

// withEndpoint points the engine (not e.s3, which stays on the store) at
// url, e.g. a proxy in front of the store.
func withEndpoint(url string) option { return func(c *engine.Config) { c.Endpoint = url } }

// cached returns how many bytes of ino the tier holds (0 for an inode
// that is gone).
func (e *env) cached(ino uint64) int64 {
	in, err := e.eng.Meta.Get(context.Background(), meta.Ino(ino))
	if err != nil {
		return 0
	}
	return in.Cached
}

// withOpTimeout bounds each bucket operation.
func withOpTimeout(d time.Duration) option { return func(c *engine.Config) { c.OpTimeout = d } }

func withLogger(l *slog.Logger) option { return func(c *engine.Config) { c.Logger = l } }

// withDefaults sets the owner and modes of what carries no attributes
// (--uid, --gid, --file-mode, --dir-mode).
func withDefaults(d meta.Defaults) option { return func(c *engine.Config) { c.Defaults = &d } }

// newEnv mounts a new file system. The export delay defaults to 100ms so
// that tests see exports quickly.
func newEnv(t testing.TB, opts ...option) *env {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	return newEnvOn(t, srv, name, opts...)
}

// newAWSListingEnv is newEnv on a bucket that lists like AWS S3 (a prefix
// only while a current object is under it).
func newAWSListingEnv(t testing.TB, opts ...option) *env {
	t.Helper()
	srv, name := s3test.NewAWSListingBucket(t)
	return newEnvOn(t, srv, name, opts...)
}

func newEnvOn(t testing.TB, srv *s3local.Server, name string, opts ...option) *env {
	t.Helper()
	return newEnvMounted(t, srv, name, bfuse.Options{Name: "bucketfs-test"}, opts...)
}

// newEnvMounted is newEnvOn with the mount options mo.
func newEnvMounted(t testing.TB, srv *s3local.Server, name string, mo bfuse.Options, opts ...option) *env {
	t.Helper()
	e := &env{t: t, srv: srv, bucket: name, stateDir: t.TempDir(), mnt: t.TempDir(), mount: mo}
	e.cfg = engine.Config{StateDir: e.stateDir, Bucket: name, Endpoint: srv.Endpoint,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		ExportDelay: 100 * time.Millisecond, OpTimeout: 10 * time.Second,
		WrapKV: func(db kv.Store) kv.Store { return kvreplay.FromEnv(t, db) }}
	for _, o := range opts {
		o(&e.cfg)
	}
	if e.cfg.KV == nil {
		e.cfg.KV = testkv.ForEngine(t, e.cfg.StateDir) // PostgreSQL if BUCKETFS_TEST_KV says so
	}
	e.s3 = s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	e.start()
	return e
}

// start opens the engine and mounts it; stop undoes both. Tests restart a
// file system with stop then start.
func (e *env) start() {
	e.t.Helper()
	eng, err := engine.Open(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	srv, err := bfuse.Mount(eng.FS, e.mnt, e.mount)
	if err != nil {
		eng.Close()
		e.t.Fatal(err)
	}
	eng.Start()
	e.eng, e.fuse = eng, srv
	e.t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.fuse != nil {
		if err := e.fuse.Unmount(); err != nil {
			e.t.Errorf("unmount: %v", err)
		}
		e.fuse = nil
	}
	if e.eng != nil {
		if err := e.eng.Close(); err != nil {
			e.t.Errorf("close engine: %v", err)
		}
		e.eng = nil
	}
}

func (e *env) path(p string) string { return filepath.Join(e.mnt, p) }

// flush exports everything queued now.
func (e *env) flush() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.eng.Exporter.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// put writes an object straight to the bucket.
func (e *env) put(key string, body []byte, meta map[string]string) {
	e.t.Helper()
	_, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &e.bucket, Key: &key,
		Body: bytes.NewReader(body), Metadata: meta})
	if err != nil {
		e.t.Fatalf("put %q: %v", key, err)
	}
}

// get reads an object straight from the bucket; ok is false if it is
// missing.
func (e *env) get(key string) (body []byte, meta map[string]string, ok bool) {
	e.t.Helper()
	out, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &e.bucket, Key: &key})
	if err != nil {
		var nsk interface{ ErrorCode() string }
		if errors.As(err, &nsk) && (nsk.ErrorCode() == "NoSuchKey" || nsk.ErrorCode() == "NotFound") {
			return nil, nil, false
		}
		e.t.Fatalf("get %q: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return b, out.Metadata, true
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
