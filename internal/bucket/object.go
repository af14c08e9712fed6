package bucket

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ObjectInfo describes one object version.
type ObjectInfo struct {
	Key          string // relative to the client's prefix
	Size         int64  // whole object size; -1 where the store did not say (Copy)
	ETag         string // without quotes
	VersionID    string // "" on an unversioned bucket and in List results
	LastModified time.Time
	// Metadata is the user metadata, names in lower case without the
	// x-amz-meta- prefix. Only Head and Get fetch it; Put, PutParts and Copy
	// echo what they were given.
	Metadata       map[string]string
	ContentType    string
	IsDeleteMarker bool // only ListVersions returns delete markers
}

// PutOptions are the conditions and attributes of a write.
type PutOptions struct {
	// IfMatch, if set, makes the write succeed only if the object's current
	// ETag is this one (with or without quotes).
	IfMatch string
	// IfMatchVersion is the version id of the object IfMatch names, as
	// the caller saw it. S3 has no such condition and it is not sent;
	// where the store's conditional writes are not trusted, the write is
	// confirmed to follow this very version (see confirmWrite), by its
	// identity rather than by an ETag that a later version with the same
	// bytes shares. Without it, the version before the write is checked
	// by ETag only.
	IfMatchVersion string
	// Ours, if set, tells whether an object version's user metadata marks
	// it as the writer's own (the exporter's origin tag of the inode it
	// exports). Where a write is confirmed (confirmWrite), a version of
	// the writer's own with the ETag IfMatch names, found between the one
	// IfMatchVersion names and the write, is an upload of its own that a
	// crash left unrecorded, not another writer's.
	Ours func(md map[string]string) bool
	// IfNoneMatch makes the write succeed only if the key has no current
	// object (If-None-Match: *).
	IfNoneMatch bool
	// SourceETag, for Copy from a named version: that version's ETag,
	// sent as the copy-source condition, so that a store that copies other
	// bytes than the version's refuses instead. versitygw v1.8.0 checks
	// that the version named is the current one and then opens the
	// current object: a write of the source key landing in between is
	// copied under the old version's name. Copy then fails with
	// ErrSourceChanged (see there).
	SourceETag  string
	Metadata    map[string]string
	ContentType string

	// OnUploadStart, if set, is called by PutParts with the id of its
	// multipart upload as soon as the store has created it, before any part
	// is sent: the moment to record the upload somewhere durable, so that
	// one a crash cuts short can be aborted later (AbortUpload) instead of
	// keeping its parts in the bucket forever. If it returns an error, the
	// upload is aborted and PutParts returns that error. Put and Copy make
	// no multipart upload and ignore it.
	OnUploadStart func(ctx context.Context, uploadID string) error
	// OnUploadEnd, if set, is called by PutParts once an upload it told
	// OnUploadStart about is gone from the store: completed, or aborted
	// (also after OnUploadStart failed). It is not called when the abort
	// itself failed, since the upload is then still there; whoever recorded
	// it should keep the record and abort it later. Its context carries the
	// caller's values but is never cancelled.
	OnUploadEnd func(ctx context.Context, uploadID string)
}

func (o PutOptions) ifMatch() *string { return matchETag(o.IfMatch) }

func (o PutOptions) ifNoneMatch() *string {
	if !o.IfNoneMatch {
		return nil
	}
	return aws.String("*")
}

func (o PutOptions) contentType() *string {
	if o.ContentType == "" {
		return nil
	}
	return aws.String(o.ContentType)
}

// matchETag is the If-Match value for etag, or nil for "".
func matchETag(etag string) *string {
	if etag == "" {
		return nil
	}
	return aws.String(quote(etag))
}

func quote(etag string) string {
	if strings.HasPrefix(etag, `"`) {
		return etag
	}
	return `"` + etag + `"`
}

func unquote(etag *string) string { return strings.Trim(aws.ToString(etag), `"`) }

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func lowerKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = v
	}
	return out
}

