package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// maxSymlinkTarget bounds the body read for a symlink object.
const maxSymlinkTarget = 4096

// ImporterConfig wires an Importer to the rest of the engine. Every field
// is optional.
type ImporterConfig struct {
	// Locks is shared with the exporter.
	Locks *InodeLocks
	// OnChange hears of every name or inode an import changed, so front
	// ends can drop what the kernel caches.
	OnChange func(Change)
	Logger   *slog.Logger
	// WebhookRate and WebhookBurst cap the revalidations that keys from
	// the webhook cause (0: WebhookHeadRate and WebhookHeadBurst).
	WebhookRate  rate.Limit
	WebhookBurst int
}

// Importer brings bucket-side state into the namespace: directory
// listings on first access, and later changes to single keys.
type Importer struct {
	meta     *meta.Store
	bucket   *bucket.Client
	locks    *InodeLocks
	onChange func(Change)
	log      *slog.Logger

	mu       gosync.Mutex
	inflight map[meta.Ino]*listing // one listing per directory at a time
	deferred map[meta.Ino][]string // keys changed while their directory was unlisted
	badKeys  map[string]bool       // keys already logged as unimportable

	imported  atomic.Int64
	failures  atomic.Int64
	conflicts atomic.Int64

	validMu gosync.Mutex
	validAt map[meta.Ino]time.Time // last comparison of an inode with the bucket
	// unavailableAt is when revalidation last found the store unavailable
	// (unix ns): opens do not wait for it again within the TTL.
	unavailableAt atomic.Int64

	events *notifications // keys from the embedded store's events, and late keys of listings
	echoes echoes         // this process's exports, whose events come back (echo.go)
	// completeSince is when the events became complete (EventsComplete;
	// unix ns, 0: they are not).
	completeSince atomic.Int64
	webhook       *notifications // keys from the webhook, revalidated at a capped rate
	eventLag      atomic.Int64   // ns from notification to applied, of the last key applied
	active        activeDirs
	fresh         freshDirs
	pollMu        gosync.Mutex
	polls         PollStats
}

type listing struct {
	done    chan struct{}
	err     error
	prefix  string
	started time.Time
	objects atomic.Int64 // keys listed so far
}

// ListingProgress describes a directory listing under way.
type ListingProgress struct {
	Dir      meta.Ino `json:"dir"`
	Prefix   string   `json:"prefix"`
	Keys     int64    `json:"keys_listed"`
	RunningS float64  `json:"running_seconds"`
}

// Listings reports the directory listings under way.
func (im *Importer) Listings() []ListingProgress {
	im.mu.Lock()
	defer im.mu.Unlock()
	var out []ListingProgress
	for ino, l := range im.inflight {
		out = append(out, ListingProgress{Dir: ino, Prefix: l.prefix, Keys: l.objects.Load(),
			RunningS: time.Since(l.started).Seconds()})
	}
	return out
}

// NewImporter returns an importer for the namespace m backed by b.
func NewImporter(m *meta.Store, b *bucket.Client, cfg ImporterConfig) *Importer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Locks == nil {
		cfg.Locks = NewInodeLocks()
	}
	if cfg.WebhookRate == 0 {
		cfg.WebhookRate = WebhookHeadRate
	}
	if cfg.WebhookBurst == 0 {
		cfg.WebhookBurst = WebhookHeadBurst
	}
	im := &Importer{meta: m, bucket: b, locks: cfg.Locks, onChange: cfg.OnChange,
		log: cfg.Logger, inflight: map[meta.Ino]*listing{}, deferred: map[meta.Ino][]string{}, badKeys: map[string]bool{},
		validAt: map[meta.Ino]time.Time{},
		events:  newNotifications(maxPendingKeys, nil),
		webhook: newNotifications(maxPendingWebhookKeys, rate.NewLimiter(cfg.WebhookRate, cfg.WebhookBurst))}
	im.echoes.requeue = im.events.put
	return im
}

// validated notes that in was just compared with the bucket.
func (im *Importer) validated(in *meta.Inode) {
	if in == nil {
		return
	}
	im.validMu.Lock()
	defer im.validMu.Unlock()
	if len(im.validAt) > 100000 {
		clear(im.validAt) // a cache, not a record: forgetting only costs a HEAD
	}
	im.validAt[in.Ino] = time.Now()
}

// ValidatedSince reports whether ino was compared with the bucket after t.
func (im *Importer) ValidatedSince(ino meta.Ino, t time.Time) bool {
	im.validMu.Lock()
	defer im.validMu.Unlock()
	return im.validAt[ino].After(t)
}

