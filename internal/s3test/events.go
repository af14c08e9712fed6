package s3test

import (
	"sync"
	"testing"
	"time"

	"bucketfs/internal/s3local"
)

// eventHub fans the shared store's events out to subscribers by bucket.
type eventHub struct {
	mu   sync.RWMutex
	subs map[string]map[*EventLog]struct{} // bucket -> subscribers
}

func (h *eventHub) publish(e s3local.Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for l := range h.subs[e.Bucket] {
		l.add(e)
	}
}

func (h *eventHub) subscribe(bucket string, l *EventLog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[bucket] == nil {
		h.subs[bucket] = make(map[*EventLog]struct{})
	}
	h.subs[bucket][l] = struct{}{}
}

func (h *eventHub) unsubscribe(bucket string, l *EventLog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[bucket], l)
	if len(h.subs[bucket]) == 0 {
		delete(h.subs, bucket)
	}
}

// EventLog records the events of one bucket from the moment it was made. It
// keeps every event (tests are short) and is safe for concurrent use.
type EventLog struct {
	mu      sync.Mutex
	events  []s3local.Event
	changed chan struct{} // closed and replaced whenever an event arrives
	notify  func(s3local.Event)
}

// Events subscribes to the object events of bucket in the shared store
// (starting the store if needed) until the test ends. The store reports an
// event before it answers the request that caused it, so an operation that
// returned after Events was called is always recorded.
func Events(t testing.TB, bucket string) *EventLog {
	t.Helper()
	Store(t)
	l := &EventLog{changed: make(chan struct{})}
	hub.subscribe(bucket, l)
	t.Cleanup(func() { hub.unsubscribe(bucket, l) })
	return l
}

// Forward subscribes fn to the object events of bucket until the test
// ends, the way the embedded store's OnEvent feeds a running bucketfs. fn
// runs inside the store's request handler: it must not block.
func Forward(t testing.TB, bucket string, fn func(s3local.Event)) {
	t.Helper()
	Store(t)
	l := &EventLog{changed: make(chan struct{}), notify: fn}
	hub.subscribe(bucket, l)
	t.Cleanup(func() { hub.unsubscribe(bucket, l) })
}

func (l *EventLog) add(e s3local.Event) {
	if l.notify != nil {
		l.notify(e)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// All returns the events recorded so far, oldest first.
func (l *EventLog) All() []s3local.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]s3local.Event(nil), l.events...)
}

// WaitFor returns the first recorded event (oldest first) for which match
// is true, waiting up to timeout for one to arrive, and fails the test if
// none does.
func (l *EventLog) WaitFor(t testing.TB, timeout time.Duration, match func(s3local.Event) bool) s3local.Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	next := 0
	for {
		l.mu.Lock()
		for ; next < len(l.events); next++ {
			if match(l.events[next]) {
				e := l.events[next]
				l.mu.Unlock()
				return e
			}
		}
		changed := l.changed
		l.mu.Unlock()

		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("s3test: no matching event within %v; saw %+v", timeout, l.All())
			return s3local.Event{}
		}
	}
}
