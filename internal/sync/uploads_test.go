package sync

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

// TestMain stops the shared S3 store and the PostgreSQL server the tests'
// stores run on with BUCKETFS_TEST_KV=postgres (package testkv) when they
// have run.
func TestMain(m *testing.M) { os.Exit(s3test.Main(pgtest.M(m))) }

// uploadStore is a bucket of the shared versitygw store, seen both through
// a bucket.Client under prefix "fs/" and through a plain S3 client that can
// do what bucketfs never does: leave a multipart upload unfinished, as a
// crash would, or as another tool uploading into the bucket does.
type uploadStore struct {
	t      *testing.T
	bucket *bucket.Client
	raw    *s3.Client
	name   string
}

func newUploadStore(t *testing.T) *uploadStore {
	t.Helper()
	srv, name := s3test.NewBucket(t)
	b, err := bucket.New(context.Background(), bucket.Config{Bucket: name, Prefix: "fs/", Endpoint: srv.Endpoint,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return &uploadStore{t: t, bucket: b, raw: rawClient(srv), name: name}
}

func rawClient(srv *s3local.Server) *s3.Client {
	return s3.New(s3.Options{BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
}

// leave starts a multipart upload of the full key, sends one part, and
// leaves it unfinished. It returns the upload id.
func (s *uploadStore) leave(fullKey string) string {
	s.t.Helper()
	ctx := context.Background()
	out, err := s.raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.name, Key: &fullKey})
	if err != nil {
		s.t.Fatal(err)
	}
	part := []byte("a part nobody completes")
	if _, err := s.raw.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.name, Key: &fullKey, UploadId: out.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part)))}); err != nil {
		s.t.Fatal(err)
	}
	return aws.ToString(out.UploadId)
}

// uploads lists the bucket's multipart uploads in progress as
// "full key=id" strings, sorted.
func (s *uploadStore) uploads() []string {
	s.t.Helper()
	out, err := s.raw.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &s.name})
	if err != nil {
		s.t.Fatal(err)
	}
	var ups []string
	for _, u := range out.Uploads {
		ups = append(ups, aws.ToString(u.Key)+"="+aws.ToString(u.UploadId))
	}
	slices.Sort(ups)
	return ups
}

func recorded(t *testing.T, m *meta.Store) []meta.Upload {
	t.Helper()
	ups, err := m.Uploads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ups
}