// Head returns the object at key: the given version, or the current one if
// versionID is "".
func (c *Client) Head(ctx context.Context, key, versionID string) (ObjectInfo, error) {
	op := c.startOp(ctx)
	defer op.done()
	var (
		out *s3.HeadObjectOutput
		err error
	)
	if c.localHead != nil {
		var found bool
		out, found, err = c.localHead(op.ctx, c.bucket, aws.ToString(c.key(key)), versionID)
		switch {
		case err == nil && !found:
			c.stats.localHeads.Add(1)
			return ObjectInfo{}, fmt.Errorf("bucket: head %s%s (in process): %w", c, key, ErrNotFound)
		case err == nil:
			c.stats.localHeads.Add(1)
		default:
			out = nil // over HTTP, which says what is wrong
		}
	}
	if out == nil {
		out, err = c.s3.HeadObject(op.ctx, &s3.HeadObjectInput{
			Bucket: &c.bucket, Key: c.key(key), VersionId: optional(versionID),
		})
	}
	if err != nil {
		return ObjectInfo{}, c.fail(op, "head", key, err)
	}
	return ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         unquote(out.ETag),
		VersionID:    aws.ToString(out.VersionId),
		LastModified: aws.ToTime(out.LastModified),
		Metadata:     lowerKeys(out.Metadata),
		ContentType:  aws.ToString(out.ContentType),
	}, nil
}

// Get streams n bytes of the object at key (the given version, or the
// current one) starting at off; n < 0 means to the end. The ObjectInfo
// describes the whole object. Starting at or past the end yields an empty
// body. The caller must Close the body.
func (c *Client) Get(ctx context.Context, key, versionID string, off, n int64) (io.ReadCloser, ObjectInfo, error) {
	if off < 0 {
		return nil, ObjectInfo{}, fmt.Errorf("bucket: get %s: negative offset %d", key, off)
	}
	if n == 0 {
		info, err := c.Head(ctx, key, versionID)
		if err != nil {
			return nil, ObjectInfo{}, err
		}
		return io.NopCloser(bytes.NewReader(nil)), info, nil
	}
	op := c.startOp(ctx)
	out, err := c.s3.GetObject(op.ctx, &s3.GetObjectInput{
		Bucket: &c.bucket, Key: c.key(key), VersionId: optional(versionID), Range: byteRange(off, n),
	})
	if err != nil {
		op.done()
		if isInvalidRange(err) {
			info, err := c.Head(ctx, key, versionID)
			if err != nil {
				return nil, ObjectInfo{}, err
			}
			return io.NopCloser(bytes.NewReader(nil)), info, nil
		}
		return nil, ObjectInfo{}, c.fail(op, "get", key, err)
	}
	op.progress()
	body := &objectBody{body: out.Body, op: op, c: c, key: key}
	return body, getInfo(key, out), nil
}

// byteRange is the Range header for n bytes at off (n < 0: to the end), or
// nil for the whole object.
func byteRange(off, n int64) *string {
	switch {
	case n < 0 && off == 0:
		return nil
	case n < 0:
		return aws.String(fmt.Sprintf("bytes=%d-", off))
	default:
		return aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
}

func isInvalidRange(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "InvalidRange"
}

// getInfo makes the ObjectInfo of a GET response: for a ranged GET the
// object size is the total in Content-Range, not the body length.
func getInfo(key string, out *s3.GetObjectOutput) ObjectInfo {
	size := aws.ToInt64(out.ContentLength)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		if _, total, ok := strings.Cut(cr, "/"); ok && total != "*" {
			if t, err := strconv.ParseInt(total, 10, 64); err == nil {
				size = t
			}
		}
	}
	return ObjectInfo{
		Key:          key,
		Size:         size,
		ETag:         unquote(out.ETag),
		VersionID:    aws.ToString(out.VersionId),
		LastModified: aws.ToTime(out.LastModified),
		Metadata:     lowerKeys(out.Metadata),
		ContentType:  aws.ToString(out.ContentType),
	}
}

