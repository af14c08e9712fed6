package bucket

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
)

// Stats are a client's counters since it was made. Request counts are HTTP
// requests sent, retries included.
type Stats struct {
	Get       uint64 `json:"get"`       // GetObject
	Put       uint64 `json:"put"`       // PutObject
	List      uint64 `json:"list"`      // ListObjectsV2, ListObjectVersions
	Head      uint64 `json:"head"`      // HeadObject
	Copy      uint64 `json:"copy"`      // CopyObject
	Delete    uint64 `json:"delete"`    // DeleteObject
	Multipart uint64 `json:"multipart"` // Create/Complete/AbortMultipartUpload, UploadPart, UploadPartCopy
	Other     uint64 `json:"other"`     // anything else (GetBucketVersioning ...)

	// LocalHead counts the HEADs the embedded store answered in process
	// (Config.LocalHead): no request was sent for them.
	LocalHead uint64 `json:"local_head"`

	Retries      uint64 `json:"retries"`       // requests that were retries of a failed attempt
	BytesRead    uint64 `json:"bytes_read"`    // object data received (Get bodies, ReadAt)
	BytesWritten uint64 `json:"bytes_written"` // object data sent (Put, uploaded parts), counted on success
}

// UnmarshalJSON reads Stats as they are written now, and as bucketfs wrote
// them before they had snake_case names (Go's field names): a status.json
// an earlier version left in a state directory, or the /status of an
// earlier version still running. The one-word names match either way
// (encoding/json matches names regardless of case); BytesRead and
// BytesWritten are read here.
func (s *Stats) UnmarshalJSON(b []byte) error {
	type current Stats // without this method
	var v struct {
		current
		OldBytesRead    *uint64 `json:"BytesRead"`
		OldBytesWritten *uint64 `json:"BytesWritten"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Stats(v.current)
	if v.OldBytesRead != nil {
		s.BytesRead = *v.OldBytesRead
	}
	if v.OldBytesWritten != nil {
		s.BytesWritten = *v.OldBytesWritten
	}
	return nil
}

// Requests is the total number of requests sent.
func (s Stats) Requests() uint64 {
	return s.Get + s.Put + s.List + s.Head + s.Copy + s.Delete + s.Multipart + s.Other
}

type requestKind int

const (
	kindGet requestKind = iota
	kindPut
	kindList
	kindHead
	kindCopy
	kindDelete
	kindMultipart
	kindOther
	numKinds
)

// counters are the atomic counters behind Stats.
type counters struct {
	requests     [numKinds]atomic.Uint64
	localHeads   atomic.Uint64
	retries      atomic.Uint64
	bytesRead    atomic.Uint64
	bytesWritten atomic.Uint64
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	r := &c.stats.requests
	return Stats{
		Get:          r[kindGet].Load(),
		Put:          r[kindPut].Load(),
		List:         r[kindList].Load(),
		Head:         r[kindHead].Load(),
		Copy:         r[kindCopy].Load(),
		Delete:       r[kindDelete].Load(),
		Multipart:    r[kindMultipart].Load(),
		Other:        r[kindOther].Load(),
		LocalHead:    c.stats.localHeads.Load(),
		Retries:      c.stats.retries.Load(),
		BytesRead:    c.stats.bytesRead.Load(),
		BytesWritten: c.stats.bytesWritten.Load(),
	}
}

func kindOfOperation(name string) requestKind {
	switch name {
	case "GetObject":
		return kindGet
	case "PutObject":
		return kindPut
	case "ListObjectsV2", "ListObjectVersions":
		return kindList
	case "HeadObject":
		return kindHead
	case "CopyObject":
		return kindCopy
	case "DeleteObject":
		return kindDelete
	case "CreateMultipartUpload", "UploadPart", "UploadPartCopy",
		"CompleteMultipartUpload", "AbortMultipartUpload":
		return kindMultipart
	}
	return kindOther
}

// countRequests adds a step to an SDK operation stack that counts every
// attempt, by operation: it sits at the end of the finalize step, after the
// retry loop, so it runs once per HTTP request sent.
func (s *counters) countRequests(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("bucketfsCountRequests",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
			middleware.FinalizeOutput, middleware.Metadata, error,
		) {
			s.requests[kindOfOperation(middleware.GetOperationName(ctx))].Add(1)
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// countingRetryer is the SDK's retryer with a count of the retries it
// grants: RetryDelay is asked once before every retry.
type countingRetryer struct {
	aws.RetryerV2
	stats *counters
}

func (r *countingRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	r.stats.retries.Add(1)
	return r.RetryerV2.RetryDelay(attempt, err)
}
