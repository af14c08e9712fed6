package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// Change tells a front end which cached names and data an import made
// stale.
type Change struct {
	Parent meta.Ino // directory whose entry Name changed
	Name   string
	Ino    meta.Ino // inode whose data or attributes changed (0 if none)
}

// Revalidate brings the file side in line with the bucket for one key:
// it asks the bucket for the key's current version and compares it with
// what the file side last saw. A new or changed object is imported (its
// cached tier data dropped); a deleted one is removed. Where the file side
// has unexported changes to the same name, the bucket wins and the file
// side's version moves to lost+found.
//
// Revalidate is what S3 event notifications, directory polling and
// revalidation on open all come down to.
func (im *Importer) Revalidate(ctx context.Context, key string) error {
	if err := im.revalidateKey(ctx, key, nil); !errors.Is(err, errAbsent) {
		return err
	}
	return nil
}

// keyRecorder returns the inode that records the object key (0: none).
func (im *Importer) keyRecorder(ctx context.Context, key string) (meta.Ino, error) {
	o, ok, err := im.meta.KeyOwner(ctx, key)
	if err != nil || !ok {
		return 0, err
	}
	return o.Ino, nil
}

// errAbsent says the bucket has no object at the key and the file side
// has no name for it: nothing to do.
var errAbsent = errors.New("no object and no file")

// revalidateKey is Revalidate, with errAbsent. It tries again (a few
// times) when it raced with another change to the same names, taking a
// token of pace, if any, before each new try.
func (im *Importer) revalidateKey(ctx context.Context, key string, pace *rate.Limiter) error {
	if strings.HasSuffix(key, "/") || key == "" {
		return nil // directory markers: directories follow their contents
	}
	for _, seg := range strings.Split(key, "/") {
		if why := validSegment(seg); why != "" {
			im.reject(key, why)
			return nil
		}
	}
	for attempt := 0; ; attempt++ {
		err := im.revalidate(ctx, key)
		if !errors.Is(err, syscall.EAGAIN) || attempt == 5 {
			return err
		}
		if pace != nil {
			if err := pace.Wait(ctx); err != nil {
				return err
			}
		}
	}
}