// objectBody is a GET body that counts bytes, keeps its operation alive
// while data moves and classifies read errors.
type objectBody struct {
	body io.ReadCloser
	op   *opTimer
	c    *Client
	key  string
}

func (b *objectBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.c.stats.bytesRead.Add(uint64(n))
	if n > 0 {
		b.op.progress()
	}
	if err != nil && err != io.EOF {
		err = b.c.fail(b.op, "read", b.key, err)
	}
	return n, err
}

func (b *objectBody) Close() error {
	err := b.body.Close()
	b.op.done()
	return err
}

// ReadAt reads len(p) bytes of the object at key (the given version, or the
// current one) at off with one ranged GET. It returns fewer bytes only at the
// end of the object, and then io.EOF. If the transfer breaks off, the rest is
// fetched again, conditional on the same ETag.
func (c *Client) ReadAt(ctx context.Context, key, versionID string, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("bucket: read %s: negative offset %d", key, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	op := c.startOp(ctx)
	defer op.done()
	got, etag := 0, ""
	for attempt := 1; ; attempt++ {
		out, err := c.s3.GetObject(op.ctx, &s3.GetObjectInput{
			Bucket: &c.bucket, Key: c.key(key), VersionId: optional(versionID),
			Range:   byteRange(off+int64(got), int64(len(p)-got)),
			IfMatch: matchETag(etag),
		})
		if err != nil {
			if isInvalidRange(err) {
				return got, io.EOF
			}
			return got, c.fail(op, "read", key, err)
		}
		if etag == "" {
			etag = unquote(out.ETag)
		}
		want := int(min(aws.ToInt64(out.ContentLength), int64(len(p)-got)))
		n, err := io.ReadFull(&progressReader{r: out.Body, op: op}, p[got:got+want])
		out.Body.Close()
		got += n
		c.stats.bytesRead.Add(uint64(n))
		switch {
		case err == nil && got == len(p):
			return got, nil
		case err == nil:
			return got, io.EOF // the object ends inside p
		case attempt >= c.maxAttempts || op.ctx.Err() != nil:
			return got, c.fail(op, "read", key, err)
		}
		// The body broke off; fetch the rest of the same object.
	}
}

// progressReader reports progress to an operation as data moves.
type progressReader struct {
	r  io.Reader
	op *opTimer
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.op.progress()
	}
	return n, err
}

// progressReadSeeker is a progressReader for request bodies, which the SDK
// seeks to rewind them for retries.
type progressReadSeeker struct {
	io.ReadSeeker
	op *opTimer
}

func (r *progressReadSeeker) Read(p []byte) (int, error) {
	n, err := r.ReadSeeker.Read(p)
	if n > 0 {
		r.op.progress()
	}
	return n, err
}

// Put writes size bytes from body as the object at key, if opt's conditions
// hold. The returned ObjectInfo has the new ETag and VersionID.
func (c *Client) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opt PutOptions) (ObjectInfo, error) {
	info, err := c.put(ctx, key, body, size, opt)
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := c.confirmWrite(ctx, key, opt, info, false); err != nil {
		return ObjectInfo{}, err
	}
	return info, nil
}

// put is Put without the confirmation of a conditional write, for the
// probe of conditional writes, which looks at what the store does itself.
func (c *Client) put(ctx context.Context, key string, body io.ReadSeeker, size int64, opt PutOptions) (ObjectInfo, error) {
	if err := c.refuseWrite("put", key); err != nil {
		return ObjectInfo{}, err
	}
	if body == nil {
		body = bytes.NewReader(nil)
	}
	if err := c.checkCondition(ctx, key, opt); err != nil {
		return ObjectInfo{}, err
	}
	op := c.startOp(ctx)
	defer op.done()
	out, err := c.s3.PutObject(op.ctx, &s3.PutObjectInput{
		Bucket:        &c.bucket,
		Key:           c.key(key),
		Body:          &progressReadSeeker{ReadSeeker: body, op: op},
		ContentLength: aws.Int64(size),
		IfMatch:       opt.ifMatch(),
		IfNoneMatch:   opt.ifNoneMatch(),
		Metadata:      opt.Metadata,
		ContentType:   opt.contentType(),
	})
	if err != nil {
		return ObjectInfo{}, c.fail(op, "put", key, err)
	}
	c.stats.bytesWritten.Add(uint64(size))
	return ObjectInfo{
		Key:         key,
		Size:        size,
		ETag:        unquote(out.ETag),
		VersionID:   aws.ToString(out.VersionId),
		Metadata:    opt.Metadata,
		ContentType: opt.ContentType,
	}, nil
}

