package bucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/smithy-go"
)

// explain turns the error of the first request to the store (CheckVersioning)
// into one line saying what is wrong and what to do, for the problems a
// person setting bucketfs up meets: no such bucket, an unknown access key, a
// wrong secret, access denied, no credentials at all, a store that does not
// answer. The SDK's text (request and host ids, IMDS details) is left out;
// the sentinel stays wrapped. Other errors come back unchanged.
func (c *Client) explain(err error) error {
	where := c.where()
	key := "the access key in use"
	if id := c.accessKeyInUse(); id != "" {
		key = "access key " + id
	}
	var apiErr smithy.APIError
	code := ""
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("bucket %q does not exist at %s: check --bucket and --endpoint, or create it with versioning on (aws s3 mb s3://%s)",
			c.bucket, where, c.bucket)
	case code == "InvalidAccessKeyId" || code == "XAdminUserNotFound":
		return fmt.Errorf("the store at %s does not know %s: check AWS_ACCESS_KEY_ID (or the profile in use)", where, key)
	case code == "SignatureDoesNotMatch":
		return fmt.Errorf("the secret key does not belong to %s at %s: check AWS_SECRET_ACCESS_KEY (or the profile in use)", key, where)
	case code == "AccessDenied" || code == "AllAccessDisabled" || code == "Forbidden":
		need := "s3:ListBucket, s3:GetBucketVersioning, s3:GetObject, s3:GetObjectVersion, s3:PutObject and s3:DeleteObject"
		if c.readOnly {
			need = "s3:ListBucket, s3:GetBucketVersioning, s3:GetObject and s3:GetObjectVersion"
		}
		return fmt.Errorf("%s may not use bucket %q at %s (%s): it needs %s on it", key, c.bucket, where, code, need)
	case isNoCredentials(err):
		return errors.New("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials, or run where an instance or container role is available")
	case errors.Is(err, ErrUnavailable):
		return fmt.Errorf("bucket: cannot reach the store at %s: %w (check --endpoint and that the store runs)", where, ErrUnavailable)
	}
	return err
}

// where names the store: the endpoint requests go to, wherever it was
// configured, or AWS.
func (c *Client) where() string {
	if c.endpoint != "" {
		return c.endpoint
	}
	return "AWS S3"
}

// accessKeyInUse is the configured access key id, else the one the
// credential chain gave (the environment, a profile), else "". The chain's
// answer is cached from the request that failed, so asking again costs no
// request.
func (c *Client) accessKeyInUse() string {
	if c.accessKey != "" {
		return c.accessKey
	}
	creds := c.s3.Options().Credentials
	if creds == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := creds.Retrieve(ctx)
	if err != nil {
		return ""
	}
	return v.AccessKeyID
}

// isNoCredentials reports an error of the SDK's credential chain finding
// nothing (it ends with the EC2 instance metadata service, whose failure
// it reports).
func isNoCredentials(err error) bool {
	s := err.Error()
	return strings.Contains(s, "get credentials") || strings.Contains(s, "failed to refresh cached credentials") ||
		strings.Contains(s, "no EC2 IMDS role found")
}
