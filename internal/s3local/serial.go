package s3local

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"bucketfs/internal/keylock"
)

// serialBackend runs the requests that add a version or a delete marker to
// one key one at a time. versitygw's posix backend moves the current
// object of a key into its versions directory and puts the new one in its
// place as separate file operations; a PUT and a DELETE of the same key at
// once could interleave them and acknowledge a version id that then did
// not exist (14 to 36 of 200 racing pairs). With them serialised, every
// version the store acknowledges is listed afterwards. A HEAD and a GET
// of a key take its lock too: the backend answers them with several file
// operations on the key's path (its size, its attributes, the open of its
// bytes), and a write renaming a new object over the path in between
// made an answer pair one version's id with another's ETag, size or
// bytes (33 of 6,576 answers racing 300 PUTs). A GET holds the lock only
// until its object is open. Listings and requests on different keys
// still run concurrently.
type serialBackend struct {
	backend.Backend
	locks keylock.Table[string]
}

func newSerialBackend(be backend.Backend) *serialBackend {
	return &serialBackend{Backend: be}
}

// lock takes the locks of bucket's keys and returns the function that
// releases them.
func (b *serialBackend) lock(bucket *string, keys ...*string) func() {
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, aws.ToString(bucket)+"/"+aws.ToString(k))
	}
	return keylock.LockAll(&b.locks, names)
}

// HeadObject answers under the key's lock, from one version.
func (b *serialBackend) HeadObject(ctx context.Context, in *s3.HeadObjectInput) (*s3.HeadObjectOutput, error) {
	defer b.lock(in.Bucket, in.Key)()
	return b.Backend.HeadObject(ctx, in)
}

// GetObject opens the object under the key's lock, so that its ETag,
// size, version id and bytes are one version's.
func (b *serialBackend) GetObject(ctx context.Context, in *s3.GetObjectInput) (*s3.GetObjectOutput, error) {
	defer b.lock(in.Bucket, in.Key)()
	return b.Backend.GetObject(ctx, in)
}

// PutObject evaluates If-Match and If-None-Match: * itself (see
// preconditions), under the key's lock, so the look and the write are one
// step.
func (b *serialBackend) PutObject(ctx context.Context, in s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	defer b.lock(in.Bucket, in.Key)()
	var err error
	if in.IfMatch, in.IfNoneMatch, err = b.preconditions(ctx, in.Bucket, in.Key, in.IfMatch, in.IfNoneMatch); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	return b.Backend.PutObject(ctx, in)
}

// preconditions evaluates a write's If-Match and If-None-Match: * against
// key's current object as S3 does, where a delete marker is no current
// object: If-Match then fails with NoSuchKey, and If-None-Match: *
// succeeds. The posix backend compares whatever file stands at the key,
// a delete marker's too, which keeps the ETag of the object it hid: an
// If-Match of that ETag overwrote the delete (an export conditional on the
// object the file side last saw undid a delete made in the bucket since),
// and If-None-Match: * failed. The conditions it evaluated are returned
// as nil, for the backend not to judge them again; the caller holds the
// key's lock.
func (b *serialBackend) preconditions(ctx context.Context, bucket, key, ifMatch, ifNoneMatch *string) (*string, *string, error) {
	anyObject := aws.ToString(ifNoneMatch) == "*"
	if ifMatch == nil && !anyObject {
		return ifMatch, ifNoneMatch, nil
	}
	etag, exists, err := b.current(ctx, bucket, key)
	switch {
	case err != nil:
		return nil, nil, err
	case ifMatch != nil && !exists:
		return nil, nil, s3err.GetAPIError(s3err.ErrNoSuchKey)
	case ifMatch != nil && etag != strings.Trim(*ifMatch, `"`), anyObject && exists:
		return nil, nil, s3err.GetAPIError(s3err.ErrPreconditionFailed)
	}
	if anyObject {
		ifNoneMatch = nil
	}
	return nil, ifNoneMatch, nil
}

// current returns the ETag of key's current object, if it has one (the
// caller holds the key's lock).
func (b *serialBackend) current(ctx context.Context, bucket, key *string) (etag string, exists bool, err error) {
	cur, err := b.Backend.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bucket, Key: key})
	var apiErr s3err.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode == http.StatusNotFound {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.Trim(aws.ToString(cur.ETag), `"`), true, nil
}

// CopyObject also honours If-Match and If-None-Match on the destination,
// which versitygw's API drops (copyConditions carries them here): under
// the key's lock the look and the copy are one step, so a copy made
// conditional on what the destination held never overwrites a write
// racing it.
func (b *serialBackend) CopyObject(ctx context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	defer b.lock(in.Bucket, in.Key)()
	if cond, ok := ctx.Value(copyConditionsKey{}).(copyConditions); ok {
		etag, exists, err := b.current(ctx, in.Bucket, in.Key)
		if err != nil {
			return s3response.CopyObjectOutput{}, err
		}
		if cond.ifNoneMatch == "*" && exists || cond.ifMatch != "" && (!exists || etag != strings.Trim(cond.ifMatch, `"`)) {
			return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrPreconditionFailed)
		}
	}
	return b.Backend.CopyObject(ctx, in)
}

// copyConditions are the If-Match and If-None-Match headers of a
// CopyObject request, which apply to its destination.
type copyConditions struct{ ifMatch, ifNoneMatch string }

type copyConditionsKey struct{}

// keepCopyConditions is a middleware that hands the destination conditions
// of a CopyObject request (a PUT with x-amz-copy-source that is no
// UploadPartCopy) to the backend, through the request's context.
func keepCopyConditions(c fiber.Ctx) error {
	if c.Method() == http.MethodPut && c.Get("X-Amz-Copy-Source") != "" && c.Query("uploadId") == "" {
		cond := copyConditions{ifMatch: c.Get("If-Match"), ifNoneMatch: c.Get("If-None-Match")}
		if cond != (copyConditions{}) {
			c.RequestCtx().SetUserValue(copyConditionsKey{}, cond)
		}
	}
	return c.Next()
}

func (b *serialBackend) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	defer b.lock(in.Bucket, in.Key)()
	return b.Backend.DeleteObject(ctx, in)
}

func (b *serialBackend) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	var keys []*string
	if in.Delete != nil {
		for _, o := range in.Delete.Objects {
			keys = append(keys, o.Key)
		}
	}
	defer b.lock(in.Bucket, keys...)()
	return b.Backend.DeleteObjects(ctx, in)
}

// CompleteMultipartUpload evaluates If-Match and If-None-Match: * as
// PutObject does.
func (b *serialBackend) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput) (s3response.CompleteMultipartUploadResult, string, error) {
	defer b.lock(in.Bucket, in.Key)()
	var err error
	if in.IfMatch, in.IfNoneMatch, err = b.preconditions(ctx, in.Bucket, in.Key, in.IfMatch, in.IfNoneMatch); err != nil {
		return s3response.CompleteMultipartUploadResult{}, "", err
	}
	return b.Backend.CompleteMultipartUpload(ctx, in)
}
