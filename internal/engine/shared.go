package engine

import (
	"context"
	"time"

	"bucketfs/internal/meta"
)

// Several servers on one store (Config.Shared): each one follows the
// namespace's change log (meta/changes.go) and tells its front ends what
// the others changed, so that what their clients cache (the FUSE kernel's
// names, attributes and pages) is dropped within about followInterval of
// the change instead of when it times out. The namespace itself is never
// cached by a server: every operation reads the shared store.
//
// Staleness bound, stated for users in the README: a name or attribute a
// FUSE client of another server cached is dropped within followInterval
// plus the notification's send, and in any case expires after the
// attribute and entry timeouts (1 s); NFS clients revalidate by their own
// rules (close-to-open: a GETATTR at every open) against the shared store.
const followInterval = 200 * time.Millisecond

// trimInterval is how often the change log's old records are deleted.
const trimInterval = time.Minute

// followChanges passes other servers' changes to the front ends until ctx
// ends.
func (e *Engine) followChanges(ctx context.Context) {
	e.Meta.FollowChanges(ctx, followInterval, func(c meta.Changes) {
		if c.All {
			// Fell behind the log's retention (a pause of minutes): drop
			// every cached inode; names expire by their timeouts.
			e.log.Warn("this server fell behind the shared change log: dropping what its clients cache")
			e.FS.ChangedAllElsewhere()
		}
		for _, en := range c.Entries {
			e.FS.ChangedElsewhere(en.Parent, en.Name, 0)
		}
		for _, ino := range c.Inodes {
			e.FS.ChangedElsewhere(0, "", ino)
		}
	}, func(err error) { e.log.Warn("follow the shared change log", "err", err) })
}

// trimChanges deletes change records past their retention now and then.
// Any server may do it (the deletes of two servers are the same); each
// does, so no leader is needed for it.
func (e *Engine) trimChanges(ctx context.Context) {
	every(ctx, trimInterval, func() {
		if err := e.Meta.TrimChanges(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("trim the shared change log", "err", err)
		}
	})
}

// trimFences deletes the tombstones of the observation fences that no
// import can need any more (meta.Store.TrimFences) now and then. Every
// server does it, shared or not: each one's deletes are safe on their own.
func (e *Engine) trimFences(ctx context.Context) {
	every(ctx, trimInterval, func() {
		if err := e.Meta.TrimFences(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("trim the observation fences", "err", err)
		}
	})
}