// copySource is the x-amz-copy-source value for key (relative) at version.
func (c *Client) copySource(key, version string) *string {
	segs := strings.Split(c.prefix+key, "/")
	for i, s := range segs {
		// QueryEscape escapes '+' (which some stores would read as a space)
		// and writes a space as '+', which we turn into %20.
		segs[i] = strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
	}
	src := c.bucket + "/" + strings.Join(segs, "/")
	if version != "" {
		src += "?versionId=" + url.QueryEscape(version)
	}
	return aws.String(src)
}

// Copy copies srcKey (at srcVersion, or the current version) to dstKey on
// the store's side. If opt.Metadata is non-nil the copy gets opt.Metadata
// and opt.ContentType instead of the source's; dstKey may equal srcKey to
// change only the metadata. The returned ObjectInfo has Size -1 (CopyObject
// does not report it). CopyObject is limited to 5 GiB; use PutParts with
// copy parts beyond.
//
// opt's conditions apply to the destination. Some stores (versitygw v1.8.0)
// ignore destination conditions on CopyObject; for a metadata update in
// place (dstKey == srcKey, no srcVersion) the If-Match condition is therefore
// also sent as a copy-source condition, which every store checks.
func (c *Client) Copy(ctx context.Context, dstKey, srcKey, srcVersion string, opt PutOptions) (ObjectInfo, error) {
	if err := c.refuseWrite("copy to", dstKey); err != nil {
		return ObjectInfo{}, err
	}
	in := &s3.CopyObjectInput{
		Bucket:      &c.bucket,
		Key:         c.key(dstKey),
		CopySource:  c.copySource(srcKey, srcVersion),
		IfMatch:     opt.ifMatch(),
		IfNoneMatch: opt.ifNoneMatch(),
	}
	if opt.Metadata != nil {
		in.MetadataDirective = types.MetadataDirectiveReplace
		in.Metadata = opt.Metadata
		in.ContentType = opt.contentType()
	}
	if dstKey == srcKey && srcVersion == "" && opt.IfMatch != "" {
		in.CopySourceIfMatch = opt.ifMatch()
	}
	if opt.SourceETag != "" {
		in.CopySourceIfMatch = matchETag(opt.SourceETag)
	}
	if err := c.checkCondition(ctx, dstKey, opt); err != nil {
		return ObjectInfo{}, err
	}
	op := c.startOp(ctx)
	defer op.done()
	out, err := c.s3.CopyObject(op.ctx, in)
	if err != nil {
		err = c.fail(op, "copy "+srcKey+" to", dstKey, err)
		if opt.SourceETag != "" && errors.Is(err, ErrPrecondition) && c.headCondition(ctx, dstKey, opt) == nil {
			// The destination's condition holds: the copy source's failed.
			return ObjectInfo{}, fmt.Errorf("bucket: copy %s (version %s, etag %s) to %s: %w", srcKey, srcVersion, opt.SourceETag, dstKey, ErrSourceChanged)
		}
		return ObjectInfo{}, err
	}
	info := ObjectInfo{
		Key:         dstKey,
		Size:        -1,
		VersionID:   aws.ToString(out.VersionId),
		Metadata:    opt.Metadata,
		ContentType: opt.ContentType,
	}
	if r := out.CopyObjectResult; r != nil {
		info.ETag = unquote(r.ETag)
		info.LastModified = aws.ToTime(r.LastModified)
	}
	if err := c.confirmWrite(ctx, dstKey, opt, info, dstKey == srcKey && srcVersion == ""); err != nil {
		return ObjectInfo{}, err
	}
	return info, nil
}

