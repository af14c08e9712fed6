package bucket

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ProbeConditionalWrites finds out whether the store honours If-None-Match
// on PutObject, by writing a probe object under probeDir (a directory the
// caller never imports) twice. A store that accepts the second write
// ignores conditions: the client then falls back to comparing a HEAD before
// each conditional write (a small race window the store leaves open), and
// the caller should say so once in its log. It also finds out whether the
// store honours If-Match on DeleteObject (ConditionalDeletes).
func (c *Client) ProbeConditionalWrites(ctx context.Context, probeDir string) (supported bool, err error) {
	if err := c.refuseWrite("probe conditional writes under", probeDir); err != nil {
		return false, err
	}
	var id [8]byte
	rand.Read(id[:])
	key := probeDir + "/conditional-probe-" + hex.EncodeToString(id[:])
	opt := PutOptions{IfNoneMatch: true}
	first, err := c.put(ctx, key, bytes.NewReader(nil), 0, opt)
	if err != nil {
		return false, fmt.Errorf("probe conditional writes: %w", err)
	}
	// The store's own answer counts here, not a confirmation of it.
	second, err := c.put(ctx, key, bytes.NewReader(nil), 0, opt)
	marker := c.probeConditionalDeletes(ctx, key)
	// The probe leaves nothing behind: its versions are removed for good,
	// not hidden under a delete marker, which some stores (MinIO,
	// versitygw) would go on listing as a prefix probeDir/.
	defer c.removeVersions(context.WithoutCancel(ctx), key, first.VersionID, second.VersionID, marker)
	switch {
	case errors.Is(err, ErrPrecondition):
		return true, nil
	case err == nil:
		c.headBeforeWrite.Store(true)
		return false, nil
	}
	return false, fmt.Errorf("probe conditional writes: %w", err)
}

// probeConditionalDeletes finds out whether the store honours If-Match on
// DeleteObject: a delete of key (the probe object) conditional on an ETag
// it does not have must be refused. AWS S3 and versitygw refuse it; a
// store that ignores the condition deletes, and its delete marker's
// version id is returned for the probe to remove.
func (c *Client) probeConditionalDeletes(ctx context.Context, key string) (marker string) {
	op := c.startOp(ctx)
	defer op.done()
	out, err := c.s3.DeleteObject(op.ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key),
		IfMatch: aws.String(`"00000000000000000000000000000000"`)})
	switch {
	case err == nil:
		return aws.ToString(out.VersionId)
	case errors.Is(c.fail(op, "probe conditional deletes on", key, err), ErrPrecondition):
		c.conditionalDeletes.Store(true)
	}
	return ""
}

// ConditionalDeletes tells whether the store honours If-Match on
// DeleteObject, as ProbeConditionalWrites found; DeleteCurrent uses it.
func (c *Client) ConditionalDeletes() bool { return c.conditionalDeletes.Load() }

// checkCondition emulates opt's conditions with a HEAD, for stores that
// ignore them.
func (c *Client) checkCondition(ctx context.Context, key string, opt PutOptions) error {
	if !c.headBeforeWrite.Load() {
		return nil
	}
	return c.headCondition(ctx, key, opt)
}

// headCondition checks opt's conditions on key (If-Match, If-None-Match)
// against a HEAD of its current object: an error wrapping ErrPrecondition
// when one fails, the HEAD's error when it fails otherwise.
func (c *Client) headCondition(ctx context.Context, key string, opt PutOptions) error {
	if opt.IfMatch == "" && !opt.IfNoneMatch {
		return nil
	}
	cur, err := c.Head(ctx, key, "")
	switch {
	case errors.Is(err, ErrNotFound):
		if opt.IfMatch != "" {
			return fmt.Errorf("bucket: %s was deleted: %w", key, ErrPrecondition)
		}
		return nil
	case err != nil:
		return err
	case opt.IfNoneMatch:
		return fmt.Errorf("bucket: %s exists: %w", key, ErrPrecondition)
	case cur.ETag != opt.IfMatch:
		return fmt.Errorf("bucket: %s changed (etag %s, expected %s): %w", key, cur.ETag, opt.IfMatch, ErrPrecondition)
	}
	return nil
}

// removeVersions deletes the given versions of key for good (on a bucket
// without versions, the object), for objects of bucketfs's own that must
// leave no trace, such as the conditional-write probe.
func (c *Client) removeVersions(ctx context.Context, key string, versions ...string) {
	for _, v := range versions {
		if v == "" {
			continue
		}
		op := c.startOp(ctx)
		_, err := c.s3.DeleteObject(op.ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key), VersionId: &v})
		if err != nil {
			c.fail(op, "delete a version of", key, err)
		}
		op.done()
	}
	if versions[0] == "" {
		c.Delete(ctx, key)
	}
}
