package meta

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
)

// A namespace opens only for the bucket and prefix it was made for: one
// made before the record existed takes the first it is opened with, and
// another bucket or prefix is refused with a message naming both.
func TestANamespaceIsRefusedForAnotherBucketOrPrefix(t *testing.T) {
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	open := func(bucket string) error {
		_, err := Open(ctx, db, Options{ExportDelay: time.Minute, Bucket: bucket})
		return err
	}
	if err := open(""); err != nil { // a namespace with no record, as made before it existed
		t.Fatal(err)
	}
	if err := open("s3://data/team/"); err != nil {
		t.Fatalf("first open with a bucket: %v", err)
	}
	if err := open("s3://data/team/"); err != nil {
		t.Fatalf("the same bucket again: %v", err)
	}
	for _, other := range []string{"s3://data/", "s3://data/team2/", "s3://other/team/"} {
		err := open(other)
		if !errors.Is(err, ErrOtherBucket) || !strings.Contains(err.Error(), "s3://data/team/") || !strings.Contains(err.Error(), other) {
			t.Errorf("open for %s: %v; want ErrOtherBucket naming both", other, err)
		}
	}
}