func (im *Importer) revalidate(ctx context.Context, key string) error {
	// The observation of the key's directory is read with the first look
	// at the namespace, before the HEAD.
	res, obs, err := im.meta.ResolveObserved(ctx, key)
	if errors.Is(err, syscall.ENOTDIR) {
		im.reject(key, "a file stands where the key needs a directory")
		return nil
	}
	if err != nil {
		return err
	}
	if res.Parent == 0 {
		// Not listed yet: the first listing will see the bucket as it is,
		// unless it is under way and listed past this key already; then
		// wait for it and look again.
		if im.waitListing(ctx, res.Unlisted) {
			return syscall.EAGAIN
		}
		// Remember the key for when the directory is listed, in case a
		// listing that has not shown up yet already read past it.
		im.deferKey(res.Unlisted, key)
		if again, err := im.meta.Resolve(ctx, key); err == nil && again.Parent != 0 {
			return syscall.EAGAIN // a listing finished meanwhile
		}
		return nil
	}
	// The key may still belong to an inode that lost the name on the file
	// side (an unlink or rename the exporter has not carried out yet).
	owner, owned, err := im.meta.KeyOwner(ctx, key)
	if err != nil {
		return err
	}
	var inos []meta.Ino
	if res.Child != nil {
		inos = append(inos, res.Child.Ino)
	}
	if owned && (res.Child == nil || owner.Ino != res.Child.Ino) {
		inos = append(inos, owner.Ino)
	} else {
		owned = false
	}
	// Lock in inode order, then re-read: the exporter may just have
	// recorded an upload of this very key.
	slices.Sort(inos)
	for _, ino := range inos {
		unlock := im.locks.Lock(ino)
		defer unlock()
	}
	res2, err := im.meta.Resolve(ctx, key)
	if err != nil || res2.Parent == 0 {
		return err
	}
	if (res.Child == nil) != (res2.Child == nil) || res.Child != nil && res.Child.Ino != res2.Child.Ino {
		return syscall.EAGAIN
	}
	res = res2
	if owned {
		if owner, owned, err = im.meta.KeyOwner(ctx, key); err != nil {
			return err
		}
	}
	// The record of the key as read now, to tell later whether an export
	// recorded the key meanwhile.
	recorder, err := im.keyRecorder(ctx, key)
	if err != nil {
		return err
	}
	head, err := im.bucket.Head(ctx, key, "")
	exists := err == nil
	if err != nil && !errors.Is(err, bucket.ErrNotFound) {
		return fmt.Errorf("revalidate %q: %w", key, err)
	}
	im.validated(res.Child)
	if exists {
		// An object of ours that an export intent names: the exporter
		// wrote it and a crash came before the record; it adopts or
		// deletes it (meta.AddIntents). It is no bucket-side change.
		if ino, ok := im.ourInode(head.Metadata, key); ok {
			if pending, err := im.meta.HasIntent(ctx, ino, key); err != nil {
				return err
			} else if pending {
				return nil
			}
			// No intent: either none was made (a copy or restore in the
			// bucket), or the export that made it recorded the key and
			// dropped it since the record was read above. The writing
			// inode is not locked here, so look at the record again: an
			// export recorded meanwhile makes this look stale. (Found by
			// the crash checker, embedded store, seed 815491625: our own
			// upload was imported as a new file, which then kept the
			// uploading inode from deleting it after a rename.)
			if now, err := im.keyRecorder(ctx, key); err != nil {
				return err
			} else if now != recorder {
				return syscall.EAGAIN
			}
		}
	}
	if !owned {
		// The exporter may have recorded an upload of this key for another
		// inode since the first look (dropping its intent as it did): look
		// again, holding that inode's lock.
		if o, ok, err := im.meta.KeyOwner(ctx, key); err != nil {
			return err
		} else if ok && (res.Child == nil || o.Ino != res.Child.Ino) {
			return syscall.EAGAIN
		}
	}
	if owned && (res.Child == nil || owner.Ino != res.Child.Ino) {
		if o, _ := recordedAt(&owner, key); !exists || sameVersion(o, head) {
			return nil // the exporter will carry out the file-side change
		}
		// Changed in the bucket: the bucket's version keeps the name; the
		// file side's unlink or rename must not delete it.
		if err := im.meta.DropKey(ctx, owner.Ino, key); err != nil {
			return err
		}
	}
	child := res.Child
	if child == nil {
		if !exists {
			return errAbsent
		}
		it, err := im.fileItem(ctx, res.Name, head, true)
		if err != nil {
			return im.rejectOr(key, err)
		}
		in, err := im.meta.ImportObject(ctx, obs, res.Parent, res.Missing, res.Name, nil, it)
		if err != nil {
			return err
		}
		im.imported.Add(1)
		im.logImport(ctx, "new", key, head.VersionID, head.Size, in.Ino)
		im.changed(Change{Parent: res.Parent, Name: firstOr(res.Missing, res.Name), Ino: in.Ino})
		return nil
	}
	known, _ := recordedAt(child, key)
	if exists && known.Key != "" && sameVersion(known, head) {
		return nil // what the file side saw (or just exported)
	}
	if who, gen, ok := originOf(head.Metadata, key); exists && ok && who == inodeOrigin(im.meta.Fsid(), child.Ino) && gen > child.ExportedGen {
		// This inode's own export of a generation newer than any it
		// recorded: not recorded yet, the exporter adopts it. An older
		// generation under our tag is a copy of an earlier version (a
		// restore in the bucket): a bucket-side change like any other.
		return nil
	}
	if exists && child.IsDir() {
		im.reject(key, "object beside a directory of the same name")
		return nil
	}
	if !exists && known.Key == "" {
		return nil // a file-side name the bucket never had
	}
	if exists && known.Key == "" {
		// The file side holds this name but never exported this inode
		// under it (a rename onto it, or a new name, not exported yet),
		// clean or not. An object an earlier holder of the name exported
		// is its record (owned, above) or its unfinished export (an
		// intent, above); the exporter replaces those. Anything else was
		// made in the bucket while the file side made the name, an object
		// with our tag too (a restore of an older version, or a copy,
		// carries it): both sides changed it, and the bucket wins.
		return im.conflict(ctx, obs, key, res, head, exists)
	}
	if child.Dirty() {
		return im.conflict(ctx, obs, key, res, head, exists)
	}
	if !exists {
		if err := im.meta.ForgetKey(ctx, res.Parent, res.Name, child, key, true); err != nil {
			return err
		}
		im.logImport(ctx, "removed", key, "", 0, child.Ino)
		im.changed(Change{Parent: res.Parent, Name: res.Name, Ino: child.Ino})
		return nil
	}
	it, err := im.fileItem(ctx, res.Name, head, true)
	if err != nil {
		return im.rejectOr(key, err)
	}
	in, err := im.importOver(ctx, obs, res, child, it)
	if err != nil {
		return err
	}
	im.imported.Add(1)
	im.logImport(ctx, "updated", key, head.VersionID, head.Size, in.Ino)
	im.changed(Change{Parent: res.Parent, Name: res.Name, Ino: in.Ino})
	return nil
}

