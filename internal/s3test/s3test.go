package s3test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bucketfs/internal/s3local"
)

// The shared store is package-level state on purpose: there can be only one
// per process, and every test in the binary uses it.
var (
	shared struct {
		once sync.Once
		srv  *s3local.Server
		dir  string
		err  error
	}
	hub       = &eventHub{subs: make(map[string]map[*EventLog]struct{})}
	bucketSeq atomic.Uint64
)

// startTimeout bounds starting the shared store and creating a bucket.
const startTimeout = 20 * time.Second

// Store returns the test binary's shared store, starting it on first use. It
// fails the test if the store cannot start.
func Store(t testing.TB) *s3local.Server {
	t.Helper()
	shared.once.Do(startShared)
	if shared.err != nil {
		t.Fatalf("s3test: start shared store: %v", shared.err)
	}
	return shared.srv
}

func startShared() {
	dir, err := os.MkdirTemp("", "bucketfs-s3test-")
	if err != nil {
		shared.err = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	srv, err := s3local.Start(ctx, s3local.Config{
		Dir:     dir,
		Bucket:  "s3test",
		OnEvent: hub.publish,
	})
	if err != nil {
		os.RemoveAll(dir)
		shared.err = err
		return
	}
	shared.srv, shared.dir = srv, dir
}

// Main runs the tests and then closes the shared store, if one was started,
// and removes its directory. Call it from TestMain, with m or a wrapper of
// it (such as pgtest.M(m)).
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if shared.srv != nil {
		// versitygw's shutdown waits up to 10 s for connections that test
		// clients opened and never used; the process ends right after, so
		// give it 2 s and move on.
		done := make(chan error, 1)
		go func() { done <- shared.srv.Close() }()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "s3test: close shared store: %v\n", err)
			}
		case <-time.After(2 * time.Second):
		}
		os.RemoveAll(shared.dir)
	}
	return code
}

// NewBucket creates a fresh versioned bucket in the shared store, named after
// the test and unique within the process. Nothing removes it: the store
// itself is thrown away when the process ends.
func NewBucket(t testing.TB) (srv *s3local.Server, bucket string) {
	t.Helper()
	return newBucket(t, true)
}

// NewAWSListingBucket is NewBucket for a bucket that lists like AWS S3: a
// prefix only while a current object is under it (the store's other
// buckets also list a prefix that holds only old versions and delete
// markers, as versitygw and MinIO do).
func NewAWSListingBucket(t testing.TB) (srv *s3local.Server, bucket string) {
	t.Helper()
	srv, bucket = newBucket(t, true)
	srv.ListLikeAWS(bucket)
	return srv, bucket
}

// NewUnversionedBucket is NewBucket without versioning, for tests of how
// code copes with a bucket that was never versioned.
func NewUnversionedBucket(t testing.TB) (srv *s3local.Server, bucket string) {
	t.Helper()
	return newBucket(t, false)
}

func newBucket(t testing.TB, versioned bool) (*s3local.Server, string) {
	t.Helper()
	srv := Store(t)
	name := bucketName(t.Name(), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := srv.CreateBucket(ctx, name, versioned); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return srv, name
}

// bucketName makes a valid S3 bucket name (3 to 63 characters of a-z, 0-9
// and '-', starting with a letter) from a sequence number and a test name.
func bucketName(testName string, seq uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t%d-", seq)
	dash := true
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 63 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if !strings.Contains(name, "-") {
		name += "-test" // nothing usable in the test name; keep 3+ characters
	}
	return name
}