// DeleteCurrent deletes the object at key, which the caller saw as cur (a
// HEAD of its current version), without ever hiding a newer version: a
// write that lands between the caller's look and the delete. kept reports
// such a write; the caller then treats the key as changed in the bucket.
//
// Where the store honours conditional deletes (AWS S3, versitygw; see
// ProbeConditionalWrites), the delete is sent with If-Match: cur's ETag,
// and the store refuses it for a key whose bytes changed: no delete
// marker is written at all. Elsewhere it adds a delete marker as Delete
// does. Either way, on a versioned bucket, it then looks under its marker,
// and if the newest version there is not cur but one written after it (on
// a store without conditional deletes, or with cur's very bytes, the same
// ETag), it removes its own marker again, so that version is current as it
// was; other readers may see the key missing for those few milliseconds,
// and the store reports a delete. Without version ids (an unversioned
// bucket) such a write cannot be told apart or brought back, and
// DeleteCurrent is Delete, conditional where the store allows.
func (c *Client) DeleteCurrent(ctx context.Context, key string, cur ObjectInfo) (kept bool, err error) {
	if err := c.refuseWrite("delete", key); err != nil {
		return false, err
	}
	op := c.startOp(ctx)
	defer op.done()
	in := &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key)}
	if c.conditionalDeletes.Load() {
		in.IfMatch = matchETag(cur.ETag)
	}
	out, err := c.s3.DeleteObject(op.ctx, in)
	if err != nil {
		err = c.fail(op, "delete", key, err)
		switch {
		case errors.Is(err, ErrPrecondition):
			return true, nil // changed since cur: refused, nothing written
		case errors.Is(err, ErrNotFound):
			return false, nil
		}
		return false, err
	}
	marker := aws.ToString(out.VersionId)
	if !aws.ToBool(out.DeleteMarker) || marker == "" || marker == "null" || cur.VersionID == "" || cur.VersionID == "null" {
		return false, nil // no marker of its own to take back, or no versions to tell apart
	}
	// Versions of one key are listed newest first; delete markers come in
	// their own list, so the first version of key is the newest object.
	list, err := c.s3.ListObjectVersions(op.ctx, &s3.ListObjectVersionsInput{
		Bucket: &c.bucket, Prefix: c.key(key), MaxKeys: aws.Int32(50), EncodingType: types.EncodingTypeUrl,
	})
	if err != nil {
		return false, c.fail(op, "list versions of", key, err)
	}
	dec := keyDecoder(list.EncodingType)
	for _, v := range list.Versions {
		if c.rel(dec(v.Key)) != key {
			continue
		}
		id := aws.ToString(v.VersionId)
		if id == cur.VersionID || aws.ToTime(v.LastModified).Before(cur.LastModified) {
			return false, nil
		}
		_, err := c.s3.DeleteObject(op.ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key), VersionId: &marker})
		if err != nil {
			return false, c.fail(op, "remove the delete marker of", key, err)
		}
		return true, nil
	}
	return false, nil
}

// Delete removes the object at key: on a versioned bucket it adds a delete
// marker and keeps the versions. Deleting a missing key is not an error.
func (c *Client) Delete(ctx context.Context, key string) error {
	if err := c.refuseWrite("delete", key); err != nil {
		return err
	}
	op := c.startOp(ctx)
	defer op.done()
	_, err := c.deleteObject(op, key)
	return err
}

// deleteObject deletes key (adds a delete marker on a versioned bucket). A
// missing key is no error: it returns nil, nil.
func (c *Client) deleteObject(op *opTimer, key string) (*s3.DeleteObjectOutput, error) {
	out, err := c.s3.DeleteObject(op.ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key)})
	if err != nil {
		err = c.fail(op, "delete", key, err)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	return out, nil
}
