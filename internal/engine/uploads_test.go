package engine

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/s3test"
	"bucketfs/internal/testlog"
)

func TestOpenAbortsTheMultipartUploadsACrashLeftInTheJournal(t *testing.T) {
	srv, name := s3test.NewBucket(t)
	raw := s3.New(s3.Options{BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	var log testlog.Log // written by the lease holder's work too, in the background
	cfg := Config{StateDir: t.TempDir(), Bucket: name, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey, Region: srv.Region, ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1,
		Logger: slog.New(slog.NewTextHandler(&log, nil)), WrapKV: replayFromEnv(t)}
	cfg = withTestKV(t, cfg)
	ctx := context.Background()
	e, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	// What a crash in the middle of an export leaves: an upload with a part
	// in the store, and its record in the journal.
	up, err := raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &name, Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.UploadPart(ctx, &s3.UploadPartInput{Bucket: &name, Key: aws.String("big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part"), ContentLength: aws.Int64(4)}); err != nil {
		t.Fatal(err)
	}
	if err := e.Meta.BeginUpload(ctx, aws.ToString(up.UploadId), "big"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The status of a stopped file system reads the Pebble store in its
	// state directory: there is none to read on PostgreSQL.
	if st, err := OfflineStatus(ctx, cfg.StateDir, time.Hour); !testkv.Postgres() && (err != nil || st.UploadsInFlight != 1) {
		t.Fatalf("offline status shows %d uploads in flight (%v); want 1", st.UploadsInFlight, err)
	}

	e2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2.Close() })
	if testkv.Postgres() {
		// On a store other servers may share, the sync lease's holder
		// aborts them as it takes the lease (leader.go), in the
		// background of Start.
		e2.Start()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(log.String(), "aborted=1 failed=0") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling: no event tells the abort is done
		}
	}
	left, err := raw.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &name})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Uploads) != 0 {
		t.Errorf("%d uploads left after the restart", len(left.Uploads))
	}
	if st, err := e2.Status(ctx); err != nil || st.UploadsInFlight != 0 {
		t.Errorf("status shows %d uploads in flight (%v) after the restart", st.UploadsInFlight, err)
	}
	if !strings.Contains(log.String(), "aborted=1 failed=0") {
		t.Errorf("the start did not log the abort:\n%s", log.String())
	}
}
