package engine

import (
	"context"
	"log/slog"
	"time"

	"bucketfs/internal/meta"
)

// SummaryInterval is how often a running file system logs, at info, one
// line of what sync did since the last one ("sync summary": exports,
// imports, conflicts, evictions, failures, bytes_up and bytes_down, over
// interval). An interval in which nothing happened logs nothing, so an
// idle mount stays quiet; the line for each single export, import,
// conflict and eviction is at debug (see package sync's logs.go and
// Engine.evict).
const SummaryInterval = time.Minute

// activity is the running totals a summary is the difference of.
type activity struct {
	exports, imports, conflicts, evictions, failures int64
	bytesUp, bytesDown                               uint64
}

// activity reads the totals now. Conflicts are the names the bucket won
// (the file side's version went to lost+found), as bucketfs_conflicts_total
// counts them; failures are failed export attempts and keys that could not
// be imported; bytes are object bytes sent to and received from the store.
func (e *Engine) activity() activity {
	ex, im, s3 := e.Exporter.Stats(), e.Importer.Stats(), e.Bucket.Stats()
	return activity{exports: ex.Exported, imports: im.Imported, conflicts: im.Conflicts,
		evictions: e.evictions.Load(), failures: ex.Failures + im.Failures,
		bytesUp: s3.BytesWritten, bytesDown: s3.BytesRead}
}

// minus is what happened between then and a.
func (a activity) minus(then activity) activity {
	return activity{a.exports - then.exports, a.imports - then.imports, a.conflicts - then.conflicts,
		a.evictions - then.evictions, a.failures - then.failures,
		a.bytesUp - then.bytesUp, a.bytesDown - then.bytesDown}
}

// summarize logs a summary every interval in which something happened,
// and one for the last, partial interval when ctx ends.
func (e *Engine) summarize(ctx context.Context, interval time.Duration) {
	last, since := e.activity(), time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		stop := false
		select {
		case <-ctx.Done():
			stop = true
		case <-t.C:
		}
		now := e.activity()
		if d := now.minus(last); d != (activity{}) {
			e.log.LogAttrs(context.Background(), slog.LevelInfo, "sync summary",
				slog.Duration("interval", time.Since(since).Round(time.Second)),
				slog.Int64("exports", d.exports), slog.Int64("imports", d.imports),
				slog.Int64("conflicts", d.conflicts), slog.Int64("evictions", d.evictions),
				slog.Int64("failures", d.failures),
				slog.Uint64("bytes_up", d.bytesUp), slog.Uint64("bytes_down", d.bytesDown))
		}
		last, since = now, time.Now()
		e.summaryRounds.Add(1)
		if stop {
			return
		}
	}
}

// logEvicted writes the debug line of one file whose tier copy eviction
// dropped: its inode, its first key, the bytes freed.
func (e *Engine) logEvicted(ctx context.Context, ino meta.Ino, freed int64) {
	if !e.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	key := ""
	if in, err := e.Meta.Get(ctx, ino); err == nil && len(in.Keys) > 0 {
		key = in.Keys[0].Key
	}
	e.log.LogAttrs(ctx, slog.LevelDebug, "tier evicted", slog.Uint64("ino", uint64(ino)),
		slog.String("key", key), slog.Int64("bytes", freed))
}
