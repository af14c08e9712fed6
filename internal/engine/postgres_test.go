package engine

import (
	"context"
	"strings"
	"testing"

	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

// A server is not started on a database URL that asks for asynchronous
// commits: the database may crash while the server runs on, and a commit
// lost then would be one the server acted on. The refusal says so, in
// one line that names the setting.
func TestAServerRefusesAMetadataURLWithSynchronousCommitOff(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	srv, bucket := s3test.NewBucket(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	e, err := Open(context.Background(), Config{StateDir: t.TempDir(), Meta: url + sep + "synchronous_commit=off",
		Bucket: bucket, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region})
	if err == nil {
		e.Close()
		t.Fatal("a server started on a URL with synchronous_commit=off")
	}
	if !strings.Contains(err.Error(), "synchronous_commit") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal %q: want one line naming synchronous_commit", err)
	}
}
