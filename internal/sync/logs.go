package sync

import (
	"context"
	"log/slog"
	"time"

	"bucketfs/internal/meta"
)

// The debug lines of sync, one per thing done, so that "what did it upload,
// when, and why not" has an answer in the log (--log-level debug). Their
// keys are shared: key (an object key, relative to the file system's
// prefix), ino, version_id, bytes, action, reason.
//
//	export           one reconcile of an inode with the bucket: action
//	                 (uploaded, attributes, copied, moved, deleted,
//	                 unchanged), key, version_id, bytes uploaded,
//	                 since_change (how long after the inode's last
//	                 change), copied_to and deleted (its other names)
//	export skipped   nothing to do for the inode, and why (reason)
//	export deferred  left queued for later, and why (reason)
//	import           one key brought in from the bucket: action (new,
//	                 updated, removed), key, version_id, bytes, ino
//	import listing   the first listing of a directory: prefix, imported
//	                 (entries made), took
//
// A failed export and a conflict are warnings (one line each, with the key
// where there is one), so they show at the default level too.

// exportNote is what one reconcile did to the bucket, for its debug line.
type exportNote struct {
	action  string // uploaded, attributes; empty: worked out from copied and deleted
	key     string // the object written for the inode's first name
	version string
	bytes   int64    // uploaded
	copied  []string // other names written by a server-side copy
	deleted []string // names removed from the bucket
}

// logExport writes the debug line of a reconcile of in that finished.
// requeued says why the inode stays queued ("": it left the queue).
func (e *Exporter) logExport(ctx context.Context, in *meta.Inode, n *exportNote, requeued string) {
	if !e.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	action := n.action
	switch {
	case action != "":
	case len(n.copied) > 0 && len(n.deleted) > 0:
		action = "moved"
	case len(n.copied) > 0:
		action = "copied"
	case len(n.deleted) > 0:
		action = "deleted"
	default:
		action = "unchanged"
	}
	attrs := []slog.Attr{slog.String("action", action), slog.Uint64("ino", uint64(in.Ino))}
	if n.key != "" {
		attrs = append(attrs, slog.String("key", n.key))
	}
	if n.version != "" {
		attrs = append(attrs, slog.String("version_id", n.version))
	}
	if n.action == "uploaded" {
		attrs = append(attrs, slog.Int64("bytes", n.bytes))
	}
	if in.Ctime != 0 {
		attrs = append(attrs, slog.Duration("since_change", time.Since(time.Unix(0, in.Ctime)).Round(time.Millisecond)))
	}
	if len(n.copied) > 0 {
		attrs = append(attrs, slog.Any("copied_to", n.copied))
	}
	if len(n.deleted) > 0 {
		attrs = append(attrs, slog.Any("deleted", n.deleted))
	}
	if requeued != "" {
		attrs = append(attrs, slog.String("requeued", requeued))
	}
	e.log.LogAttrs(ctx, slog.LevelDebug, "export", attrs...)
}

// logImport writes the debug line of one key imported: action is new,
// updated or removed; in is the inode that shows it (or showed it).
func (im *Importer) logImport(ctx context.Context, action, key, version string, bytes int64, ino meta.Ino) {
	if !im.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("action", action), slog.String("key", key)}
	if version != "" {
		attrs = append(attrs, slog.String("version_id", version))
	}
	if action != "removed" {
		attrs = append(attrs, slog.Int64("bytes", bytes))
	}
	if ino != 0 {
		attrs = append(attrs, slog.Uint64("ino", uint64(ino)))
	}
	im.log.LogAttrs(ctx, slog.LevelDebug, "import", attrs...)
}
