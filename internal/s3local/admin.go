package s3local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// CreateBucket creates bucket if it does not exist yet and, if versioned,
// enables versioning on it (also when it already existed). It goes through
// the S3 API like any client would, so the bucket gets the same owner and ACL
// as one made with the aws CLI.
func (s *Server) CreateBucket(ctx context.Context, bucket string, versioned bool) error {
	c := s.client()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var apiErr smithy.APIError
	if err != nil && !(errors.As(err, &apiErr) && apiErr.ErrorCode() == "BucketAlreadyOwnedByYou") {
		return fmt.Errorf("s3local: create bucket %q: %w", bucket, err)
	}
	if !versioned {
		return nil
	}
	_, err = c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
		Bucket: aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{
			Status: types.BucketVersioningStatusEnabled,
		},
	})
	if err != nil {
		return fmt.Errorf("s3local: enable versioning on bucket %q: %w", bucket, err)
	}
	return nil
}

// client is an S3 client for the server's own administrative calls.
func (s *Server) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		HTTPClient:                 &http.Client{Transport: s.adminHTTP},
	})
}

// WriteEnvFile writes the settings an S3 client needs to reach the server, as
// KEY=value lines (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_REGION, BUCKETFS_BUCKET), to path with mode 0600, replacing any file
// there atomically. path must be absolute: the store has changed the process
// working directory.
func (s *Server) WriteEnvFile(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("s3local: write env file %q: path must be absolute (the store changes the working directory)", path)
	}
	var b strings.Builder
	for _, kv := range [][2]string{
		{"AWS_ENDPOINT_URL", s.Endpoint},
		{"AWS_ACCESS_KEY_ID", s.AccessKey},
		{"AWS_SECRET_ACCESS_KEY", s.SecretKey},
		{"AWS_REGION", s.Region},
		{"BUCKETFS_BUCKET", s.Bucket},
	} {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	if err := writeFileReplace(path, []byte(b.String())); err != nil {
		return fmt.Errorf("s3local: write env file %s: %w", path, err)
	}
	return nil
}
