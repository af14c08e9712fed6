package s3local

import (
	"context"
	"sync"

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
}

// ListObjectsV2 drops the prefixes without a current object, in buckets
// that list like AWS.
func (b *awsListing) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input) (s3response.ListObjectsV2Result, error) {
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

// ListObjects is ListObjectsV2 for the first version of the call.
func (b *awsListing) ListObjects(ctx context.Context, in *s3.ListObjectsInput) (s3response.ListObjectsResult, error) {
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