func TestTheExporterJournalsAMultipartUploadFromBeforeItsFirstPartUntilItEnds(t *testing.T) {
	s := newUploadStore(t)
	m := newMeta(t)
	e := NewExporter(m, s.bucket, nil, ExporterConfig{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (bucket.MinPartSize+100)/16)
	parts := []bucket.Part{
		{Off: 0, Len: bucket.MinPartSize, Src: bytes.NewReader(data)},
		{Off: bucket.MinPartSize, Len: int64(len(data)) - bucket.MinPartSize, Src: bytes.NewReader(data)},
	}
	opt := e.journalUploads("dir/big", bucket.PutOptions{IfNoneMatch: true})
	journal := opt.OnUploadStart
	var atStart []meta.Upload
	var storeAtStart []string
	opt.OnUploadStart = func(ctx context.Context, id string) error {
		err := journal(ctx, id)
		atStart, storeAtStart = recorded(t, m), s.uploads()
		if sent := s.bucket.Stats().BytesWritten; sent != 0 {
			t.Errorf("%d bytes of parts were sent before the journal had the upload", sent)
		}
		return err
	}
	if _, err := s.bucket.PutParts(ctx, "dir/big", parts, 2, opt); err != nil {
		t.Fatalf("PutParts: %v", err)
	}
	if len(atStart) != 1 || atStart[0].Key != "dir/big" || !slices.Equal(storeAtStart, []string{"fs/dir/big=" + atStart[0].ID}) {
		t.Fatalf("once the upload started the journal held %v and the store %v; want the one upload in both", atStart, storeAtStart)
	}
	if ups := recorded(t, m); len(ups) != 0 {
		t.Errorf("after the upload completed the journal still holds %v", ups)
	}

	// An upload refused at its condition is aborted and forgotten too.
	if _, err := s.bucket.PutParts(ctx, "dir/big", parts, 2, e.journalUploads("dir/big", bucket.PutOptions{IfNoneMatch: true})); err == nil {
		t.Fatal("a second create-only upload to the same key succeeded")
	}
	if ups, left := recorded(t, m), s.uploads(); len(ups) != 0 || len(left) != 0 {
		t.Errorf("after a refused upload the journal holds %v and the store %v", ups, left)
	}
}

func TestOrphanedUploadsOfOurOwnAreAbortedAtStartAndOthersLeftAlone(t *testing.T) {
	s := newUploadStore(t)
	m := newMeta(t)
	ctx := context.Background()
	orphan := s.leave("fs/dir/big") // ours, cut short by a crash
	if err := m.BeginUpload(ctx, orphan, "dir/big"); err != nil {
		t.Fatal(err)
	}
	// Ended before the crash, but the record's deletion never became
	// durable: the store no longer knows the id.
	if err := m.BeginUpload(ctx, "a2f9c1e0-ended-long-ago", "done"); err != nil {
		t.Fatal(err)
	}
	theirs := s.leave("fs/dir/big")    // another tool, same key
	elsewhere := s.leave("other/file") // another tool, outside the prefix

	var log bytes.Buffer
	n := AbortOrphanedUploads(ctx, m, s.bucket, slog.New(slog.NewTextHandler(&log, nil)))
	if n != 2 {
		t.Errorf("AbortOrphanedUploads = %d, want 2 (one aborted, one gone already)", n)
	}
	want := []string{"fs/dir/big=" + theirs, "other/file=" + elsewhere}
	slices.Sort(want)
	if got := s.uploads(); !slices.Equal(got, want) {
		t.Errorf("uploads after the start: %v; want only the other tools' %v", got, want)
	}
	if ups := recorded(t, m); len(ups) != 0 {
		t.Errorf("the journal still holds %v", ups)
	}
	if !strings.Contains(log.String(), "aborted=2 failed=0") {
		t.Errorf("log does not give the count:\n%s", log.String())
	}
}

func TestAnUploadTheStoreFailsToAbortKeepsItsRecordForTheNextStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: every request is refused
	b, err := bucket.New(context.Background(), bucket.Config{Bucket: "b", Endpoint: dead, AccessKey: "a", SecretKey: "s",
		Region: "us-east-1", OpTimeout: 2 * time.Second, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := newMeta(t)
	ctx := context.Background()
	if err := m.BeginUpload(ctx, "id-1", "big"); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if n := AbortOrphanedUploads(ctx, m, b, slog.New(slog.NewTextHandler(&log, nil))); n != 0 {
		t.Errorf("AbortOrphanedUploads = %d against a store that is down", n)
	}
	if ups := recorded(t, m); len(ups) != 1 || ups[0] != (meta.Upload{ID: "id-1", Key: "big"}) {
		t.Errorf("the journal holds %v; want the record kept", ups)
	}
	if !strings.Contains(log.String(), "aborted=0 failed=1") || !strings.Contains(log.String(), "upload=id-1") {
		t.Errorf("log:\n%s", log.String())
	}
}

// Found by the crash checker: a crash between CreateMultipartUpload and the
// journal's record of the id left an upload nothing named. The key is now
// recorded before the upload is created, and the next start aborts the
// uploads in progress of such a key that hold no part (ours), and none
// with parts (another tool's) or of other keys.
func TestAnUploadCreatedJustBeforeACrashIsAbortedByItsKey(t *testing.T) {
	s := newUploadStore(t)
	m := newMeta(t)
	ctx := context.Background()
	if err := m.BeginUploadOf(ctx, "dir/big"); err != nil {
		t.Fatal(err)
	}
	out, err := s.raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.name, Key: aws.String("fs/dir/big")})
	if err != nil { // created; the crash came before its id was recorded
		t.Fatal(err)
	}
	_ = out
	theirs := s.leave("fs/dir/big")
	other := s.leave("fs/dir/other")
	var log bytes.Buffer
	if n := AbortOrphanedUploads(ctx, m, s.bucket, slog.New(slog.NewTextHandler(&log, nil))); n != 1 {
		t.Errorf("AbortOrphanedUploads = %d, want 1", n)
	}
	want := []string{"fs/dir/big=" + theirs, "fs/dir/other=" + other}
	slices.Sort(want)
	if got := s.uploads(); !slices.Equal(got, want) {
		t.Errorf("uploads after the start: %v; want only the other tool's %v", got, want)
	}
	if keys, err := m.UploadsOf(ctx); err != nil || len(keys) != 0 {
		t.Errorf("the journal still holds %v (%v)", keys, err)
	}
}
