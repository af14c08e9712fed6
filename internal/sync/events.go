package sync

import (
	"context"
	"errors"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
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

	mu      gosync.Mutex
	pending map[string]time.Time // key -> when first notified
	order   []string
	wake    chan struct{}
	dropped atomic.Int64
	applied atomic.Int64
}

func newNotifications(max int, limit *rate.Limiter) *notifications {
	return &notifications{max: max, limit: limit, pending: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

// Notify queues key (relative to the file system's prefix) for
// revalidation: an event of the embedded store, or a key that changed
// while its directory was being listed. It never blocks.
func (im *Importer) Notify(key string) { im.events.add([]string{key}, time.Now()) }

// NotifyWebhook queues keys as the webhook does: keys another server's
// webhook was told of, handed over through the shared store.
func (im *Importer) NotifyWebhook(keys []string) { im.webhook.add(keys, time.Now()) }

// add queues keys that are not pending already, dropping those past the
// queue's bound.
func (n *notifications) add(keys []string, since time.Time) {
	n.mu.Lock()
	for _, key := range keys {
		if _, ok := n.pending[key]; ok {
			continue
		}
		if len(n.pending) >= n.max {
			n.dropped.Add(1)
			continue
		}
		n.pending[key] = since
		n.order = append(n.order, key)
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued key, waiting until there is one or ctx ends.
func (n *notifications) next(ctx context.Context) (string, time.Time, bool) {
	for {
		n.mu.Lock()
		if len(n.order) > 0 {
			k := n.order[0]
			n.order = n.order[1:]
			since := n.pending[k]
			delete(n.pending, k)
			if len(n.order) > 0 {
				select {
				case n.wake <- struct{}{}: // let another worker take the next
				default:
				}
			}
			n.mu.Unlock()
			return k, since, true
		}
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", time.Time{}, false
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
		key, since, ok := q.next(ctx)
		if !ok {
			return
		}
		err := im.revalidateKey(ctx, key, q.limit)
		if errors.Is(err, errAbsent) {
			err = nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, syscall.EAGAIN) {
				// Busy with other changes to the same names: try again
				// after the rest of the queue.
				q.add([]string{key}, since)
				continue
			}
			im.log.Warn("import of a changed object failed; the poller will retry", "key", key, "err", err)
			continue
		}
		q.applied.Add(1)
		im.eventLag.Store(int64(time.Since(since)))
	}
}

// EventStats are the counters of the notification path, both queues.
type EventStats struct {
	Applied, Dropped int64
	Pending          int
	LastLag          time.Duration
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
	}
	s.LastLag = time.Duration(im.eventLag.Load())
	return s
}
