package bucket

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
)

// Stats are a client's counters since it was made. Request counts are HTTP
// requests sent, retries included.
type Stats struct {
	Get       uint64 // GetObject
	Put       uint64 // PutObject
	List      uint64 // ListObjectsV2, ListObjectVersions
	Head      uint64 // HeadObject
	Copy      uint64 // CopyObject
	Delete    uint64 // DeleteObject
	Multipart uint64 // Create/Complete/AbortMultipartUpload, UploadPart, UploadPartCopy
	Other     uint64 // anything else (GetBucketVersioning ...)

	Retries      uint64 // requests that were retries of a failed attempt
	BytesRead    uint64 // object data received (Get bodies, ReadAt)
	BytesWritten uint64 // object data sent (Put, uploaded parts), counted on success
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
