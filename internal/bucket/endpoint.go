package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// firstContactNotice is how long the first contact with the store
// (CheckVersioning) may go without an answer before the client says that
// it is still waiting. An attempt that fails says so at once.
const firstContactNotice = 2 * time.Second

// endpointSource names where the endpoint the SDK resolved came from, in
// the words a user would look for: the flag, the environment variable, or
// the AWS config file.
func endpointSource(cfg Config) string {
	switch {
	case cfg.Endpoint != "":
		return "--endpoint"
	case os.Getenv("AWS_ENDPOINT_URL_S3") != "":
		return "AWS_ENDPOINT_URL_S3"
	case os.Getenv("AWS_ENDPOINT_URL") != "":
		return "AWS_ENDPOINT_URL"
	}
	return "endpoint_url (AWS config)"
}

// checkEndpoint refuses an endpoint that is not an http:// or https:// URL
// with a host, in one line. An endpoint without a scheme is not given one:
// the user may mean either, and plain http where https was meant would send
// the credentials' signatures and the data in the clear.
func checkEndpoint(endpoint, source string) error {
	if !strings.Contains(endpoint, "://") {
		return fmt.Errorf("%s %q has no scheme: write http://%s or https://%s", source, endpoint, endpoint, endpoint)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("%s %q is not a URL (write it like https://minio.example:9000): %w", source, endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s %q: the scheme must be http:// or https://", source, endpoint)
	}
	if u.Host == "" {
		return fmt.Errorf("%s %q has no host: write it like https://minio.example:9000", source, endpoint)
	}
	return nil
}

// firstContact watches the first operation against the store and says,
// once, that the store does not answer while the operation is still being
// retried: after an attempt that failed for want of the store, or after
// firstContactNotice without an answer. Without it a store that is away
// means OpTimeout of silence before the error.
type firstContact struct {
	c     *Client
	once  sync.Once
	timer *time.Timer
}

func (c *Client) watchFirstContact() *firstContact {
	f := &firstContact{c: c}
	f.timer = time.AfterFunc(firstContactNotice, func() {
		f.say(fmt.Sprintf("no answer from the store at %s within %v; still waiting, for up to %v in all",
			c.where(), firstContactNotice, c.opTimeout))
	})
	return f
}

// stop ends the watch; no notice comes after it returns (one already
// being written may still finish).
func (f *firstContact) stop() {
	f.timer.Stop()
	f.once.Do(func() {})
}

func (f *firstContact) say(msg string) {
	f.once.Do(func() { f.c.log.Warn(msg) })
}

// attempts adds a step after the retry loop, so that it sees every
// attempt's error: one that says the store is unavailable brings the
// notice at once.
func (f *firstContact) attempts(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("bucketfsFirstContact",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
			middleware.FinalizeOutput, middleware.Metadata, error,
		) {
			out, md, err := next.HandleFinalize(ctx, in)
			if err != nil && ctx.Err() == nil && classify(err) == ErrUnavailable {
				f.say(fmt.Sprintf("cannot reach the store at %s yet (%v); retrying for up to %v in all",
					f.c.where(), attemptCause(err), f.c.opTimeout))
			}
			return out, md, err
		}), middleware.After)
}

// attemptCause is what an attempt's error says of the store in a few
// words: the network error under it (e.g. "dial tcp 127.0.0.1:9000:
// connect: connection refused"), or the HTTP status it answered, rather
// than the SDK's whole text.
func attemptCause(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return opErr
	}
	var withResp interface{ HTTPResponse() *smithyhttp.Response }
	if errors.As(err, &withResp) && withResp.HTTPResponse() != nil {
		return fmt.Errorf("it answered HTTP %s", withResp.HTTPResponse().Status)
	}
	return err
}
