package sync

import (
	"context"
	"errors"
	"slices"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// maxPendingKeys bounds the keys from the embedded store's events waiting
// for revalidation. Past it, notifications are dropped and counted: the
// directory poller finds those changes instead.
const maxPendingKeys = 100000

// maxPendingWebhookKeys bounds the keys from the webhook waiting for
// revalidation: at WebhookHeadRate, a little over three minutes of work.
// Past it, keys are dropped and counted, as for maxPendingKeys.
const maxPendingWebhookKeys = 10000

// WebhookHeadRate caps the revalidations (each one HEAD, or a few when it
// races with other changes to the same name) that keys from the webhook
// cause, per second, allowing bursts of WebhookHeadBurst. Anyone holding
// the webhook's token can name any number of keys; at this rate they
// cannot crowd out the file system's own requests or run up a bill, and
// keys over it wait in the pending set. A real burst of bucket-side
// changes waits too, or is found sooner by the poller.
const (
	WebhookHeadRate  = 50
	WebhookHeadBurst = 100
)

// notifications is a queue of keys named by change events, each key at
// most once, revalidated by RunNotifications' workers at most at the
// queue's rate.
type notifications struct {
	max   int           // keys pending at most
	limit *rate.Limiter // nil: no cap

	mu       gosync.Mutex
	pending  map[string]*pendingKey
	working  map[string]int // keys workers took and have not finished
	order    []string
	wake     chan struct{}
	dropped  atomic.Int64
	lastDrop atomic.Int64 // unix ns of the last notification dropped
	applied  atomic.Int64
	// own counts the keys found to name only versions the exporter wrote
	// and recorded (ownVersions): applied without a look at the bucket.
	own atomic.Int64
}

// pendingKey is what the notifications of one key, merged while it waited,
// said.
type pendingKey struct {
	since time.Time // the first one
	// made are the object versions they said were created, when every
	// one of them said which (an event of the embedded store); unknown
	// is set once one did not (a removal, a webhook's key, a key that
	// changed during a listing).
	made    []bucket.ObjectInfo
	unknown bool
}

func newNotifications(max int, limit *rate.Limiter) *notifications {
	return &notifications{max: max, limit: limit, pending: map[string]*pendingKey{}, working: map[string]int{},
		wake: make(chan struct{}, 1)}
}

// waiting reports whether a notification of key is queued or being
// applied.
func (n *notifications) waiting(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pending[key] != nil || n.working[key] > 0
}

// done ends a worker's turn on key (taken by next).
func (n *notifications) done(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.working[key]--; n.working[key] <= 0 {
		delete(n.working, key)
	}
}

// Notify queues key (relative to the file system's prefix) for
// revalidation: an event of the embedded store, or a key that changed
// while its directory was being listed. It never blocks.
func (im *Importer) Notify(key string) { im.events.add([]string{key}, nil, time.Now()) }

// NotifyCreated is Notify for an event that says which version of key it
// created (version id and ETag). When every notification of the key that
// waits says so, and each version named is the one the file side records
// at the key (an export's own upload, whose event comes back), the key is
// applied without a HEAD: see ownVersions.
func (im *Importer) NotifyCreated(key, versionID, etag string) {
	im.events.add([]string{key}, &bucket.ObjectInfo{Key: key, VersionID: versionID, ETag: etag}, time.Now())
}

// NotifyWebhook queues keys as the webhook does: keys another server's
// webhook was told of, handed over through the shared store.
func (im *Importer) NotifyWebhook(keys []string) { im.webhook.add(keys, nil, time.Now()) }

// add queues keys that are not pending already, dropping those past the
// queue's bound; a key pending already keeps its place and learns of the
// version made (nil: unknown).
func (n *notifications) add(keys []string, made *bucket.ObjectInfo, since time.Time) {
	one := pendingKey{since: since, unknown: made == nil || made.VersionID == ""}
	if !one.unknown {
		one.made = []bucket.ObjectInfo{*made}
	}
	n.mu.Lock()
	for _, key := range keys {
		n.merge(key, &one)
	}
	n.mu.Unlock()
	n.wakeOne()
}

// put queues key with what notifications p merged (a parked one, see
// echoes), or merges p into the key's pending entry.
func (n *notifications) put(key string, p *pendingKey) {
	n.mu.Lock()
	n.merge(key, p)
	n.mu.Unlock()
	n.wakeOne()
}

// merge adds what p says of key to the queue; the caller holds n.mu.
func (n *notifications) merge(key string, p *pendingKey) {
	q, ok := n.pending[key]
	if !ok {
		if len(n.pending) >= n.max {
			n.dropped.Add(1)
			n.lastDrop.Store(time.Now().UnixNano())
			return
		}
		q = &pendingKey{since: p.since}
		n.pending[key] = q
		n.order = append(n.order, key)
	}
	q.merge(p)
}

// merge adds what p says to q.
func (q *pendingKey) merge(p *pendingKey) {
	if p.since.Before(q.since) {
		q.since = p.since
	}
	q.unknown = q.unknown || p.unknown
	if q.unknown {
		q.made = nil
	} else {
		q.made = append(q.made, p.made...)
	}
}

func (n *notifications) wakeOne() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued key, waiting until there is one or ctx ends.
func (n *notifications) next(ctx context.Context) (string, *pendingKey, bool) {
	for {
		n.mu.Lock()
		if len(n.order) > 0 {
			k := n.order[0]
			n.order = n.order[1:]
			p := n.pending[k]
			delete(n.pending, k)
			n.working[k]++
			if len(n.order) > 0 {
				select {
				case n.wake <- struct{}{}: // let another worker take the next
				default:
				}
			}
			n.mu.Unlock()
			return k, p, true
		}
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", nil, false
		case <-n.wake:
		}
	}
}

