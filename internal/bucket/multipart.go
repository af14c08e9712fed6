package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

const (
	// MinPartSize is the smallest part S3 accepts, except for the last.
	MinPartSize = 5 << 20
	// MaxParts is the most parts one multipart upload may have.
	MaxParts = 10000

	defaultParallel = 4
)

// Part is one part of a multipart upload: either Len bytes read from Src at
// Off, or (Src nil) a server-side copy of [CopyOff, CopyOff+Len) of
// CopyKey at CopyVersion ("" for the current version).
type Part struct {
	Off, Len    int64 // range of the final object
	Src         io.ReaderAt
	CopyKey     string
	CopyVersion string
	CopyOff     int64
}

// PutParts writes the object at key from parts with one multipart upload:
// parts are uploaded (Src) or copied on the store's side (UploadPartCopy),
// at most parallel at a time (default 4), and the upload is completed with
// opt's conditions. Parts must tile the object in order from offset 0, and
// every part but the last must be at least MinPartSize. On any failure the
// upload is aborted, so nothing partial is left behind. A crash can still
// leave the upload behind, parts and all; opt.OnUploadStart and
// opt.OnUploadEnd let the caller keep a record to abort it by later.
func (c *Client) PutParts(ctx context.Context, key string, parts []Part, parallel int, opt PutOptions) (ObjectInfo, error) {
	if err := c.refuseWrite("put", key); err != nil {
		return ObjectInfo{}, err
	}
	size, err := checkParts(parts)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("bucket: put parts of %s: %w", key, err)
	}
	if parallel <= 0 {
		parallel = defaultParallel
	}
	if err := c.checkCondition(ctx, key, opt); err != nil {
		return ObjectInfo{}, err
	}
	op := c.startOp(ctx)
	defer op.done()

	created, err := c.s3.CreateMultipartUpload(op.ctx, &s3.CreateMultipartUploadInput{
		Bucket:      &c.bucket,
		Key:         c.key(key),
		Metadata:    opt.Metadata,
		ContentType: opt.contentType(),
	})
	if err != nil {
		return ObjectInfo{}, c.fail(op, "start multipart upload of", key, err)
	}
	uploadID := created.UploadId
	if opt.OnUploadStart != nil {
		if err := opt.OnUploadStart(ctx, aws.ToString(uploadID)); err != nil {
			c.abandon(ctx, key, uploadID, opt)
			return ObjectInfo{}, fmt.Errorf("bucket: start multipart upload of s3://%s/%s%s: %w", c.bucket, c.prefix, key, err)
		}
		op.progress() // the caller's time, not the store's
	}

	completed, err := c.uploadParts(op, key, uploadID, parts, parallel)
	if err != nil {
		c.abandon(ctx, key, uploadID, opt)
		return ObjectInfo{}, err
	}
	op.progress() // completing may take a while on the store's side
	out, err := c.s3.CompleteMultipartUpload(op.ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &c.bucket,
		Key:             c.key(key),
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
		IfMatch:         opt.ifMatch(),
		IfNoneMatch:     opt.ifNoneMatch(),
	})
	if err != nil {
		err = c.fail(op, "complete multipart upload of", key, err)
		c.abandon(ctx, key, uploadID, opt)
		return ObjectInfo{}, err
	}
	if opt.OnUploadEnd != nil {
		opt.OnUploadEnd(context.WithoutCancel(ctx), aws.ToString(uploadID))
	}
	info := ObjectInfo{
		Key:         key,
		Size:        size,
		ETag:        unquote(out.ETag),
		VersionID:   aws.ToString(out.VersionId),
		Metadata:    opt.Metadata,
		ContentType: opt.ContentType,
	}
	if err := c.confirmWrite(ctx, key, opt, info, false); err != nil {
		return ObjectInfo{}, err
	}
	return info, nil
}

// checkParts checks that parts tile [0, size) in order with valid sizes and
// returns size.
func checkParts(parts []Part) (int64, error) {
	if len(parts) == 0 || len(parts) > MaxParts {
		return 0, fmt.Errorf("%d parts, want 1 to %d", len(parts), MaxParts)
	}
	var next int64
	for i, p := range parts {
		switch {
		case p.Off != next:
			return 0, fmt.Errorf("part %d starts at %d, want %d", i, p.Off, next)
		case p.Len <= 0:
			return 0, fmt.Errorf("part %d has length %d", i, p.Len)
		case p.Len < MinPartSize && i < len(parts)-1:
			return 0, fmt.Errorf("part %d has %d bytes; all parts but the last need at least %d", i, p.Len, MinPartSize)
		case p.Src == nil && p.CopyKey == "":
			return 0, fmt.Errorf("part %d has neither data nor a key to copy", i)
		case p.Src == nil && p.CopyOff < 0:
			return 0, fmt.Errorf("part %d copies from offset %d", i, p.CopyOff)
		}
		next += p.Len
	}
	return next, nil
}

// uploadParts uploads or copies every part, parallel at a time, and returns
// them in order for CompleteMultipartUpload. It stops at the first failure.
func (c *Client) uploadParts(op *opTimer, key string, uploadID *string, parts []Part, parallel int) ([]types.CompletedPart, error) {
	ctx, cancel := context.WithCancel(op.ctx)
	defer cancel()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		firstErr  error
		completed = make([]types.CompletedPart, len(parts))
		slots     = make(chan struct{}, parallel)
	)
	setErr := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
