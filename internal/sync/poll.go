package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"syscall"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// activeDirs remembers which directories were used lately, so that only
// those are re-listed.
type activeDirs struct {
	mu   gosync.Mutex
	used map[meta.Ino]time.Time
}

// maxActiveDirs bounds the directories the poller watches; past it the
// least recently used are dropped.
const maxActiveDirs = 10000

// Used notes that dir was just looked into. It is cheap enough to call on
// every lookup and readdir.
func (im *Importer) Used(dir meta.Ino) {
	a := &im.active
	now := time.Now()
	a.mu.Lock()
	if a.used == nil {
		a.used = map[meta.Ino]time.Time{}
	}
	if len(a.used) >= maxActiveDirs {
		var oldest meta.Ino
		var t time.Time
		for ino, u := range a.used {
			if oldest == 0 || u.Before(t) {
				oldest, t = ino, u
			}
		}
		delete(a.used, oldest)
	}
	a.used[dir] = now
	a.mu.Unlock()
}

// recent returns the directories used since t, forgetting older ones.
func (a *activeDirs) recent(t time.Time) []meta.Ino {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []meta.Ino
	for ino, u := range a.used {
		if u.Before(t) {
			delete(a.used, ino)
			continue
		}
		out = append(out, ino)
	}
	return out
}

// ActiveDirs returns the directories used since t (by Used), with when
// each was last used, for a server without the sync lease to hand to the
// one that polls.
func (im *Importer) ActiveDirs(t time.Time) map[meta.Ino]time.Time {
	a := &im.active
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[meta.Ino]time.Time{}
	for ino, u := range a.used {
		if !u.Before(t) {
			out[ino] = u
		}
	}
	return out
}

// PollStats are the poller's counters.
type PollStats struct {
	Rounds  int64
	LastRun time.Time
}

// RunPoller re-lists every directory used within the last activeFor,
// every interval, and revalidates what differs from the namespace, until
// ctx is done. It is how changes reach a mount when the store sends no
// events.
func (im *Importer) RunPoller(ctx context.Context, interval, activeFor time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, dir := range im.active.recent(time.Now().Add(-activeFor)) {
			if err := im.PollDir(ctx, dir); err != nil && ctx.Err() == nil {
				im.log.Warn("poll directory", "ino", dir, "err", err)
			}
		}
		im.pollMu.Lock()
		im.polls.Rounds++
		im.polls.LastRun = time.Now()
		im.pollMu.Unlock()
	}
}

// maxEvidence bounds the keys read under a prefix to tell whether a
// current object under it is not the file side's own. When all those read
// are, the prefix counts as the file side's: an object the bucket put
// under a removed directory that sorts after this many of the file side's
// pending deletes is imported once the exporter has carried them out.
const maxEvidence = 1000

// dirEvidence returns keys of current objects under the prefix p, where a
// listing made at o shows a directory (meta.Imported.Evidence): none if no
// current object lies under p (stores such as MinIO and versitygw list a
// prefix that holds only old versions and delete markers). first, if not
// "", is such a key the caller has already. One key is enough unless it is
// the file side's own, a removal or move the exporter has not carried out
// or carried out since o (meta.Store.OursSince); then up to maxEvidence
// are read, and the import adds the directory only if one of them is not.
// Importing a prefix of our own pending deletes would bring back a
// directory the file side removed.
func (im *Importer) dirEvidence(ctx context.Context, o meta.Observation, p, first string) ([]string, error) {
	more := true
	keys := []string{first}
	if first == "" {
		var err error
		if keys, more, err = im.bucket.KeysUnder(ctx, p, 1); err != nil || len(keys) == 0 {
			return nil, err
		}
	}
	if ours, err := im.meta.OursSince(ctx, o, keys[0]); err != nil || !ours || !more {
		return keys, err
	}
	keys, _, err := im.bucket.KeysUnder(ctx, p, maxEvidence)
	return keys, err
}

// mayBeGone reports whether the directory in, whose prefix a listing
// still shows, may be one to drop: it came from the bucket alone, was
// listed, and holds nothing. Only then is the bucket asked whether a
// current object is left under it (stores such as MinIO and versitygw list
// a prefix that holds only old versions and delete markers); asking for
// every subdirectory at every poll would cost a request each.
func (im *Importer) mayBeGone(ctx context.Context, in *meta.Inode) bool {
	if !in.FromBucketOnly() || !in.Has(meta.Listed) {
		return false
	}
	ents, err := im.meta.ReadDir(ctx, in.Ino, "", 1)
	return err == nil && len(ents) == 0
}

