package s3test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"bucketfs/internal/s3local"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func client(srv *s3local.Server) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(srv.Endpoint),
		Region:                     srv.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func TestBucketNamesAreValidAndUnique(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, tc := range []struct {
		test string
		seq  uint64
		want string
	}{
		{"TestX", 1, "t1-testx"},
		{"TestA/sub_test#01", 12, "t12-testa-sub-test-01"},
		{"Test" + strings.Repeat("Long", 40), 3, ("t3-test" + strings.Repeat("long", 40))[:63]},
		{"///", 7, "t7-test"},
	} {
		got := bucketName(tc.test, tc.seq)
		if got != tc.want {
			t.Errorf("bucketName(%q, %d) = %q, want %q", tc.test, tc.seq, got, tc.want)
		}
		if !valid.MatchString(got) {
			t.Errorf("bucketName(%q, %d) = %q is not a valid bucket name", tc.test, tc.seq, got)
		}
	}
}

func TestNewBucketGivesEachCallerItsOwnVersionedBucket(t *testing.T) {
	t.Parallel()
	srv, a := NewBucket(t)
	srv2, b := NewBucket(t)
	if srv != srv2 {
		t.Fatalf("two stores in one process")
	}
	if a == b {
		t.Fatalf("NewBucket returned %q twice", a)
	}
	c := client(srv)
	for _, name := range []string{a, b} {
		v, err := c.GetBucketVersioning(context.Background(), &s3.GetBucketVersioningInput{Bucket: aws.String(name)})
		if err != nil {
			t.Fatalf("GetBucketVersioning %s: %v", name, err)
		}
		if v.Status != types.BucketVersioningStatusEnabled {
			t.Errorf("bucket %s versioning %q, want Enabled", name, v.Status)
		}
	}
}

func TestUnversionedBucketHasNoVersioning(t *testing.T) {
	t.Parallel()
	srv, name := NewUnversionedBucket(t)
	v, err := client(srv).GetBucketVersioning(context.Background(), &s3.GetBucketVersioningInput{Bucket: aws.String(name)})
	if err != nil {
		t.Fatalf("GetBucketVersioning: %v", err)
	}
	if v.Status == types.BucketVersioningStatusEnabled {
		t.Errorf("versioning is on")
	}
}

func TestEventsReachOnlyTheSubscribedBucket(t *testing.T) {
	t.Parallel()
	srv, mine := NewBucket(t)
	_, other := NewBucket(t)
	log := Events(t, mine)
	c := client(srv)
	ctx := context.Background()
	for _, bucket := range []string{other, mine} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v"),
		}); err != nil {
			t.Fatalf("PutObject %s: %v", bucket, err)
		}
	}
	e := log.WaitFor(t, 5*time.Second, func(e s3local.Event) bool { return e.Key == "k" })
	if e.Bucket != mine || e.Name != "s3:ObjectCreated:Put" || e.Size != 1 || e.VersionID == "" {
		t.Errorf("event %+v", e)
	}
	for _, e := range log.All() {
		if e.Bucket != mine {
			t.Errorf("event for another bucket: %+v", e)
		}
	}
}