// ImportStats are the importer's counters.
type ImportStats struct {
	Imported  int64    // inodes created or updated from the bucket
	Failures  int64    // keys that could not be imported
	Conflicts int64    // names changed on both sides (file side to lost+found)
	Samples   []string // some of those keys
}

// Stats returns the importer's counters.
func (im *Importer) Stats() ImportStats {
	s := ImportStats{Imported: im.imported.Load(), Failures: im.failures.Load(), Conflicts: im.conflicts.Load()}
	im.mu.Lock()
	for k := range im.badKeys {
		if len(s.Samples) == 10 {
			break
		}
		s.Samples = append(s.Samples, k)
	}
	im.mu.Unlock()
	return s
}

// EnsureListed imports dir's children unless that was done before, and
// lists a stale directory again (see Fresh). Concurrent callers for one
// directory share one listing. A stale directory whose listing fails
// keeps the children it has: the error is logged, not returned, so a
// store that is away does not hide what the file side holds.
func (im *Importer) EnsureListed(ctx context.Context, dir *meta.Inode) error {
	stale := dir.Has(meta.Listed)
	if stale && im.fresh.has(dir.Ino) {
		return nil
	}
	im.mu.Lock()
	l, ok := im.inflight[dir.Ino]
	if !ok {
		l = &listing{done: make(chan struct{}), prefix: dir.Source, started: time.Now()}
		im.inflight[dir.Ino] = l
		go func() {
			// The listing outlives one caller's cancellation: others may
			// wait for it, and a finished page is never wasted.
			ctx := context.WithoutCancel(ctx)
			if stale {
				if err := im.PollDir(ctx, dir.Ino); err != nil {
					im.log.Warn("list a directory again after a start; its names are as last listed", "ino", dir.Ino, "err", err)
				}
			} else if l.err = im.list(ctx, dir.Ino, dir.Source, &l.objects); l.err == nil {
				im.fresh.add(dir.Ino)
			}
			im.mu.Lock()
			delete(im.inflight, dir.Ino)
			late := im.deferred[dir.Ino]
			delete(im.deferred, dir.Ino)
			im.mu.Unlock()
			close(l.done)
			// Changes the listing may have missed: look at them again.
			for _, k := range late {
				im.Notify(k)
			}
		}()
	}
	im.mu.Unlock()
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// list reads every page of prefix and adds what it finds to dir.
func (im *Importer) list(ctx context.Context, dir meta.Ino, prefix string, progress *atomic.Int64) error {
	// Pages are imported as they arrive, so memory stays bounded and
	// progress shows. An object "x" may be followed on a later page by the
	// prefix "x/" (keys such as "x-1" sort between them), and the directory
	// must win: such an object is held back until the listing has passed
	// "x/". Each page's imports rest on the observation taken before its
	// LIST (see listPages), or, while objects of earlier pages are held,
	// on the one of the oldest such page.
	var held []bucket.ObjectInfo
	var heldSince meta.Observation
	now := time.Now()
	imported := 0
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := im.listPages(ctx, dir, prefix)
	for {
		res := <-pages
		page, obs, err := res.page, res.obs, res.err
		if err != nil {
			return fmt.Errorf("list %q: %w", prefix, err)
		}
		progress.Add(int64(len(page.Objects) + len(page.Prefixes)))
		last := !page.Truncated || page.NextToken == ""
		var items []meta.Imported
		dirs := map[string]bool{}
		pos := "" // the listing has passed every key up to pos
		evidence, err := im.prefixEvidence(ctx, obs, page.Prefixes)
		if err != nil {
			return fmt.Errorf("list %q: %w", prefix, err)
		}
		for i, p := range page.Prefixes {
			pos = max(pos, p)
			if len(evidence[i]) == 0 {
				continue // only deleted objects under it: no directory
			}
			dirs[p] = true
			name := p[len(prefix) : len(p)-1]
			if why := validSegment(name); why != "" {
				im.reject(p, why)
				continue
			}
			it := prefixDir(name, now.UnixNano())
			it.Evidence = evidence[i]
			items = append(items, it)
		}
		if len(held) == 0 {
			heldSince = obs
		}
		for _, o := range page.Objects {
			pos = max(pos, o.Key)
			name := o.Key[len(prefix):]
			if name == "" {
				continue // the directory's own marker object
			}
			if why := validSegment(name); why != "" {
				im.reject(o.Key, why)
				continue
			}
			held = append(held, o)
		}
		var ready []bucket.ObjectInfo
		kept := held[:0]
		for _, o := range held {
			switch {
			case dirs[o.Key+"/"]:
				im.reject(o.Key, "object beside a prefix of the same name")
			case last || o.Key+"/" < pos:
				ready = append(ready, o)
			default:
				kept = append(kept, o)
			}
		}
		held = kept
		files, err := im.fileItems(ctx, prefix, ready)
		if err != nil {
			return err
		}
		items = append(items, files...)
		n, held, err := im.meta.AddImported(ctx, heldSince, dir, items, last)
		if err != nil {
			return err
		}
		for _, k := range held {
			// A file-side change stood against the listing's view of
			// it: look at the key again once the listing is done.
			im.deferKey(dir, k)
		}
		im.imported.Add(int64(n))
		imported += n
		if last {
			im.log.Debug("import listing", "prefix", prefix, "ino", dir, "imported", imported,
				"took", time.Since(now).Round(time.Millisecond))
			return nil
		}
	}
}

// prefixEvidence finds, for each common prefix of a listing made at o,
// the current objects under it that make it a directory (see
// dirEvidence), asking the store about several at once.
func (im *Importer) prefixEvidence(ctx context.Context, o meta.Observation, prefixes []string) ([][]string, error) {
	evidence := make([][]string, len(prefixes))
	errs := make([]error, len(prefixes))
	sem := make(chan struct{}, 16)
	var wg gosync.WaitGroup
	for i, p := range prefixes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			evidence[i], errs[i] = im.dirEvidence(ctx, o, p, "")
		}()
	}
	wg.Wait()
	return evidence, errors.Join(errs...)
}

