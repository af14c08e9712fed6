package readahead

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
)

// chunk is one ranged GET into a buffer of the Reader.
type chunk struct {
	off int64
	n   int64

	// buf receives the bytes. The fetch goroutine writes it until done is
	// closed; readers read it after that while they hold a reference.
	buf  []byte
	done chan struct{} // closed when the fetch has finished
	err  error         // the fetch's error; set before done is closed

	// Guarded by Reader.mu. The buffer is freed once the chunk is neither
	// listed, nor held by a reader, nor being fetched.
	cancel   context.CancelFunc
	listed   bool // in Reader.chunks
	readers  int  // reads holding a reference
	fetching bool // the fetch goroutine is running
}

func (c *chunk) end() int64 { return c.off + c.n }

func (c *chunk) overlaps(off, end int64) bool { return c.off < end && off < c.end() }

// search returns the index of the first chunk that ends after off.
// Requires r.mu.
func (r *Reader) search(off int64) int {
	return sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].end() > off })
}

// startFetch lists a chunk of [off, off+n) and starts its fetch. The chunk
// is for the read of [keepOff, keepEnd), or read-ahead if keepOff < 0. When
// no buffer fits the memory bound it evicts chunks until one does; it
// returns nil if none is left to evict. Requires r.mu.
func (r *Reader) startFetch(off, n, keepOff, keepEnd int64) *chunk {
	buf := r.alloc(n)
	for buf == nil && r.evict(keepOff, keepEnd) {
		buf = r.alloc(n)
	}
	if buf == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(r.ctx)
	c := &chunk{
		off:      off,
		n:        n,
		buf:      buf,
		done:     make(chan struct{}),
		cancel:   cancel,
		listed:   true,
		fetching: true,
	}
	r.chunks = slices.Insert(r.chunks, r.search(off), c)
	r.fetches.Add(1)
	go r.fetch(ctx, c)
	return c
}

// evict drops an idle chunk, outside [keepOff, keepEnd) if keepOff >= 0, to
// make room for a fetch: the one furthest behind of those no read of the
// stream is waited for any more, whose first byte not yet read lies more
// than twice the slack behind the stream position. The kernel keeps two
// read-ahead windows in flight, the one read and the next, and a request of
// the first may arrive after all of the second (seen: 31 MiB late). So a
// chunk ahead of the position is never evicted: the stream has yet to read
// it and would fetch it again (evicting those for a late read once made each
// later fetch evict the next ones, and a cold read fetched most bytes
// twice). Without a stream any idle chunk may go. It reports whether it
// dropped one. Requires r.mu.
func (r *Reader) evict(keepOff, keepEnd int64) bool {
	for _, c := range r.chunks {
		if c.readers > 0 || c.fetching || (keepOff >= 0 && c.overlaps(keepOff, keepEnd)) {
			continue
		}
		if r.stream && min(r.taken.skip(c.off), c.end()) > r.pos-2*r.slack {
			continue
		}
		r.dropChunks(func(d *chunk) bool { return d == c })
		return true
	}
	return false
}

// fetch fills c from the Source, then publishes the result.
func (r *Reader) fetch(ctx context.Context, c *chunk) {
	defer r.fetches.Done()
	_, err := r.fetchRange(ctx, c.buf, c.off)
	c.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	c.err = err
	c.fetching = false
	close(c.done)
	r.maybeFree(c)
}

// fetchRange reads [off, off+len(p)) from the Source into p, which lies
// within the object. A short read is an error.
func (r *Reader) fetchRange(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := r.src.ReadAt(ctx, p, off)
	r.nFetches.Add(1)
	r.bytesFetched.Add(int64(n))
	switch {
	case n == len(p):
		err = nil
	case err == nil || err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		return n, nil
	}
	if r.closed.Load() {
		return n, ErrClosed
	}
	if ctx.Err() == nil {
		r.fetchErrors.Add(1)
	}
	return n, fmt.Errorf("readahead: fetch [%d, %d): %w", off, off+int64(len(p)), err)
}

// copyOut waits for each held chunk in turn and copies its part of
// [off, off+len(p)) into p. It drops the references when done.
func (r *Reader) copyOut(ctx context.Context, held []*chunk, p []byte, off int64) (n int, err error) {
	defer r.unhold(held)
	err = r.wait(ctx, held, func(c *chunk) {
		n += copy(p[n:], c.buf[off+int64(n)-c.off:])
	})
	return n, err
}

// wait waits for each held chunk in turn and hands it to use once it has
// been fetched, stopping at the first failed one.
func (r *Reader) wait(ctx context.Context, held []*chunk, use func(c *chunk)) error {
	for _, c := range held {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.err != nil {
			if r.closed.Load() {
				return ErrClosed
			}
			r.forget(c)
			return c.err
		}
		use(c)
	}
	return nil
}

// forget unlists a failed chunk once a read has received its error, so that
// a retry fetches it again.
func (r *Reader) forget(c *chunk) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.listed {
		r.dropChunks(func(d *chunk) bool { return d == c })
	}
}

func (r *Reader) unhold(held []*chunk) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unholdLocked(held)
}

// unholdLocked drops a read's references. Requires r.mu.
func (r *Reader) unholdLocked(held []*chunk) {
	for _, c := range held {
		c.readers--
		r.maybeFree(c)
	}
}

// dropChunks unlists the chunks for which drop is true. Requires r.mu.
func (r *Reader) dropChunks(drop func(*chunk) bool) {
	kept := r.chunks[:0]
	for _, c := range r.chunks {
		if !drop(c) {
			kept = append(kept, c)
			continue
		}
		c.listed = false
		r.maybeFree(c)
	}
	clear(r.chunks[len(kept):])
	r.chunks = kept
}

// maybeFree cancels the fetch of a chunk nobody needs any more, or frees
// its buffer once the fetch has finished. Requires r.mu.
func (r *Reader) maybeFree(c *chunk) {
	if c.listed || c.readers > 0 {
		return
	}
	if c.fetching {
		c.cancel()
		return
	}
	if c.buf != nil {
		r.release(c.buf)
		c.buf = nil
	}
}

// alloc returns a buffer of n <= ChunkSize bytes within the memory bound,
// or nil. Full-size buffers come from the free list when it has one.
// Requires r.mu.
func (r *Reader) alloc(n int64) []byte {
	if k := len(r.free); k > 0 {
		buf := r.free[k-1]
		r.free[k-1] = nil
		r.free = r.free[:k-1]
		return buf[:n]
	}
	if r.mem+n > r.budget {
		return nil
	}
	r.mem += n
	return make([]byte, n)
}

// release takes back a buffer: a full-size one is kept for reuse while a
// stream runs, any other is let go. Requires r.mu.
func (r *Reader) release(buf []byte) {
	if int64(cap(buf)) == r.opt.ChunkSize && r.stream && !r.closed.Load() {
		r.free = append(r.free, buf[:0])
		return
	}
	r.mem -= int64(cap(buf))
}

// dropFree lets go of the buffers kept for reuse. Requires r.mu.
func (r *Reader) dropFree() {
	for _, buf := range r.free {
		r.mem -= int64(cap(buf))
	}
	clear(r.free)
	r.free = r.free[:0]
}
