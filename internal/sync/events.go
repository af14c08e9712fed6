package sync

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxPendingKeys bounds the keys waiting for revalidation. Past it,
// notifications are dropped and counted: the directory poller finds those
// changes instead.
const maxPendingKeys = 100000

// notifications is the queue of keys named by change events.
type notifications struct {
	mu      gosync.Mutex
	pending map[string]notice // key -> when first notified, and how
	order   []string
	wake    chan struct{}
	dropped atomic.Int64
	applied atomic.Int64
	lastLag atomic.Int64 // ns from notification to applied, of the last one
}

// notice is one queued key.
type notice struct {
	since   time.Time
	created bool // an ObjectCreated event: the object must show up
	tries   int
}

// Notify queues key (relative to the file system's prefix) for
// revalidation. It never blocks.
func (im *Importer) Notify(key string) { im.notify(key, notice{since: time.Now()}) }

// NotifyEvent queues key for an S3 event notification; created says the
// event reported a new object (ObjectCreated:*), which is looked for again
// a few times if the store notified before the object could be read.
func (im *Importer) NotifyEvent(key string, created bool) {
	im.notify(key, notice{since: time.Now(), created: created})
}

func (im *Importer) notify(key string, no notice) {
	n := &im.events
	n.mu.Lock()
	if n.pending == nil {
		n.pending = map[string]notice{}
		n.wake = make(chan struct{}, 1)
	}
	if old, ok := n.pending[key]; ok {
		old.created = old.created || no.created
		n.pending[key] = old
	} else {
		if len(n.pending) >= maxPendingKeys {
			n.mu.Unlock()
			n.dropped.Add(1)
			return
		}
		n.pending[key] = no
		n.order = append(n.order, key)
	}
	wake := n.wake
	n.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued key, waiting until there is one or ctx ends.
func (n *notifications) next(ctx context.Context) (string, notice, bool) {
	for {
		n.mu.Lock()
		if n.pending == nil {
			n.pending = map[string]notice{}
			n.wake = make(chan struct{}, 1)
		}
		if len(n.order) > 0 {
			k := n.order[0]
			n.order = n.order[1:]
			t := n.pending[k]
			delete(n.pending, k)
			if len(n.order) > 0 {
				select {
				case n.wake <- struct{}{}: // let another worker take the next
				default:
				}
			}
			n.mu.Unlock()
			return k, t, true
		}
		wake := n.wake
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", notice{}, false
		case <-wake:
		}
	}
}

// RunNotifications revalidates notified keys with the given number of
// workers until ctx is done.
func (im *Importer) RunNotifications(ctx context.Context, workers int) {
	var wg gosync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, no, ok := im.events.next(ctx)
				if !ok {
					return
				}
				err := im.revalidateKey(ctx, key)
				switch {
				case errors.Is(err, errAbsent) && no.created && no.tries < 5:
					// Notified before the object could be read: look again
					// shortly.
					no.tries++
					time.AfterFunc(time.Duration(no.tries)*20*time.Millisecond, func() { im.notify(key, no) })
					continue
				case errors.Is(err, errAbsent):
					err = nil
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if errors.Is(err, syscall.EAGAIN) {
						// Busy with other changes to the same names: try
						// again after the rest of the queue.
						im.notify(key, no)
						continue
					}
					im.log.Warn("import of a changed object failed; the poller will retry", "key", key, "err", err)
					continue
				}
				im.events.applied.Add(1)
				im.events.lastLag.Store(int64(time.Since(no.since)))
			}
		}()
	}
	wg.Wait()
}

// eventRecord is the part of an S3 event notification record we read. AWS,
// MinIO and versitygw send this shape.
type eventRecord struct {
	EventName string `json:"eventName"`
	S3        struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key string `json:"key"`
		} `json:"object"`
	} `json:"s3"`
}

// WebhookHandler accepts S3 event notifications (POST, JSON with a Records
// array) for bucket and queues every key under prefix for revalidation.
// Malformed bodies get 400; bodies over 8 MiB get 413.
func (im *Importer) WebhookHandler(bucket, prefix string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST S3 event notifications here", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		var msg struct {
			Records []eventRecord `json:"Records"`
		}
		if err := json.Unmarshal(body, &msg); err != nil {
			http.Error(w, "not an S3 event notification: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, rec := range msg.Records {
			if rec.S3.Bucket.Name != bucket {
				continue
			}
			// Keys in notifications are URL-encoded, spaces as '+'.
			key, err := url.QueryUnescape(rec.S3.Object.Key)
			if err != nil || !strings.HasPrefix(key, prefix) {
				continue
			}
			im.NotifyEvent(key[len(prefix):], strings.Contains(rec.EventName, "ObjectCreated"))
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// EventStats are the counters of the notification path.
type EventStats struct {
	Applied, Dropped int64
	Pending          int
	LastLag          time.Duration
}

// EventStats returns the notification counters.
func (im *Importer) EventStats() EventStats {
	n := &im.events
	n.mu.Lock()
	p := len(n.pending)
	n.mu.Unlock()
	return EventStats{Applied: n.applied.Load(), Dropped: n.dropped.Load(), Pending: p,
		LastLag: time.Duration(n.lastLag.Load())}
}
