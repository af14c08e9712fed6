// Package bucket is the S3 side of bucketfs: one versioned bucket (optionally
// under a key prefix) seen as a set of objects that can be read by version,
// written conditionally and listed a directory at a time. It is the only
// package that imports aws-sdk-go-v2.
//
// # Model
//
// A Client is bound to one bucket and one prefix. Every key it takes or
// returns is relative to that prefix, and every listed "directory" prefix ends
// in "/". An object is identified for reading by its key and, optionally, a
// version id: callers that opened a file at one version keep reading that
// version (ReadAt, Get and Head with a version id) even after it is
// overwritten. Writes are conditional on what the caller last saw: If-Match
// an ETag, or If-None-Match "*" to create only; a failed condition is
// ErrPrecondition and never a partial write. Nothing is ever exported
// partially: PutParts aborts its multipart upload on any failure. A crash
// in the middle of one cannot abort it, and its parts would stay stored
// (and billed) forever: PutOptions.OnUploadStart hands the caller the
// upload id before any part is sent, to record it durably, and
// AbortUpload aborts a recorded upload at the next start.
//
// Only AWS S3 is trusted to evaluate a condition atomically with the
// write. On any other store (unless Config.TrustConditionalWrites) each
// conditional write is confirmed from the key's version list afterwards:
// another version next to the new one makes it ErrInterleaved, and the
// other version is left current (confirm.go). Deletes of what the caller
// saw (DeleteCurrent) are conditional on its ETag where the store honours
// that, and never hide a newer version either way.
//
// # Errors
//
// Errors name the operation and the object (s3://bucket/prefix/key) and wrap
// one of the sentinels where one applies, next to the SDK's own error:
//
//   - ErrNotFound: no such key, or no such version of it.
//   - ErrPrecondition: an If-Match/If-None-Match condition failed (412), or a
//     concurrent conditional write won (409 ConditionalRequestConflict).
//   - ErrUnavailable: the store did not answer usefully within the
//     operation's bound (Config.OpTimeout), or after Config.MaxAttempts
//     attempts when a cap is set: connection errors, 5xx, SlowDown and
//     other throttling.
//   - ErrInterleaved: a conditional write the store acknowledged had
//     another write of the key land next to it (an ErrPrecondition too;
//     see below).
//   - ErrNotVersioned: CheckVersioning found versioning off or suspended.
//
// A cancelled caller context yields an error wrapping context.Canceled (or
// the caller's own deadline), never ErrUnavailable.
//
// # Retries and the operation bound
//
// Each request is retried by the SDK's standard retryer, with full-jitter
// exponential backoff (100 ms base, 5 s cap), as often as the operation
// bound allows (Config.MaxAttempts can cap it), with no client-wide retry
// quota so that one busy period cannot make
// later, unrelated operations fail without trying. Over all attempts, one
// logical operation may go at most Config.OpTimeout without progress; for
// operations that move object data (Put, PutParts, and reading a Get body)
// the bound restarts whenever data moves, so a large transfer that is
// progressing is never cut off, while a store that is down makes every
// operation fail with ErrUnavailable after about OpTimeout.
//
// # Concurrency
//
// A Client is safe for concurrent use. It keeps a pool of up to 64 idle
// connections to the endpoint, since many ranged GETs run in parallel. Stats
// are atomic counters.
package bucket