loop:
	for i := range parts {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			etag, err := c.uploadPart(ctx, op, key, uploadID, int32(i+1), parts[i])
			if err != nil {
				setErr(err)
				return
			}
			completed[i] = types.CompletedPart{ETag: etag, PartNumber: aws.Int32(int32(i + 1))}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = c.fail(op, "upload parts of", key, ctx.Err())
	}
	return completed, firstErr
}

// uploadPart sends one part and returns its ETag.
func (c *Client) uploadPart(ctx context.Context, op *opTimer, key string, uploadID *string, number int32, p Part) (*string, error) {
	verb := fmt.Sprintf("upload part %d of", number)
	if p.Src == nil {
		out, err := c.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{
			Bucket:          &c.bucket,
			Key:             c.key(key),
			UploadId:        uploadID,
			PartNumber:      aws.Int32(number),
			CopySource:      c.copySource(p.CopyKey, p.CopyVersion),
			CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", p.CopyOff, p.CopyOff+p.Len-1)),
		})
		if err != nil {
			return nil, c.fail(op, fmt.Sprintf("copy %s into part %d of", p.CopyKey, number), key, err)
		}
		op.progress()
		if out.CopyPartResult == nil {
			return nil, fmt.Errorf("bucket: %s %s: no part ETag in response", verb, key)
		}
		return out.CopyPartResult.ETag, nil
	}
	out, err := c.s3.UploadPart(ctx, &s3.UploadPartInput{
		Bucket:        &c.bucket,
		Key:           c.key(key),
		UploadId:      uploadID,
		PartNumber:    aws.Int32(number),
		Body:          &progressReadSeeker{ReadSeeker: io.NewSectionReader(p.Src, p.Off, p.Len), op: op},
		ContentLength: aws.Int64(p.Len),
	})
	if err != nil {
		return nil, c.fail(op, verb, key, err)
	}
	c.stats.bytesWritten.Add(uint64(p.Len))
	return out.ETag, nil
}

// abandon aborts a multipart upload that will not be completed, even if
// ctx is already done: an upload left behind keeps its parts (and their
// cost) forever. Once the upload is gone it tells opt.OnUploadEnd. An abort
// that fails leaves the upload to the record the caller made at
// OnUploadStart, or else to the bucket's lifecycle rules
// (AbortIncompleteMultipartUpload); PutParts has its own error to return.
func (c *Client) abandon(ctx context.Context, key string, uploadID *string, opt PutOptions) {
	ctx = context.WithoutCancel(ctx)
	if err := c.AbortUpload(ctx, key, aws.ToString(uploadID)); err != nil {
		return
	}
	if opt.OnUploadEnd != nil {
		opt.OnUploadEnd(ctx, aws.ToString(uploadID))
	}
}

// AbortUpload aborts the multipart upload uploadID of key, dropping the
// parts stored so far. An upload the store does not know (NoSuchUpload:
// completed or aborted already) counts as aborted.
func (c *Client) AbortUpload(ctx context.Context, key, uploadID string) error {
	if err := c.refuseWrite("abort an upload of", key); err != nil {
		return err
	}
	return c.abortUpload(ctx, key, uploadID)
}

// HasParts reports whether the multipart upload id of key holds a part.
func (c *Client) HasParts(ctx context.Context, key, id string) (bool, error) {
	op := c.startOp(ctx)
	defer op.done()
	out, err := c.s3.ListParts(op.ctx, &s3.ListPartsInput{Bucket: &c.bucket, Key: c.key(key), UploadId: &id, MaxParts: aws.Int32(1)})
	if err != nil {
		return false, c.fail(op, "list the parts of upload "+id+" of", key, err)
	}
	return len(out.Parts) > 0, nil
}

// UploadsOf returns the ids of the multipart uploads in progress of
// exactly key.
func (c *Client) UploadsOf(ctx context.Context, key string) ([]string, error) {
	op := c.startOp(ctx)
	defer op.done()
	full := *c.key(key)
	var ids []string
	in := &s3.ListMultipartUploadsInput{Bucket: &c.bucket, Prefix: &full}
	for {
		out, err := c.s3.ListMultipartUploads(op.ctx, in)
		if err != nil {
			return nil, c.fail(op, "list multipart uploads of", key, err)
		}
		op.progress()
		for _, u := range out.Uploads {
			if u.Key != nil && *u.Key == full && u.UploadId != nil {
				ids = append(ids, *u.UploadId)
			}
		}
		if out.IsTruncated == nil || !*out.IsTruncated || out.NextKeyMarker == nil {
			return ids, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

func (c *Client) abortUpload(ctx context.Context, key, uploadID string) error {
	op := c.startOp(ctx)
	defer op.done()
	_, err := c.s3.AbortMultipartUpload(op.ctx, &s3.AbortMultipartUploadInput{
		Bucket: &c.bucket, Key: c.key(key), UploadId: &uploadID,
	})
	var apiErr smithy.APIError
	if err == nil || errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload" {
		return nil
	}
	return c.fail(op, "abort multipart upload "+uploadID+" of", key, err)
}
