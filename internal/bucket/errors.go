package bucket

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The sentinel errors operations wrap; test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrPrecondition = errors.New("precondition failed")
	ErrUnavailable  = errors.New("store unavailable")
	ErrNotVersioned = errors.New("bucket versioning is not enabled")
	ErrReadOnly     = errors.New("the file system is read-only")
	// ErrInterleaved is the error of a conditional write the store
	// acknowledged while another write of the key landed next to it (see
	// confirmWrite). It is an ErrPrecondition: the condition did not hold
	// for the write as the store ordered it.
	// ErrSourceChanged is the error of a Copy from a version whose
	// ETag (PutOptions.SourceETag) the store found different from the
	// object it copied, while the destination's condition held: the
	// store would have copied another version's bytes (see SourceETag).
	// It is not an ErrPrecondition of the destination: a later Copy of
	// the same version may succeed.
	ErrSourceChanged = errors.New("the store's copy source was not the version named")
	ErrInterleaved   = fmt.Errorf("another write of the key landed next to this conditional one: %w", ErrPrecondition)
)

// LandedError is the error of a conditional write that landed but that a
// later write of the key, which the store acknowledged beside it, is
// current over (see confirmWrite). Ours is the version the write made: a
// noncurrent version of the key now, which stays. What the later write
// did (a new version, or a delete marker) it did to ours. It wraps
// ErrInterleaved.
type LandedError struct {
	Ours ObjectInfo
	err  error
}

func (e *LandedError) Error() string { return e.err.Error() }
func (e *LandedError) Unwrap() error { return e.err }

// refuseWrite fails with ErrReadOnly when the client is read-only (see
// Config.ReadOnly).
func (c *Client) refuseWrite(verb, key string) error {
	if c.readOnly {
		return fmt.Errorf("bucket: %s %s: %w", verb, key, ErrReadOnly)
	}
	return nil
}

// kindOfCode maps an S3 error code to the sentinel it is an instance of.
func kindOfCode(code string) error {
	switch code {
	case "NoSuchKey", "NotFound", "NoSuchVersion":
		return ErrNotFound
	case "PreconditionFailed", "ConditionalRequestConflict":
		return ErrPrecondition
	case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
		"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests":
		return ErrUnavailable
	}
	return nil
}

// classify returns the sentinel that err is an instance of, or nil.
func classify(err error) error {
	var apiErr smithy.APIError
	code := ""
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
		if kind := kindOfCode(code); kind != nil {
			return kind
		}
	}
	var withResp interface{ HTTPResponse() *smithyhttp.Response }
	if errors.As(err, &withResp) && withResp.HTTPResponse() != nil {
		resp := withResp.HTTPResponse()
		switch status := resp.StatusCode; {
		case status == http.StatusNotFound && code != "NoSuchBucket":
			// HEAD responses have no body, hence no code: a bare 404.
			return ErrNotFound
		case status == http.StatusPreconditionFailed:
			return ErrPrecondition
		case status == http.StatusMethodNotAllowed && resp.Header.Get("x-amz-delete-marker") == "true":
			// The version asked for is a delete marker: no data there.
			return ErrNotFound
		case status == http.StatusTooManyRequests || status >= 500:
			return ErrUnavailable
		}
	}
	if (retry.RetryableConnectionError{}).IsErrorRetryable(err) == aws.TrueTernary {
		return ErrUnavailable
	}
	return nil
}

// fail wraps err from operation verb on key with the operation, the object
// and the sentinel it is an instance of.
func (c *Client) fail(op *opTimer, verb, key string, err error) error {
	where := c.String() + key
	if op.parent.Err() != nil && !op.expired.Load() {
		// The caller gave up; that is not the store's fault.
		return fmt.Errorf("bucket: %s %s: %w", verb, where, err)
	}
	kind := classify(err)
	if kind == nil && op.expired.Load() {
		kind = ErrUnavailable
		err = fmt.Errorf("no progress within %v: %w", c.opTimeout, err)
	}
	if kind == nil {
		return fmt.Errorf("bucket: %s %s: %w", verb, where, err)
	}
	return fmt.Errorf("bucket: %s %s: %w: %w", verb, where, kind, err)
}

// opTimer bounds one logical operation: its context is cancelled once no
// progress was reported for the client's OpTimeout.
type opTimer struct {
	ctx      context.Context // the operation's context; use for every request
	parent   context.Context
	cancel   context.CancelFunc
	window   time.Duration
	timer    *time.Timer
	last     atomic.Int64 // UnixNano of the last progress
	expired  atomic.Bool  // the bound ran out (as opposed to the caller cancelling)
	finished atomic.Bool
}

func (c *Client) startOp(parent context.Context) *opTimer {
	ctx, cancel := context.WithCancel(parent)
	o := &opTimer{ctx: ctx, parent: parent, cancel: cancel, window: c.opTimeout}
	o.last.Store(time.Now().UnixNano())
	o.timer = time.AfterFunc(o.window, o.check)
	return o
}

// check runs when the timer fires: it expires the operation, or re-arms the
// timer if there was progress since it was set.
func (o *opTimer) check() {
	if o.finished.Load() {
		return
	}
	idle := time.Since(time.Unix(0, o.last.Load()))
	if idle < o.window {
		o.timer.Reset(o.window - idle)
		return
	}
	o.expired.Store(true)
	o.cancel()
}

// progress restarts the bound. Safe for concurrent use.
func (o *opTimer) progress() { o.last.Store(time.Now().UnixNano()) }

// done ends the operation and releases its context.
func (o *opTimer) done() {
	o.finished.Store(true)
	o.timer.Stop()
	o.cancel()
}