// RunNotifications revalidates notified keys until ctx is done, with the
// given number of workers for each queue: the embedded store's events,
// and the webhook's (at most WebhookHeadRate a second).
func (im *Importer) RunNotifications(ctx context.Context, workers int) {
	var wg gosync.WaitGroup
	for _, q := range []*notifications{im.events, im.webhook} {
		for range max(workers, 1) {
			wg.Go(func() { im.drain(ctx, q) })
		}
	}
	wg.Wait()
}

// drain is one worker of queue q. A key whose object and file are both
// absent is done: a 404 is final, not looked for again.
func (im *Importer) drain(ctx context.Context, q *notifications) {
	for {
		// Take the token before the key: a key waiting for one stays
		// pending, where later notifications of it find it.
		if q.limit != nil && q.limit.Wait(ctx) != nil {
			return
		}
		key, p, ok := q.next(ctx)
		if !ok {
			return
		}
		if !im.apply(ctx, q, key, p) {
			return
		}
	}
}

// apply is drain's work on one key taken from q; false means ctx ended.
// The key is parked or queued again, when it is, before its turn ends
// (q.done), so that it is never seen as waiting for nothing (eventsSay).
func (im *Importer) apply(ctx context.Context, q *notifications, key string, p *pendingKey) bool {
	defer q.done(key)
	if !p.unknown && len(p.made) > 0 {
		if im.echoes.park(key, p) {
			return true // back in the queue when this process's upload of key ends
		}
		own, err := im.ownVersions(ctx, key, p.made)
		if err != nil && ctx.Err() != nil {
			return false
		}
		if own {
			q.own.Add(1)
			q.applied.Add(1)
			im.eventLag.Store(int64(time.Since(p.since)))
			return true
		}
	}
	err := im.revalidateKey(ctx, key, q.limit)
	if errors.Is(err, errAbsent) {
		err = nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, syscall.EAGAIN) {
			// Busy with other changes to the same names: try again
			// after the rest of the queue.
			q.add([]string{key}, nil, p.since)
			return true
		}
		im.log.Warn("import of a changed object failed; the poller will retry", "key", key, "err", err)
		return true
	}
	q.applied.Add(1)
	im.eventLag.Store(int64(time.Since(p.since)))
	return true
}

// ownVersions reports whether every version in made was written by this
// process's exporter (echoes) or is the one the file side records at key,
// by version id and ETag: the inode that owns the key (meta.KeyOwner)
// lists it so, which only the exporter's record of its own upload does.
// Such a notification is the echo of an export, and nothing in the bucket
// is new to the file side:
//
// Invariant: an event names one version a write created. Any other write
// of the key, before or after that one, has an event of its own, queued
// as its own notification or merged into this one (which then names two
// versions, or an unknown one, and is revalidated in full). So skipping
// a notification whose versions are all recorded loses no bucket-side
// change: the version it names is, by the record, what the file side
// holds. A version recorded and then replaced by a later export is no
// longer the record: its echo is revalidated as before.
func (im *Importer) ownVersions(ctx context.Context, key string, made []bucket.ObjectInfo) (bool, error) {
	if made = im.echoes.take(key, made); len(made) == 0 {
		return true, nil
	}
	owner, owned, err := im.meta.KeyOwner(ctx, key)
	if err != nil || !owned {
		return false, err
	}
	i := slices.IndexFunc(owner.Keys, func(o meta.Object) bool { return o.Key == key })
	if i < 0 {
		return false, nil
	}
	rec := owner.Keys[i]
	for _, m := range made {
		if !sameWrite(m.VersionID, m.ETag, rec.VersionID, rec.ETag) {
			return false, nil
		}
	}
	return true, nil
}

// EventStats are the counters of the notification path, both queues.
type EventStats struct {
	Applied, Dropped int64
	// Own counts the applied keys whose notifications named only the
	// exporter's recorded uploads (no HEAD was sent for them).
	Own     int64
	Pending int
	LastLag time.Duration
}

// EventStats returns the notification counters.
func (im *Importer) EventStats() EventStats {
	var s EventStats
	for _, q := range []*notifications{im.events, im.webhook} {
		q.mu.Lock()
		s.Pending += len(q.pending)
		q.mu.Unlock()
		s.Applied += q.applied.Load()
		s.Dropped += q.dropped.Load()
		s.Own += q.own.Load()
	}
	s.LastLag = time.Duration(im.eventLag.Load())
	return s
}
