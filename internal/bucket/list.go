package bucket

import (
	"context"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Listing is one page of a directory listing.
type Listing struct {
	Objects   []ObjectInfo // Key, Size, ETag, LastModified; no VersionID or Metadata
	Prefixes  []string     // "subdirectories", relative to the client's prefix, ending in "/"
	NextToken string       // pass to List for the next page
	Truncated bool         // more pages follow
}

// List returns one page (at most max entries, the store's limit of 1000 if
// max <= 0) of the objects and common prefixes directly under dirPrefix,
// which is relative to the client's prefix and is "" or ends in "/". Pass
// the previous page's NextToken to continue, "" to start.
func (c *Client) List(ctx context.Context, dirPrefix, token string, max int) (Listing, error) {
	op := c.startOp(ctx)
	defer op.done()
	in := &s3.ListObjectsV2Input{
		Bucket:            &c.bucket,
		Prefix:            c.key(dirPrefix),
		Delimiter:         aws.String("/"),
		ContinuationToken: optional(token),
		EncodingType:      types.EncodingTypeUrl,
	}
	if max > 0 {
		in.MaxKeys = aws.Int32(int32(min(max, 1000)))
	}
	out, err := c.s3.ListObjectsV2(op.ctx, in)
	if err != nil {
		return Listing{}, c.fail(op, "list", dirPrefix, err)
	}
	dec := keyDecoder(out.EncodingType)
	l := Listing{
		Objects:   make([]ObjectInfo, 0, len(out.Contents)),
		Prefixes:  c.prefixes(out.CommonPrefixes, dec),
		NextToken: aws.ToString(out.NextContinuationToken),
		Truncated: aws.ToBool(out.IsTruncated),
	}
	folded := false
	for _, o := range out.Contents {
		key := c.rel(dec(o.Key))
		rest, under := strings.CutPrefix(key, dirPrefix)
		if i := strings.IndexByte(rest, '/'); under && i >= 0 {
			// Below the delimiter: a store that lists a directory marker
			// "d/" as an object of its parent (gofakes3 does) breaks the
			// delimiter's contract; it stands for the prefix, as AWS S3
			// would have listed it.
			l.Prefixes = append(l.Prefixes, dirPrefix+rest[:i+1])
			folded = true
			continue
		}
		l.Objects = append(l.Objects, ObjectInfo{
			Key:          key,
			Size:         aws.ToInt64(o.Size),
			ETag:         unquote(o.ETag),
			LastModified: aws.ToTime(o.LastModified),
		})
	}
	if folded {
		slices.Sort(l.Prefixes)
		l.Prefixes = slices.Compact(l.Prefixes)
	}
	return l, nil
}

// keyDecoder returns the function that turns a key (or prefix) of a listing
// into the key itself. Listings ask for EncodingType=url: a key may hold
// characters XML 1.0 cannot carry (U+0001 is a valid key on AWS and MinIO),
// and without the encoding such a key made the whole page unreadable. A
// store that ignores the request says so by not echoing the encoding
// type, and its keys are taken as they are.
func keyDecoder(enc types.EncodingType) func(*string) string {
	if enc != types.EncodingTypeUrl {
		return aws.ToString
	}
	return func(s *string) string {
		k, err := url.QueryUnescape(aws.ToString(s))
		if err != nil {
			return aws.ToString(s) // not encoded after all
		}
		return k
	}
}

func (c *Client) prefixes(cps []types.CommonPrefix, dec func(*string) string) []string {
	out := make([]string, 0, len(cps))
	for _, p := range cps {
		out = append(out, c.rel(dec(p.Prefix)))
	}
	return out
}

// Version is one entry of a version listing.
type Version struct {
	ObjectInfo      // Key, Size, ETag, VersionID, LastModified, IsDeleteMarker
	IsLatest   bool // the key's current version (or delete marker)
}

// VersionListing is one page of a version listing.
type VersionListing struct {
	Versions []Version // by key, newest version of each key first
	Prefixes []string  // as in Listing
	// NextKeyMarker (relative to the client's prefix) and
	// NextVersionMarker continue the listing when Truncated.
	NextKeyMarker, NextVersionMarker string
	Truncated                        bool
}

// ListVersions returns one page of all versions and delete markers directly
// under dirPrefix (relative, "" or ending in "/"), at most max entries (the
// store's limit of 1000 if max <= 0). Pass the previous page's markers to
// continue, "" to start.
func (c *Client) ListVersions(ctx context.Context, dirPrefix, keyMarker, versionMarker string, max int) (VersionListing, error) {
	op := c.startOp(ctx)
	defer op.done()
	in := &s3.ListObjectVersionsInput{
		Bucket:          &c.bucket,
		Prefix:          c.key(dirPrefix),
		Delimiter:       aws.String("/"),
		VersionIdMarker: optional(versionMarker),
		EncodingType:    types.EncodingTypeUrl,
	}
	if keyMarker != "" {
		in.KeyMarker = c.key(keyMarker)
	}
	if max > 0 {
		in.MaxKeys = aws.Int32(int32(min(max, 1000)))
	}
	out, err := c.s3.ListObjectVersions(op.ctx, in)
	if err != nil {
		return VersionListing{}, c.fail(op, "list versions in", dirPrefix, err)
	}
	dec := keyDecoder(out.EncodingType)
	l := VersionListing{
		Prefixes:          c.prefixes(out.CommonPrefixes, dec),
		NextVersionMarker: aws.ToString(out.NextVersionIdMarker),
		Truncated:         aws.ToBool(out.IsTruncated),
	}
	if out.NextKeyMarker != nil {
		l.NextKeyMarker = c.rel(dec(out.NextKeyMarker))
	}
	for _, v := range out.Versions {
		l.Versions = append(l.Versions, objectVersion(c.rel(dec(v.Key)), v))
	}
	for _, m := range out.DeleteMarkers {
		l.Versions = append(l.Versions, deleteMarker(c.rel(dec(m.Key)), m))
	}
	sortVersions(l.Versions)
	return l, nil
}

// objectVersion is the Version of v, whose key relative to the prefix is key.
func objectVersion(key string, v types.ObjectVersion) Version {
	return Version{
		ObjectInfo: ObjectInfo{
			Key:          key,
			Size:         aws.ToInt64(v.Size),
			ETag:         unquote(v.ETag),
			VersionID:    aws.ToString(v.VersionId),
			LastModified: aws.ToTime(v.LastModified),
		},
		IsLatest: aws.ToBool(v.IsLatest),
	}
}

// deleteMarker is the Version of m, whose key relative to the prefix is key.
func deleteMarker(key string, m types.DeleteMarkerEntry) Version {
	return Version{
		ObjectInfo: ObjectInfo{
			Key:            key,
			VersionID:      aws.ToString(m.VersionId),
			LastModified:   aws.ToTime(m.LastModified),
			IsDeleteMarker: true,
		},
		IsLatest: aws.ToBool(m.IsLatest),
	}
}

// sortVersions orders versions by key, and within a key the latest first,
// then by LastModified, newest first. (The SDK returns versions and delete
// markers as two lists; S3 interleaves them in this order.)
func sortVersions(vs []Version) {
	slices.SortStableFunc(vs, func(a, b Version) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.IsLatest != b.IsLatest {
			if a.IsLatest {
				return -1
			}
			return 1
		}
		return b.LastModified.Compare(a.LastModified)
	})
}