// dropImportedDir removes the directory e of dir, which the listing of
// dir (at prefix) no longer shows (no current object under its prefix), if
// it came from the bucket alone and is empty (see meta.DropImportedDir).
func (im *Importer) dropImportedDir(ctx context.Context, dir meta.Ino, prefix string, e meta.Entry) error {
	in, err := im.meta.Get(ctx, e.Ino)
	if err != nil || !in.FromBucketOnly() {
		return nil
	}
	err = im.meta.DropImportedDir(ctx, dir, e.Name, &in)
	switch {
	case err == nil:
		im.logImport(ctx, "removed", prefix+e.Name+"/", "", 0, e.Ino)
		im.changed(Change{Parent: dir, Name: e.Name, Ino: e.Ino})
		return nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOENT):
		return nil
	}
	return err
}

// PollDir lists one directory's prefix and revalidates every key whose
// object differs from what the namespace recorded: new, changed or gone.
// A new directory it adds rests on the listing, which may be older than a
// file-side removal of the name: meta refuses it then (see meta's
// fences.go), and the next poll looks again.
func (im *Importer) PollDir(ctx context.Context, dir meta.Ino) error {
	d, err := im.meta.Get(ctx, dir)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if !d.IsDir() || d.Has(meta.NoExport) {
		return nil
	}
	if !d.Has(meta.Listed) {
		// Used only by name so far (lookups import one child at a time):
		// list it now, in the background, so later polls can compare.
		return im.EnsureListed(ctx, &d)
	}
	// A directory made on the file side and not exported yet is polled at
	// its path: objects put under it in the bucket belong in it all the
	// same.
	prefix, ok, err := im.prefixOf(ctx, &d)
	if err != nil || !ok {
		return err
	}
	seen := map[string]bool{}
	token := ""
	for {
		obs, err := im.meta.Observe(ctx, dir) // before the page's LIST
		if err != nil {
			return fmt.Errorf("poll %q: %w", prefix, err)
		}
		page, err := im.bucket.List(ctx, prefix, token, 1000)
		if err != nil {
			return fmt.Errorf("poll %q: %w", prefix, err)
		}
		for _, o := range page.Objects {
			name := o.Key[len(prefix):]
			if name == "" {
				continue
			}
			seen[name] = true
			if im.differs(ctx, dir, name, o) {
				if err := im.Revalidate(ctx, o.Key); err != nil {
					return err
				}
			}
		}
		for _, p := range page.Prefixes {
			name := p[len(prefix) : len(p)-1]
			if validSegment(name) != "" {
				seen[name] = true
				continue
			}
			in, err := im.meta.Lookup(ctx, dir, name)
			if err == nil && in.IsDir() && !im.mayBeGone(ctx, &in) {
				seen[name] = true
				continue
			}
			// A prefix with only deleted objects under it is no directory,
			// and does not stand for a name the file side has; nor is one
			// whose objects are removals not carried out yet (meta checks
			// the evidence when it adds the directory).
			evidence, kerr := im.dirEvidence(ctx, obs, p, "")
			if kerr != nil {
				return fmt.Errorf("poll %q: %w", p, kerr)
			}
			if len(evidence) == 0 {
				continue
			}
			seen[name] = true
			if errors.Is(err, syscall.ENOENT) {
				it := prefixDir(name, time.Now().UnixNano())
				it.Evidence = evidence
				in, err := im.meta.ImportObject(ctx, obs, dir, nil, name, nil, it)
				switch {
				case err == nil:
					im.logImport(ctx, "new", p, "", 0, in.Ino)
				case !errors.Is(err, syscall.EAGAIN):
					return err
				}
				im.changed(Change{Parent: dir, Name: name})
			}
		}
		if !page.Truncated || page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	// Names the bucket had and no longer lists.
	after := ""
	for {
		ents, err := im.meta.ReadDir(ctx, dir, after, 1000)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if seen[e.Name] {
				continue
			}
			if e.Type == syscall.S_IFDIR {
				if err := im.dropImportedDir(ctx, dir, prefix, e); err != nil {
					return err
				}
				continue
			}
			in, err := im.meta.Get(ctx, e.Ino)
			if err != nil {
				continue
			}
			for _, k := range in.Keys {
				if k.Key == prefix+e.Name {
					if err := im.Revalidate(ctx, k.Key); err != nil {
						return err
					}
				}
			}
		}
		if len(ents) < 1000 {
			im.fresh.add(dir)
			return nil
		}
		after = ents[len(ents)-1].Name
	}
}

// differs reports whether the listed object o is not what the namespace
// holds at dir/name.
func (im *Importer) differs(ctx context.Context, dir meta.Ino, name string, o bucket.ObjectInfo) bool {
	in, err := im.meta.Lookup(ctx, dir, name)
	if err != nil {
		return true
	}
	for _, k := range in.Keys {
		if k.Key == o.Key {
			return k.ETag != o.ETag
		}
	}
	return true
}

// PollStats returns the poller's counters.
func (im *Importer) PollStats() PollStats {
	im.pollMu.Lock()
	defer im.pollMu.Unlock()
	return im.polls
}
