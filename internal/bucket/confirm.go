package bucket

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// isAWS tells whether endpoint ("" for the SDK's own resolution) is AWS S3,
// the one store whose conditional writes are trusted by default. AWS
// documents them as atomic against every other write of the key (a
// conditional write that races another answers 412, or 409 to be
// retried). MinIO acknowledged a PUT with If-None-Match: * that raced an
// unconditional PUT of the same new key, both PUTs answered 2xx (69 times
// in 200), and other stores (versitygw, Ceph, gateways) make no promise
// either; confirming costs one listing per conditional write, and a write
// replaced unseen costs data, so every other store is confirmed unless
// Config.TrustConditionalWrites says otherwise.
func isAWS(endpoint string) bool {
	if endpoint == "" {
		return true
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	return strings.HasSuffix(host, ".amazonaws.com") || strings.HasSuffix(host, ".amazonaws.com.cn")
}

// ConfirmsWrites tells whether conditional writes are confirmed from the
// key's version list (the store is not trusted with them; see
// Config.TrustConditionalWrites).
func (c *Client) ConfirmsWrites() bool { return c.confirmWrites }

// confirmWrite does not take a conditional write's 2xx alone as proof on
// a store that is not trusted with conditions (see isAWS). ours is the
// version a write under opt's condition has just made at key. The store
// must list ours as the key's current version, and the object version it
// lists right below ours must be the one the condition named:
// opt.IfMatchVersion (by ETag opt.IfMatch where it is not given) for
// If-Match, with no delete marker between the two; for If-None-Match,
// none, or one a delete marker hid before ours. Anything else means
// another write of the key landed next to ours and the store acknowledged
// both. The write then fails with an error wrapping ErrInterleaved, as if
// the store had refused it (412), and the other write wins, wherever it
// landed:
//
//   - after ours: it is current already, and ours stays a noncurrent
//     version. The store's order of two writes it acknowledged at once is
//     not trusted either, and taking the other write's side loses
//     nothing. The error is a *LandedError naming ours: the caller records
//     ours as written, so that what the other write did to it (a delete)
//     reads as the bucket's change, not as a key never written.
//   - before ours, that is between the condition and the write (the
//     store's mistake): ours hides it, so ours is deleted by its version
//     id and the other write is current again. That loses nothing: ours
//     was made from bytes the caller still holds (the exporter keeps the
//     file-side version, durable in its metadata, until the conflict has
//     moved it to lost+found).
//
// A store may also rewrite the version If-Match named in place, rather
// than make a new one (versitygw does for a copy onto itself that changes
// only metadata): ours is then that version, with nothing of ours to take
// back, and it must be current. Where the caller did not give the version
// id (opt.IfMatchVersion), a write that may rewrite in place (mayRewrite)
// and returns the named ETag is taken as such a rewrite.
//
// A version below ours with the ETag If-Match named but not the version
// id is still taken as the named one where opt.Ours says it is the
// writer's own upload (one a crash left unrecorded); one of anybody
// else's is another write.
//
// Versions are told apart by version id, never by ETag alone. Object
// versions are taken in the order the store lists them; delete markers
// come in a list of their own (the SDK splits them off, and versitygw
// lists them apart anyway) and are placed among versions by time, which
// some stores give versions only to the second (versitygw): a marker
// within the same second as the version next to it cannot be placed and
// counts as not between (see markerBetween). On a bucket without versions
// nothing can be told apart, and nothing is checked.
func (c *Client) confirmWrite(ctx context.Context, key string, opt PutOptions, ours ObjectInfo, mayRewrite bool) error {
	if !c.confirmWrites || opt.IfMatch == "" && !opt.IfNoneMatch || !hasVersion(ours.VersionID) {
		return nil
	}
	where := c.String() + key
	objects, markers, err := c.history(ctx, key, ours.VersionID)
	if err != nil {
		return fmt.Errorf("bucket: confirm the conditional write of %s: %w", where, err)
	}
	i := slices.IndexFunc(objects, func(v Version) bool { return v.VersionID == ours.VersionID })
	versioned := func(v Version) bool { return hasVersion(v.VersionID) }
	if i < 0 && !slices.ContainsFunc(objects, versioned) && !slices.ContainsFunc(markers, versioned) {
		// The bucket keeps no versions, whatever id the store answered
		// the write with (gofakes3 makes one up).
		return nil
	}
	if i < 0 {
		return fmt.Errorf("bucket: confirm the conditional write of %s: its version %s is gone: %w", where, ours.VersionID, ErrInterleaved)
	}
	if !objects[i].IsLatest {
		// Something newer is current: nothing of ours to undo, and ours
		// stays below it.
		return &LandedError{Ours: ours,
			err: fmt.Errorf("bucket: conditional write of %s: a write landed after ours (%s): %w", where, ours.VersionID, ErrInterleaved)}
	}
	if opt.IfMatch != "" && (ours.VersionID == opt.IfMatchVersion ||
		mayRewrite && opt.IfMatchVersion == "" && ours.ETag == unquote(aws.String(opt.IfMatch))) {
		return nil // rewritten in place, and current
	}
	var prev *Version // the object version below ours
	if i+1 < len(objects) {
		prev = &objects[i+1]
	}
	var follows bool
	if opt.IfMatch != "" {
		follows = prev != nil && prev.ETag == unquote(aws.String(opt.IfMatch)) &&
			(opt.IfMatchVersion == "" || prev.VersionID == opt.IfMatchVersion) &&
			!slices.ContainsFunc(markers, func(m Version) bool { return markerBetween(m, *prev, objects[i]) })
		if !follows && prev != nil && opt.Ours != nil && prev.ETag == unquote(aws.String(opt.IfMatch)) &&
			!slices.ContainsFunc(markers, func(m Version) bool { return markerBetween(m, *prev, objects[i]) }) {
			// A version with the named bytes but another id: an upload
			// of the writer's own that a crash left unrecorded follows
			// the named one, no other writer's.
			info, err := c.Head(ctx, key, prev.VersionID)
			follows = err == nil && opt.Ours(info.Metadata)
		}
	} else {
		follows = prev == nil || slices.ContainsFunc(markers, func(m Version) bool { return !markerBefore(m, *prev) })
	}
	if follows {
		return nil
	}
	landed := "the version below it is not the one its condition named"
	if prev != nil {
		landed = "version " + prev.VersionID + " (or a delete) landed before ours (" + ours.VersionID + ")"
	}
	op := c.startOp(ctx)
	defer op.done()
	_, derr := c.s3.DeleteObject(op.ctx, &s3.DeleteObjectInput{Bucket: &c.bucket, Key: c.key(key), VersionId: &ours.VersionID})
	if derr != nil {
		return fmt.Errorf("bucket: conditional write of %s: %s, %w, and ours hides it: %w",
			where, landed, ErrInterleaved, c.fail(op, "delete our version of", key, derr))
	}
	return fmt.Errorf("bucket: conditional write of %s: %s; ours is deleted again: %w", where, landed, ErrInterleaved)
}

// lastMoment is the latest moment v may have been written at: its
// LastModified, or the end of that second where the store gives whole
// seconds only.
func lastMoment(v Version) time.Time {
	if v.LastModified.Nanosecond() == 0 {
		return v.LastModified.Add(time.Second - time.Nanosecond)
	}
	return v.LastModified
}

// markerBefore tells whether delete marker m surely came before version v.
func markerBefore(m, v Version) bool { return m.LastModified.Before(v.LastModified) }

// markerBetween tells whether delete marker m surely came after version
// older and before version newer.
func markerBetween(m, older, newer Version) bool {
	return m.LastModified.After(lastMoment(older)) && m.LastModified.Before(newer.LastModified)
}

// hasVersion tells whether id names a version that no other write shares
// (not "" or "null", as on a bucket without versions).
func hasVersion(id string) bool { return id != "" && id != "null" }

// history returns the object versions of exactly key, newest first as
// the store lists them, at least down to the one below version (all of
// them if version is not there), and the delete markers of key that
// came with them.
func (c *Client) history(ctx context.Context, key, version string) (objects, markers []Version, err error) {
	op := c.startOp(ctx)
	defer op.done()
	full := *c.key(key)
	in := &s3.ListObjectVersionsInput{Bucket: &c.bucket, Prefix: &full, EncodingType: types.EncodingTypeUrl}
	for {
		out, err := c.s3.ListObjectVersions(op.ctx, in)
		if err != nil {
			return nil, nil, c.fail(op, "list versions of", key, err)
		}
		op.progress()
		// Keys are listed in order, and every key the prefix also matches
		// sorts after key itself.
		dec := keyDecoder(out.EncodingType)
		past := false
		for _, v := range out.Versions {
			if dec(v.Key) != full {
				past = true
				continue
			}
			objects = append(objects, objectVersion(key, v))
		}
		for _, m := range out.DeleteMarkers {
			if dec(m.Key) == full {
				markers = append(markers, deleteMarker(key, m))
			}
		}
		i := slices.IndexFunc(objects, func(v Version) bool { return v.VersionID == version })
		if i >= 0 && i+1 < len(objects) || past || !aws.ToBool(out.IsTruncated) {
			return objects, markers, nil
		}
		in.KeyMarker, in.VersionIdMarker = aws.String(dec(out.NextKeyMarker)), out.NextVersionIdMarker
	}
}