type pageResult struct {
	page bucket.Listing
	obs  meta.Observation // taken before the page's LIST (meta's fences.go)
	err  error
}

// listPages lists prefix page by page into the returned channel, one page
// ahead of its reader: the next LIST runs while the reader asks for the
// attributes of the objects on this one. A store's LIST of a big directory
// can cost as much as those HEADs (versitygw rereads the directory for
// every page). It stops after the last page, an error, or when ctx ends.
// Each page comes with an observation of dir made just before its LIST:
// the page's imports rest on that LIST alone, so an observation is never
// older than one page's work.
func (im *Importer) listPages(ctx context.Context, dir meta.Ino, prefix string) <-chan pageResult {
	out := make(chan pageResult, 1)
	go func() {
		token := ""
		for {
			// Before the LIST: the page's imports rest on it.
			obs, err := im.meta.Observe(ctx, dir)
			var page bucket.Listing
			if err == nil {
				page, err = im.bucket.List(ctx, prefix, token, 1000)
			}
			select {
			case out <- pageResult{page, obs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || !page.Truncated || page.NextToken == "" {
				return
			}
			token = page.NextToken
		}
	}()
	return out
}

// headParallel bounds the HEAD requests one listing runs at once.
const headParallel = 32

// fileItems turns objects into non-directory children. Listings carry no
// user metadata, so each object's attributes come from a HEAD, run in
// parallel. An object deleted meanwhile is left out; one that cannot be a
// file is counted and left out; a store error fails the whole listing, so
// that the directory is listed again rather than shown incomplete.
func (im *Importer) fileItems(ctx context.Context, prefix string, objs []bucket.ObjectInfo) ([]meta.Imported, error) {
	out := make([]meta.Imported, len(objs))
	ok := make([]bool, len(objs))
	errs := make([]error, len(objs))
	sem := make(chan struct{}, headParallel)
	var wg gosync.WaitGroup
	for i := range objs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			it, err := im.fileItem(ctx, objs[i].Key[len(prefix):], objs[i], false)
			switch {
			case errors.Is(err, bucket.ErrNotFound):
			case errors.Is(err, errNotAFile):
				im.reject(objs[i].Key, err.Error())
			case err != nil:
				errs[i] = err
			default:
				out[i], ok[i] = it, true
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	items := out[:0]
	for i := range out {
		if ok[i] {
			items = append(items, out[i])
		}
	}
	return items, nil
}

// errNotAFile marks objects that cannot be imported as files.
var errNotAFile = errors.New("cannot be a file")

// fileItem turns one object into a non-directory child, asking the bucket
// for its metadata unless o came from a HEAD already.
func (im *Importer) fileItem(ctx context.Context, name string, o bucket.ObjectInfo, headed bool) (meta.Imported, error) {
	if !headed {
		h, err := im.bucket.Head(ctx, o.Key, "")
		if err != nil {
			return meta.Imported{}, fmt.Errorf("head %q: %w", o.Key, err)
		}
		o = h
	}
	mode, uid, gid, rdev, mtime, defaulted := attrsFromMetadata(o.Metadata, o.LastModified, false)
	it := meta.Imported{Name: name, Mode: mode, Uid: uid, Gid: gid, Rdev: rdev, Mtime: mtime, Defaulted: defaulted,
		Obj: meta.Object{Key: o.Key, ETag: o.ETag, VersionID: o.VersionID, Size: o.Size}}
	if mode&syscall.S_IFMT == syscall.S_IFLNK {
		if o.Size <= 0 || o.Size > maxSymlinkTarget {
			return meta.Imported{}, fmt.Errorf("symlink object with a bad size: %w", errNotAFile)
		}
		body, _, err := im.bucket.Get(ctx, o.Key, o.VersionID, 0, -1)
		if err != nil {
			return meta.Imported{}, err
		}
		defer body.Close()
		target, err := io.ReadAll(io.LimitReader(body, maxSymlinkTarget))
		if err != nil {
			return meta.Imported{}, err
		}
		it.Target = string(target)
	}
	return it, nil
}

// reject counts a key that cannot be imported and logs it once.
func (im *Importer) reject(key, why string) {
	im.failures.Add(1)
	im.mu.Lock()
	first := !im.badKeys[key]
	if first && len(im.badKeys) < 100000 {
		im.badKeys[key] = true
	}
	im.mu.Unlock()
	if first {
		im.log.Warn("object key is not importable", "key", key, "reason", why)
	}
}

// LookupOne imports the child name of dir, a directory not listed yet (or
// stale, see Fresh), from the bucket alone: a directory if any key lies under name/ (a directory
// wins over an object of the same name, as in listings), else the object
// name, else ENOENT. A later listing of dir adds the rest and keeps this
// child.
func (im *Importer) LookupOne(ctx context.Context, dir *meta.Inode, name string) error {
	if validSegment(name) != "" || dir.Ino == meta.RootIno && name == im.meta.LostFoundName() {
		return syscall.ENOENT
	}
	prefix, ok, err := im.prefixOf(ctx, dir)
	if err != nil {
		return err
	}
	if !ok {
		return syscall.ENOENT
	}
	key := prefix + name
	obs, err := im.meta.Observe(ctx, dir.Ino) // before the HEAD and the LIST
	if err != nil {
		return fmt.Errorf("look up %q: %w", key, err)
	}
	var (
		head    bucket.ObjectInfo
		headErr error
		wg      gosync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		head, headErr = im.bucket.Head(ctx, key, "")
	}()
	under, err := im.bucket.List(ctx, key+"/", "", 1)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("look up %q: %w", key, err)
	}
	var it meta.Imported
	isDir := false
	if len(under.Objects) > 0 || len(under.Prefixes) > 0 {
		first := ""
		if len(under.Objects) > 0 {
			first = under.Objects[0].Key
		}
		it = prefixDir(name, time.Now().UnixNano())
		evidence, err := im.dirEvidence(ctx, obs, key+"/", first)
		switch {
		case err != nil:
			// The lookup of the name must not fail for it: the listing
			// said there is a directory.
			im.log.Warn("could not tell whether a prefix holds objects; taken as a directory", "prefix", key+"/", "err", err)
			isDir = true
		case len(evidence) > 0:
			it.Evidence, isDir = evidence, true
		}
	}
	switch {
	case isDir:
	case errors.Is(headErr, bucket.ErrNotFound):
		return syscall.ENOENT
	case headErr != nil:
		return fmt.Errorf("look up %q: %w", key, headErr)
	default:
		if it, err = im.fileItem(ctx, name, head, true); err != nil {
			if errors.Is(err, errNotAFile) {
				im.reject(key, err.Error())
				return syscall.ENOENT
			}
			return err
		}
	}
	in, err := im.meta.ImportObject(ctx, obs, dir.Ino, nil, name, nil, it)
	if errors.Is(err, syscall.EAGAIN) {
		// A listing or another lookup imported it first, or a file-side
		// change stands against it: meta has the answer.
		return nil
	}
	if err != nil {
		return err
	}
	im.imported.Add(1)
	if in.IsDir() {
		im.logImport(ctx, "new", key+"/", "", 0, in.Ino)
	} else {
		im.logImport(ctx, "new", key, it.Obj.VersionID, it.Obj.Size, in.Ino)
	}
	im.validated(&in) // just compared: an open right after needs no HEAD
	return nil
}