// HasCurrentUnder tells whether any current object has a key under
// dirPrefix (relative, ending in "/"), at any depth. Some stores (MinIO,
// versitygw) list a prefix as a common prefix while it holds only
// noncurrent versions and delete markers; a listing without a delimiter
// shows current objects only, so one key of it settles whether the prefix
// is a directory the bucket really has.
func (c *Client) HasCurrentUnder(ctx context.Context, dirPrefix string) (bool, error) {
	keys, _, err := c.KeysUnder(ctx, dirPrefix, 1)
	return len(keys) > 0, err
}

// KeysUnder returns the keys of up to max current objects under dirPrefix,
// at any depth (a listing without a delimiter, see HasCurrentUnder), and
// whether there are more.
func (c *Client) KeysUnder(ctx context.Context, dirPrefix string, max int) (keys []string, more bool, err error) {
	op := c.startOp(ctx)
	defer op.done()
	out, err := c.s3.ListObjectsV2(op.ctx, &s3.ListObjectsV2Input{
		Bucket: &c.bucket, Prefix: c.key(dirPrefix), MaxKeys: aws.Int32(int32(min(max, 1000))), EncodingType: types.EncodingTypeUrl,
	})
	if err != nil {
		return nil, false, c.fail(op, "list", dirPrefix, err)
	}
	dec := keyDecoder(out.EncodingType)
	for _, o := range out.Contents {
		keys = append(keys, c.rel(dec(o.Key)))
	}
	return keys, aws.ToBool(out.IsTruncated), nil
}
