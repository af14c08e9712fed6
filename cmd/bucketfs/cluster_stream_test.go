package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

// streamChunk is the size of one write of a streamer.
const streamChunk = 16 << 10

// streamer writes one file, kept open across the database's restart,
// chunk after chunk at growing offsets, and makes it durable every four
// chunks. After a failure it writes again from the last durable chunk, so
// the file ends holding every chunk written; the chunks acknowledged as
// durable are never written again, so a lost one shows.
type streamer struct {
	fs   clientFS
	path string
	st   stream
	pace time.Duration // between writes; 0 means 20 ms

	mu      sync.Mutex
	synced  int       // guarded by mu: chunks acknowledged as durable
	written int       // guarded by mu: chunks written (the next one's number)
	since   time.Time // guarded by mu: when the call under way began
	failed  []writeFailure
}

// chunkOf is chunk i of p: a line naming both, then i's byte.
func chunkOf(p string, i int) []byte {
	b := []byte(fmt.Sprintf("%s chunk %d\n", p, i))
	return append(b, bytes.Repeat([]byte{byte(i)}, streamChunk-len(b))...)
}

// call runs one call of the stream within opDeadline, recording when it
// began for the hang watch.
func (s *streamer) call(fn func(ctx context.Context) error) error {
	s.mu.Lock()
	s.since = time.Now()
	s.mu.Unlock()
	_, err := bounded(opDeadline, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	s.mu.Lock()
	if err != nil {
		s.failed = append(s.failed, writeFailure{began: s.since, err: fmt.Errorf("%s through %s (began %s, took %v): %w",
			s.path, s.fs.name(), s.since.Format("15:04:05.000"), time.Since(s.since).Round(time.Millisecond), err)})
	}
	s.since = time.Time{}
	s.mu.Unlock()
	return err
}

func (s *streamer) run(stop <-chan struct{}) {
	pace := s.pace
	if pace == 0 {
		pace = 20 * time.Millisecond
	}
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		i := s.written
		s.mu.Unlock()
		err := s.call(func(ctx context.Context) error { return s.st.writeAt(ctx, int64(i)*streamChunk, chunkOf(s.path, i)) })
		if err == nil && (i+1)%4 == 0 {
			err = s.call(s.st.sync)
		}
		s.mu.Lock()
		switch {
		case err != nil:
			s.written = s.synced
		case (i+1)%4 == 0:
			s.written, s.synced = i+1, i+1
		default:
			s.written = i + 1
		}
		s.mu.Unlock()
	}
}

// finish writes what is not yet durable until a sync succeeds (within
// opDeadline), closes the file and returns how many chunks it holds.
func (s *streamer) finish() (int, error) {
	deadline := time.Now().Add(opDeadline)
	for {
		s.mu.Lock()
		from, to := s.synced, s.written
		s.mu.Unlock()
		err := func() error {
			for i := from; i < to; i++ {
				if err := s.call(func(ctx context.Context) error {
					return s.st.writeAt(ctx, int64(i)*streamChunk, chunkOf(s.path, i))
				}); err != nil {
					return err
				}
			}
			return s.call(s.st.sync)
		}()
		if err == nil {
			s.mu.Lock()
			s.synced = to
			s.mu.Unlock()
			return to, s.call(s.st.close)
		}
		if time.Now().After(deadline) {
			return 0, err
		}
	}
}

// progress counts the syncs acknowledged.
func (s *streamer) progress() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced / 4
}

func (s *streamer) busyFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return 0
	}
	return time.Since(s.since)
}

func (s *streamer) failures() []writeFailure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]writeFailure(nil), s.failed...)
}
