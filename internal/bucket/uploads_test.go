package bucket

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// uploadIDs lists the ids of the bucket's multipart uploads in progress.
func uploadIDs(t *testing.T, c *Client) []string {
	t.Helper()
	out, err := c.s3.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &c.bucket})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	var ids []string
	for _, u := range out.Uploads {
		ids = append(ids, aws.ToString(u.UploadId))
	}
	return ids
}

func twoParts() []Part {
	data := randomBytes(MinPartSize + 100)
	return []Part{
		{Off: 0, Len: MinPartSize, Src: bytes.NewReader(data)},
		{Off: MinPartSize, Len: 100, Src: bytes.NewReader(data)},
	}
}

func TestPutPartsTellsTheUploadIDBeforeAnyPartAndItsEndAfterCompletion(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "p")
	ctx := context.Background()
	var started, ended []string
	opt := PutOptions{
		OnUploadStart: func(ctx context.Context, id string) error {
			started = append(started, id)
			if s := c.Stats(); s.Multipart != 1 || s.BytesWritten != 0 {
				t.Errorf("at OnUploadStart, %d multipart requests and %d bytes were sent; want only the create", s.Multipart, s.BytesWritten)
			}
			if ids := uploadIDs(t, c); len(ids) != 1 || ids[0] != id {
				t.Errorf("at OnUploadStart the store lists uploads %v; want [%s]", ids, id)
			}
			return nil
		},
		OnUploadEnd: func(ctx context.Context, id string) {
			ended = append(ended, id)
			if _, err := c.Head(ctx, "obj", ""); err != nil {
				t.Errorf("at OnUploadEnd the object is not there: %v", err)
			}
		},
	}
	if _, err := c.PutParts(ctx, "obj", twoParts(), 2, opt); err != nil {
		t.Fatalf("PutParts: %v", err)
	}
	if len(started) != 1 || started[0] == "" || len(ended) != 1 || ended[0] != started[0] {
		t.Fatalf("OnUploadStart saw %q, OnUploadEnd saw %q; want one id, the same", started, ended)
	}
	if ids := uploadIDs(t, c); len(ids) != 0 {
		t.Errorf("uploads left after completion: %v", ids)
	}
}

func TestAnOnUploadStartErrorAbortsTheUploadBeforeAnyPart(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "p")
	ctx := context.Background()
	refused := errors.New("journal refused the upload")
	var started, ended string
	_, err := c.PutParts(ctx, "obj", twoParts(), 2, PutOptions{
		OnUploadStart: func(ctx context.Context, id string) error { started = id; return refused },
		OnUploadEnd:   func(ctx context.Context, id string) { ended = id },
	})
	if !errors.Is(err, refused) {
		t.Fatalf("PutParts returned %v; want the hook's error", err)
	}
	if started == "" || ended != started {
		t.Errorf("OnUploadStart saw %q, OnUploadEnd saw %q; want the aborted upload's end told", started, ended)
	}
	if ids := uploadIDs(t, c); len(ids) != 0 {
		t.Errorf("uploads left after the refusal: %v", ids)
	}
	if _, err := c.Head(ctx, "obj", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Head after the refused upload: %v; want ErrNotFound", err)
	}
	if s := c.Stats(); s.BytesWritten != 0 {
		t.Errorf("%d bytes of parts were sent", s.BytesWritten)
	}
}

func TestAbortUploadEndsAnUploadAndTakesAnUnknownOneAsDone(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "p")
	ctx := context.Background()
	created, err := c.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &c.bucket, Key: c.key("k")})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(created.UploadId)
	if _, err := c.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: &c.bucket, Key: c.key("k"), UploadId: &id,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("a part")), ContentLength: aws.Int64(6)}); err != nil {
		t.Fatal(err)
	}
	if err := c.AbortUpload(ctx, "k", id); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	if ids := uploadIDs(t, c); len(ids) != 0 {
		t.Errorf("uploads left after AbortUpload: %v", ids)
	}
	if err := c.AbortUpload(ctx, "k", id); err != nil {
		t.Errorf("AbortUpload of an upload aborted already: %v", err)
	}
	if err := c.AbortUpload(ctx, "other", "8c3e4b1d-no-such-upload"); err != nil {
		t.Errorf("AbortUpload of an unknown id: %v", err)
	}
}
