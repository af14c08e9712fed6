package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"bucketfs/internal/s3test"
)

// partGate is a proxy between bucketfs and an S3 store. While hold is set,
// it lets the first part of a multipart upload through and holds every
// later part until the client goes away, reporting the upload id on held:
// an upload caught in flight with a part stored, every time.
type partGate struct {
	hold atomic.Bool
	held chan string
}

func startPartGate(t *testing.T, target string) (*partGate, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &partGate{held: make(chan string, 16)}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the Host header, so signatures hold
	closing := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if g.hold.Load() && r.Method == http.MethodPut && q.Get("uploadId") != "" && q.Get("partNumber") != "1" {
			// Only once the body is read does the server notice the
			// client going away.
			io.Copy(io.Discard, r.Body)
			select {
			case g.held <- q.Get("uploadId"):
			default:
			}
			select {
			case <-r.Context().Done(): // the client died or gave up
			case <-closing:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(closing) }) // runs first
	return g, srv.URL
}

// storeUploads lists the multipart uploads in progress in bucket as
// "key=id", sorted.
func storeUploads(t *testing.T, c *s3.Client, bucket string) []string {
	t.Helper()
	out, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	var ups []string
	for _, u := range out.Uploads {
		ups = append(ups, aws.ToString(u.Key)+"="+aws.ToString(u.UploadId))
	}
	slices.Sort(ups)
	return ups
}

// The bucket lives in the test's own versitygw store (the embedded store's
// backend), not in the embedded store: that one dies with the process, so
// nothing could show the upload a kill -9 leaves behind, and nothing could
// keep the upload from finishing before the kill.
func TestKill9DuringAMultipartUploadLeavesNoPartsBehindAfterTheRestart(t *testing.T) {
	srv, bucket := s3test.NewBucket(t)
	raw := s3.New(s3.Options{BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	ctx := context.Background()
	// bucketfs reaches the store through the gate, which holds the upload
	// in flight until the kill.
	gate, endpoint := startPartGate(t, srv.Endpoint)
	p := newFS(t)
	p.env = []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL=", "AWS_PROFILE="}
	flags := []string{"--bucket", "s3://" + bucket, "--endpoint", endpoint}

	p.start(append(flags, "--export-delay", "1h")...)
	data := randomBytes(40 << 20) // three parts of the default 16 MiB
	writeSynced(t, filepath.Join(p.mnt, "huge"), data)
	p.stop()

	gate.hold.Store(true)
	p.start(append(flags, "--export-delay", "50ms")...)
	var orphan string
	select {
	case orphan = <-gate.held:
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for the multipart upload")
	}
	waitFor(t, "the first part to be stored", func() bool {
		out, err := raw.ListParts(ctx, &s3.ListPartsInput{Bucket: &bucket, Key: aws.String("huge"), UploadId: &orphan})
		return err == nil && len(out.Parts) > 0
	})
	var st struct {
		Uploads int `json:"uploads_in_flight"`
	}
	if err := json.Unmarshal([]byte(p.run("status", "--json")), &st); err != nil || st.Uploads != 1 {
		t.Fatalf("status shows %d uploads in flight (%v); want 1", st.Uploads, err)
	}
	p.kill9()
	if got := storeUploads(t, raw, bucket); !slices.Equal(got, []string{"huge=" + orphan}) {
		t.Fatalf("after the kill the store holds uploads %v; want the one cut short", got)
	}
	// Uploads by other tools into the same bucket, one to the very same
	// key: bucketfs did not start them and must leave them alone. (One of
	// bucketfs's own key that holds no part yet, started while bucketfs
	// was down, would be taken for one of its own that a crash caught
	// right after its creation: the other tool's here has sent a part.)
	var theirs []string
	for _, key := range []string{"huge", "elsewhere"} {
		out, err := raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String(key), UploadId: out.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("a part"))}); err != nil {
			t.Fatal(err)
		}
		theirs = append(theirs, key+"="+aws.ToString(out.UploadId))
	}
	slices.Sort(theirs)

	gate.hold.Store(false)
	p.start(append(flags, "--export-delay", "50ms")...)
	waitFor(t, "the upload cut short to be aborted", func() bool {
		return !slices.Contains(storeUploads(t, raw, bucket), "huge="+orphan)
	})
	p.run("flush")
	out, err := raw.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("huge")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the restart and a flush the object has %d bytes (want %d), equal %v, %v",
			len(got), len(data), bytes.Equal(got, data), err)
	}
	if got := storeUploads(t, raw, bucket); !slices.Equal(got, theirs) {
		t.Errorf("uploads after the flush: %v; want only the other tools' %v", got, theirs)
	}
	p.stop()
	if log := p.log.String(); !strings.Contains(log, "aborted=1 failed=0") {
		t.Errorf("the restart did not log the abort:\n%s", log)
	}
}