// importOver makes the file child at res show the object it. A regular
// file's cached bytes belong to the old version and are dropped in the same
// transaction; a write racing the import either lands before it (the import
// then fails with EAGAIN, as the file changed, and the next look finds a
// conflict) or after it, on the new version.
func (im *Importer) importOver(ctx context.Context, obs meta.Observation, res meta.Resolved, child *meta.Inode, it meta.Imported) (meta.Inode, error) {
	return im.meta.ImportObject(ctx, obs, res.Parent, nil, res.Name, child, it)
}

// conflict resolves a name changed on both sides: the file side's version
// moves to lost+found, and the bucket's version (if any) takes the name.
func (im *Importer) conflict(ctx context.Context, obs meta.Observation, key string, res meta.Resolved, head bucket.ObjectInfo, exists bool) error {
	child := res.Child
	lfName := meta.LostFoundEntryName(key, time.Now())
	if err := im.meta.MoveToLostFound(ctx, res.Parent, res.Name, child, lfName, key); err != nil {
		return err
	}
	im.conflicts.Add(1)
	bucketSide := "deleted"
	if exists {
		bucketSide = fmt.Sprintf("etag %s version %s", head.ETag, head.VersionID)
	}
	im.log.Warn("conflict: the bucket wins; the file-side version is kept in lost+found",
		"key", key, "bucket", bucketSide, "file_side_ino", child.Ino, "lost_found_name", lfName)
	im.changed(Change{Parent: res.Parent, Name: res.Name, Ino: child.Ino})
	if !exists {
		return nil
	}
	it, err := im.fileItem(ctx, res.Name, head, true)
	if err != nil {
		return im.rejectOr(key, err)
	}
	in, err := im.meta.ImportObject(ctx, obs, res.Parent, nil, res.Name, nil, it)
	if err != nil {
		return err
	}
	im.imported.Add(1)
	im.logImport(ctx, "new", key, head.VersionID, head.Size, in.Ino)
	im.changed(Change{Parent: res.Parent, Name: res.Name, Ino: in.Ino})
	return nil
}

// KeptInLostFound records a conflict the bucket won while the file side
// held the file open: the bucket deleted it, the file side then changed it
// through its handle, and meta linked it into lost+found as name (see
// meta.Options.OnKeptInLostFound).
func (im *Importer) KeptInLostFound(ino meta.Ino, name string) {
	im.conflicts.Add(1)
	im.log.Warn("conflict: the bucket deleted a file that the file side then changed through an open handle; the bucket wins, the file-side version is kept in lost+found",
		"file_side_ino", ino, "lost_found_name", name)
	im.changed(Change{Parent: im.meta.LostFound(), Name: name, Ino: ino})
}

// waitListing waits for a listing of dir that is under way and reports
// whether there was one.
func (im *Importer) waitListing(ctx context.Context, dir meta.Ino) bool {
	im.mu.Lock()
	l, ok := im.inflight[dir]
	im.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-l.done:
	case <-ctx.Done():
	}
	return true
}

// maxDeferred bounds the keys remembered per unlisted directory.
const maxDeferred = 10000

// deferKey remembers key for when dir's listing completes.
func (im *Importer) deferKey(dir meta.Ino, key string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if len(im.deferred[dir]) < maxDeferred {
		im.deferred[dir] = append(im.deferred[dir], key)
	}
}

// rejectOr counts a key that cannot be a file and returns nil, or returns
// any other error.
func (im *Importer) rejectOr(key string, err error) error {
	if errors.Is(err, errNotAFile) {
		im.reject(key, err.Error())
		return nil
	}
	return err
}

