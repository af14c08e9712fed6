package sync

import (
	"context"
	"log/slog"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// Multipart uploads cut short by a crash.
//
// A multipart upload stores its parts in the bucket as they are sent, and
// only CompleteMultipartUpload or AbortMultipartUpload ever removes them.
// PutParts aborts on every failure it sees, but a crash (kill -9, power
// loss) sees nothing: the upload stays, invisible to listings, its parts
// stored and billed forever. Other tools may be uploading into the same
// bucket, so an upload may only be aborted if bucketfs knows it started it.
//
// So the exporter journals its uploads in the metadata store (meta.Upload):
// the record of an upload is made durable after CreateMultipartUpload and
// before the first part is sent (bucket.PutOptions.OnUploadStart), and
// deleted, without a sync, once the upload is completed or aborted
// (OnUploadEnd). At the next start, before the exporter runs, every upload
// still recorded is one a crash cut short, and AbortOrphanedUploads aborts
// it. A record whose upload did end (the deletion was not durable yet)
// names an id the store no longer knows, which AbortUpload takes as done.
//
// A crash between CreateMultipartUpload and the journal's sync would leave
// an upload with no record, so the key is recorded, durably, before the
// upload is created (meta.BeginUploadOf), and the next start aborts the
// uploads in progress of a key recorded so that hold no part: ours cannot
// hold one, since its first part waits for the record of its id.

// journalUploads returns opt with hooks that keep the journal of uploads in
// flight in step with the multipart upload PutParts makes of key. An upload
// whose record cannot be made durable is aborted before its first part.
func (e *Exporter) journalUploads(key string, opt bucket.PutOptions) bucket.PutOptions {
	opt.OnUploadStart = func(ctx context.Context, id string) error {
		return e.meta.BeginUpload(ctx, id, key)
	}
	opt.OnUploadEnd = func(ctx context.Context, id string) {
		if err := e.meta.EndUpload(ctx, id); err != nil {
			e.log.Warn("forget an ended multipart upload; the next start aborts it again, harmlessly",
				"key", key, "upload", id, "err", err)
		}
	}
	return opt
}

// AbortOrphanedUploads aborts every multipart upload the journal records
// and deletes its record. Call it at start, before the exporter runs: every
// recorded upload is then one a crash cut short. It returns how many it
// aborted (or found gone already) and logs the count. An upload it fails to
// abort, and a record it fails to delete, stay in the journal for the next
// start; the failure is logged and the start goes on.
func AbortOrphanedUploads(ctx context.Context, m *meta.Store, b *bucket.Client, log *slog.Logger) int {
	ups, err := m.Uploads(ctx)
	if err != nil {
		log.Warn("cannot read the journal of multipart uploads; uploads a crash cut short stay in the bucket until the next start",
			"err", err)
		return 0
	}
	aborted, failed := 0, 0
	for _, u := range ups {
		if err := b.AbortUpload(ctx, u.Key, u.ID); err != nil {
			failed++
			log.Warn("abort a multipart upload a crash cut short; trying again at the next start",
				"key", u.Key, "upload", u.ID, "err", err)
			continue
		}
		if err := m.EndUpload(ctx, u.ID); err != nil {
			log.Warn("forget an aborted multipart upload", "key", u.Key, "upload", u.ID, "err", err)
		}
		aborted++
	}
	keys, err := m.UploadsOf(ctx)
	if err != nil {
		log.Warn("cannot read the journal of multipart uploads", "err", err)
	}
	for _, key := range keys {
		// An upload of this key was about to be created, and maybe was,
		// when the process stopped. Ours holds no part (its first part is
		// sent only once its id is recorded): an upload of the key without
		// parts is ours, or holds nothing; one with parts is another
		// tool's and stays.
		ids, err := b.UploadsOf(ctx, key)
		for _, id := range ids {
			has, perr := b.HasParts(ctx, key, id)
			switch {
			case perr != nil:
				err = perr
			case has:
			default:
				if aerr := b.AbortUpload(ctx, key, id); aerr != nil {
					err = aerr
				} else {
					aborted++
				}
			}
		}
		if err != nil {
			failed++
			log.Warn("abort the multipart uploads of a key a crash cut short; trying again at the next start", "key", key, "err", err)
			continue
		}
		if err := m.EndUploadOf(ctx, key); err != nil {
			log.Warn("forget an aborted multipart upload", "key", key, "err", err)
		}
	}
	if len(ups) > 0 || len(keys) > 0 {
		log.Info("aborted multipart uploads a crash cut short", "aborted", aborted, "failed", failed)
	}
	return aborted
}
