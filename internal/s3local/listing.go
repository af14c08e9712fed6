package s3local

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3response"
)

// awsListing lists the prefixes of chosen buckets as AWS S3 does. A
// delimited listing of AWS S3 (and Ceph) shows a prefix only while a
// current object is under it; versitygw's posix backend, like MinIO, also
// shows a prefix that holds nothing but old versions and delete markers
// (its directory is still there). Both kinds of store exist, and bucketfs
// must work on both, so a test chooses per bucket (Server.ListLikeAWS);
// every other bucket lists as versitygw does.
type awsListing struct {
	backend.Backend
	buckets sync.Map // bucket name -> struct{}
	dataDir string   // the posix backend's directory of buckets ("" in tests of the type alone)
}

// nothingUnder reports whether bucket can list no current object under
// prefix because the directory that would hold every key with that prefix
// is not one: versitygw's posix backend keeps the current object of key
// a/b/c as the file a/b/c of the bucket's directory, so every key that
// starts with "a/b/" or "a/b/x" lies under the directory a/b. Its own
// listing finds that out by reading the nearest existing directory whole
// (the 100,000 entries of a big directory: about 57 ms here, for the
// listing of one prefix that a lookup of one name makes); a stat answers
// it. Only an answer of nothing is taken from here, and only for a prefix
// whose directory part is plain (no empty, "." or ".." segment) in a
// bucket that exists; anything else goes to the backend.
func (b *awsListing) nothingUnder(bucket *string, prefix *string) bool {
	p := aws.ToString(prefix)
	i := strings.LastIndexByte(p, '/')
	if b.dataDir == "" || i <= 0 {
		return false
	}
	dir := p[:i]
	for _, seg := range strings.Split(dir, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	root := filepath.Join(b.dataDir, aws.ToString(bucket))
	if st, err := os.Stat(root); err != nil || !st.IsDir() || strings.ContainsRune(aws.ToString(bucket), '/') {
		return false // the backend says what is wrong with the bucket
	}
	st, err := os.Lstat(filepath.Join(root, filepath.FromSlash(dir)))
	switch {
	case err == nil:
		return !st.IsDir()
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return true
	}
	return false
}

// ListObjectsV2 drops the prefixes without a current object, in buckets
// that list like AWS, and answers at once a listing of a prefix under
// which nothing can lie (nothingUnder).
func (b *awsListing) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input) (s3response.ListObjectsV2Result, error) {
	if b.nothingUnder(in.Bucket, in.Prefix) {
		// The fields of an empty page, as the backend sets them.
		return s3response.ListObjectsV2Result{Name: in.Bucket, Prefix: backend.GetPtrFromString(aws.ToString(in.Prefix)),
			Delimiter: backend.GetPtrFromString(aws.ToString(in.Delimiter)), MaxKeys: aws.Int32(aws.ToInt32(in.MaxKeys)),
			KeyCount: aws.Int32(0), IsTruncated: aws.Bool(false),
			ContinuationToken: continuedFrom(in),
			StartAfter:        backend.GetPtrFromString(aws.ToString(in.StartAfter))}, nil
	}
	res, err := b.Backend.ListObjectsV2(ctx, in)
	if err != nil || !b.chosen(in.Bucket) || len(res.CommonPrefixes) == 0 {
		return res, err
	}
	if res.CommonPrefixes, err = b.live(ctx, in.Bucket, res.CommonPrefixes); err != nil {
		return res, err
	}
	res.KeyCount = aws.Int32(int32(len(res.Contents) + len(res.CommonPrefixes)))
	return res, nil
}

// continuedFrom is the ContinuationToken the backend answers a listing
// with: the later of the token and StartAfter, when a token was given.
func continuedFrom(in *s3.ListObjectsV2Input) *string {
	if in.ContinuationToken == nil {
		return nil
	}
	return backend.GetPtrFromString(max(aws.ToString(in.ContinuationToken), aws.ToString(in.StartAfter)))
}

// ListObjects is ListObjectsV2 for the first version of the call.
func (b *awsListing) ListObjects(ctx context.Context, in *s3.ListObjectsInput) (s3response.ListObjectsResult, error) {
	if b.nothingUnder(in.Bucket, in.Prefix) {
		return s3response.ListObjectsResult{Name: in.Bucket, Prefix: backend.GetPtrFromString(aws.ToString(in.Prefix)),
			Delimiter: backend.GetPtrFromString(aws.ToString(in.Delimiter)), MaxKeys: aws.Int32(aws.ToInt32(in.MaxKeys)),
			IsTruncated: aws.Bool(false), Marker: backend.GetPtrFromString(aws.ToString(in.Marker))}, nil
	}
	res, err := b.Backend.ListObjects(ctx, in)
	if err != nil || !b.chosen(in.Bucket) || len(res.CommonPrefixes) == 0 {
		return res, err
	}
	res.CommonPrefixes, err = b.live(ctx, in.Bucket, res.CommonPrefixes)
	return res, err
}

func (b *awsListing) chosen(bucket *string) bool {
	_, ok := b.buckets.Load(aws.ToString(bucket))
	return ok
}

// live keeps the prefixes under which some current object exists.
func (b *awsListing) live(ctx context.Context, bucket *string, prefixes []types.CommonPrefix) ([]types.CommonPrefix, error) {
	kept := prefixes[:0]
	for _, p := range prefixes {
		// Every field set, as versitygw's own handler sets them.
		under, err := b.Backend.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: p.Prefix,
			ContinuationToken: aws.String(""), Delimiter: aws.String(""), MaxKeys: aws.Int32(1),
			StartAfter: aws.String(""), FetchOwner: aws.Bool(false)})
		if err != nil {
			return nil, err
		}
		if len(under.Contents) > 0 {
			kept = append(kept, p)
		}
	}
	return kept, nil
}

// ListLikeAWS makes bucket's delimited listings show a prefix only while a
// current object is under it, as AWS S3 does (by default the store lists
// as versitygw and MinIO do: also a prefix that holds only old versions
// and delete markers). Tests use it to run bucketfs against both kinds of
// listing.
func (s *Server) ListLikeAWS(bucket string) {
	s.listing.buckets.Store(bucket, struct{}{})
}