// recordedAt returns the object in records for key, if it has exported
// under key.
func recordedAt(in *meta.Inode, key string) (meta.Object, bool) {
	for _, k := range in.Keys {
		if k.Key == key {
			return k, true
		}
	}
	return meta.Object{}, false
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func (im *Importer) changed(c Change) {
	if im.onChange != nil {
		im.onChange(c)
	}
}

// RevalidateIfStale revalidates the keys of a clean regular file unless it
// was compared with the bucket within ttl. Where the store's events are
// complete (EventsComplete) they decide instead: a file none of whose keys
// has a notification waiting is not compared (nothing changed since it
// last was), and one with a notification waiting is compared now,
// whatever ttl says (see eventsSay). Dirty files are the file side's to
// export; their conflicts surface at export.
func (im *Importer) RevalidateIfStale(ctx context.Context, in *meta.Inode, ttl time.Duration) error {
	if !in.IsRegular() || in.Dirty() || len(in.Keys) == 0 {
		return nil
	}
	switch im.eventsSay(in) {
	case eventsCover:
		return nil
	case eventsUnknown:
		if im.ValidatedSince(in.Ino, time.Now().Add(-ttl)) {
			return nil
		}
	}
	if at := im.unavailableAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < ttl {
		// The store was away moments ago: do not make every open wait
		// out the operation timeout again.
		return fmt.Errorf("revalidate inode %d: %w (still in the last %v)", in.Ino, bucket.ErrUnavailable, ttl)
	}
	for _, k := range in.Keys {
		if err := im.Revalidate(ctx, k.Key); err != nil {
			if errors.Is(err, bucket.ErrUnavailable) {
				if im.unavailableAt.Swap(time.Now().UnixNano()) == 0 {
					im.log.Warn("the store is unavailable: files open with what the file side has, unrevalidated", "err", err)
				}
			}
			return err
		}
	}
	if im.unavailableAt.Load() != 0 {
		im.unavailableAt.Store(0) // back
	}
	im.validated(in)
	return nil
}

// EventsComplete says that from now on every change of the bucket reaches
// this importer as a notification (Notify, NotifyCreated) before the
// request that made it is answered: the embedded store's events, which
// its request handler hands over in process, from the engine's Start on.
func (im *Importer) EventsComplete() { im.completeSince.Store(time.Now().UnixNano()) }

// What the events say of a file's keys (eventsSay).
const (
	eventsUnknown = iota // not complete, or not since the file's last comparison
	eventsCover          // unchanged since the file was last compared
	eventsWaiting        // a notification of a key waits to be applied
)

// eventsSay tells whether in's keys are known unchanged since in was last
// compared with the bucket, without asking the bucket: that comparison
// was made after the events became complete (EventsComplete), no
// notification was dropped since (past the queue's bound), and none of
// in's keys has one queued, being applied, or waiting for this process's
// upload (eventsWaiting if one has). Invariant: a change of a key after
// its comparison came with a notification, queued before the writer's
// request was answered, which stays waiting until it is applied (and the
// apply compares again). So an open after a bucket-side write was
// answered finds either the write applied or its notification waiting,
// and compares then.
func (im *Importer) eventsSay(in *meta.Inode) int {
	since := im.completeSince.Load()
	if since == 0 {
		return eventsUnknown
	}
	for _, k := range in.Keys {
		if im.events.waiting(k.Key) || im.echoes.waiting(k.Key) {
			return eventsWaiting
		}
	}
	im.validMu.Lock()
	at, ok := im.validAt[in.Ino]
	im.validMu.Unlock()
	if !ok || at.UnixNano() < since || at.UnixNano() <= im.events.lastDrop.Load() {
		return eventsUnknown
	}
	return eventsCover
}

// sameVersion tells whether the object the bucket shows is the version the
// file side recorded: by version id where the bucket gives them, by ETag
// only where it does not (an unversioned bucket).
func sameVersion(known meta.Object, head bucket.ObjectInfo) bool {
	if versioned(known.VersionID) && versioned(head.VersionID) {
		return known.VersionID == head.VersionID
	}
	return known.ETag == head.ETag
}

// versioned tells whether id identifies one version: not "" (a store
// without versions) nor "null" (what a bucket with versioning suspended
// gives every write, the same for all).
func versioned(id string) bool { return id != "" && id != "null" }
