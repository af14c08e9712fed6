package readahead

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
)

// Source reads byte ranges of one pinned object version.
type Source interface {
	// ReadAt fills p from [off, off+len(p)) of one pinned object version with
	// one ranged GET. It returns fewer than len(p) bytes only at the end of the
	// object, and io.EOF then. It must return promptly once ctx is cancelled.
	// It is called from several goroutines at once.
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
}

// Defaults for the zero fields of Options.
const (
	DefaultChunkSize    = 8 << 20
	DefaultWindow       = 8
	DefaultInitialChunk = 1 << 20
)

const (
	// randomRound is the granularity of a fetch serving a random read, and how
	// far after the previous read a read may start to begin a new stream.
	randomRound = 128 << 10
	// minSlack is the least reordering tolerated around the stream position:
	// the kernel's read-ahead window for a FUSE mount (16 MiB, see
	// frontend/fuse) lets a synchronous read arrive that far behind the
	// asynchronous ones.
	minSlack = 16 << 20
	// maxTaken bounds the spans a Reader remembers of the bytes reads have
	// taken; a sequential read needs a few, random reads forget the lowest.
	maxTaken = 64
)

// ErrClosed is returned by reads of a closed Reader.
var ErrClosed = errors.New("readahead: reader closed")

// Options tunes a Reader. Zero fields take the defaults.
type Options struct {
	// ChunkSize is the size of one ranged GET. Default 8 MiB.
	ChunkSize int64
	// Window is the most chunks fetched or in flight ahead of the reader.
	// Default 8, so up to 64 MiB read ahead.
	Window int
	// InitialChunk is the size of the first fetch of a stream, smaller for a
	// quicker first byte; later fetches double up to ChunkSize. Default 1 MiB.
	InitialChunk int64
}

func (o Options) withDefaults() Options {
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.InitialChunk <= 0 {
		o.InitialChunk = DefaultInitialChunk
	}
	o.InitialChunk = min(o.InitialChunk, o.ChunkSize)
	return o
}

// Stats counts what a Reader did, for tests and metrics.
type Stats struct {
	// BytesFetched is the number of bytes returned by Source.ReadAt.
	BytesFetched int64
	// Fetches is the number of Source.ReadAt calls (ranged GETs): chunk
	// fetches, including cancelled ones, and direct reads.
	Fetches int64
	// Hits counts reads served by chunks already fetched or in flight.
	Hits int64
	// Misses counts reads that had to start at least one fetch.
	Misses int64
	// FetchErrors counts Source.ReadAt calls that failed, not counting
	// fetches cancelled because nobody needed them any more.
	FetchErrors int64
}

// access is how a read relates to the reads before it.
type access int

const (
	streamRead access = iota // continues the current stream
	newStream                // follows the previous read: starts a stream
	randomRead               // a jump
)

// Reader streams reads of one object version. Its methods are safe for
// concurrent use.
type Reader struct {
	src    Source
	size   int64
	opt    Options
	budget int64 // Window*ChunkSize + slack: the most buffer bytes held
	slack  int64 // reordering tolerated around the stream position

	ctx     context.Context // parent of every fetch; cancelled by Close
	cancel  context.CancelFunc
	fetches sync.WaitGroup // one per fetch goroutine
	closed  atomic.Bool    // set under mu

	bytesFetched, nFetches, hits, misses, fetchErrors atomic.Int64

	mu sync.Mutex
	// The fields below are guarded by mu.
	chunks []*chunk // sorted by offset, never overlapping
	free   [][]byte // full-size buffers kept for reuse
	mem    int64    // bytes of buffers held: in chunks, in flight, in free
	stream bool     // a stream is running
	start  int64    // offset where the stream began
	pos    int64    // highest end of the stream's reads
	front  int64    // the stream has scheduled fetches up to here
	next   int64    // size of the stream's next chunk
	last   [2]int64 // [off, end) of the previous read
	jumps  int      // random reads in a row
	taken  spans    // the bytes reads have taken, see take
}

// New returns a Reader of the first size bytes of src.
func New(src Source, size int64, opt Options) *Reader {
	opt = opt.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	slack := max(opt.ChunkSize, minSlack)
	return &Reader{
		src:  src,
		size: max(size, 0),
		opt:  opt,
		// Chunks behind the position whose bytes have not all been read
		// are kept for the reads that arrive late; the bound leaves slack
		// bytes of room for them beside the Window chunks ahead, which
		// would otherwise be cut to Window-2 fetches in flight (0.65x the
		// raw store's cold read here instead of 0.8x).
		budget: int64(opt.Window)*opt.ChunkSize + slack,
		slack:  slack,
		ctx:    ctx,
		cancel: cancel,
	}
}

// ReadAt reads len(p) bytes at off, like io.ReaderAt: fewer only at the end
// of the object (with io.EOF) or on error. It waits only for the chunks that
// cover its range, or until ctx is done.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("readahead: read at negative offset %d", off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := p
	if rest := r.size - off; int64(len(want)) > rest {
		want = want[:rest]
	}
	if len(want) == 0 {
		return 0, nil
	}
	end := off + int64(len(want))

	held, missed, ok, err := r.begin(off, end)
	if err != nil {
		return 0, err
	}
	r.count(missed || !ok)
	var n int
	if ok {
		n, err = r.copyOut(ctx, held, want, off)
	} else {
		n, err = r.fetchRange(ctx, want, off)
	}
	if err == nil && len(want) < len(p) {
		err = io.EOF
	}
	return n, err
}

// ReadShared is ReadAt without the copy, for a caller that can send bytes
// it does not own (a FUSE reply is written with writev): it returns the
// Reader's own buffers holding [off, off+n), and release, which the caller
// must call once it no longer reads them; until then the buffers are
// neither freed nor reused, even by Close. The range must lie within the
// object. ok is false when the range cannot be buffered (a read far from
// the stream, or the memory bound reached): the caller then uses ReadAt.
func (r *Reader) ReadShared(ctx context.Context, off, n int64) (bufs [][]byte, release func(), ok bool, err error) {
	if off < 0 || n <= 0 || off+n > r.size {
		return nil, nil, false, fmt.Errorf("readahead: shared read of [%d, %d) outside the object's %d bytes", off, off+n, r.size)
	}
	end := off + n
	held, missed, ok, err := r.begin(off, end)
	if err != nil || !ok {
		return nil, nil, false, err // not counted: the ReadAt the caller falls back to counts it
	}
	r.count(missed)
	err = r.wait(ctx, held, func(c *chunk) {
		bufs = append(bufs, c.buf[max(off, c.off)-c.off:min(end, c.end())-c.off])
	})
	if err != nil {
		r.unhold(held)
		return nil, nil, false, err
	}
	var once sync.Once
	return bufs, func() { once.Do(func() { r.unhold(held) }) }, true, nil
}

// begin plans the read of [off, end) under the lock: the chunks it holds,
// whether it started a fetch the read needs, and !ok if the range cannot be
// buffered.
func (r *Reader) begin(off, end int64) (held []*chunk, missed, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil, false, false, ErrClosed
	}
	held, missed, ok = r.plan(off, end)
	return held, missed, ok, nil
}

// count records a read as a hit or a miss.
func (r *Reader) count(missed bool) {
	if missed {
		r.misses.Add(1)
	} else {
		r.hits.Add(1)
	}
}

// Close cancels every fetch, waits for their goroutines and frees the
// buffers. Reads waiting on a fetch return ErrClosed.
func (r *Reader) Close() {
	r.mu.Lock()
	if !r.closed.Load() {
		r.closed.Store(true)
		r.dropChunks(func(*chunk) bool { return true })
		r.dropFree()
	}
	r.mu.Unlock()
	r.cancel()
	r.fetches.Wait()
}

// Stats returns the counters so far.
func (r *Reader) Stats() Stats {
	return Stats{
		BytesFetched: r.bytesFetched.Load(),
		Fetches:      r.nFetches.Load(),
		Hits:         r.hits.Load(),
		Misses:       r.misses.Load(),
		FetchErrors:  r.fetchErrors.Load(),
	}
}

// plan classifies the read of [off, end), updates the stream, and takes a
// reference on the chunks covering the range, starting fetches for the
// missing parts. missed reports whether it started a fetch the read needs;
// !ok means the range cannot be buffered and must be read directly.
// Requires r.mu.
func (r *Reader) plan(off, end int64) (held []*chunk, missed, ok bool) {
	kind := r.classify(off)
	again := r.last == [2]int64{off, end}
	switch kind {
	case streamRead:
		if off <= r.pos+r.slack {
			// Only reads near the position move it: one that overtook
			// others leaves them in the stream.
			r.pos = max(r.pos, end)
		}
		// A read that moved the position far ahead does not wait for
		// the stream to fetch all the way up to it.
		r.front = max(r.front, r.pos-r.slack)
		r.jumps = 0
	case newStream:
		r.dropChunks(func(c *chunk) bool { return !c.overlaps(off, end) })
		r.stream = true
		r.start, r.pos, r.front = off, end, off
		r.next = r.opt.InitialChunk
		r.jumps = 0
	case randomRead:
		r.jumps++
		if !r.stream || r.jumps >= 2 {
			r.dropChunks(func(c *chunk) bool { return !c.overlaps(off, end) })
			r.dropFree()
			r.stream = false
		}
	}
	r.last = [2]int64{off, end}

	streaming := kind != randomRead
	if streaming {
		missed = r.extend(end, off, end)
	}
	held, created, ok := r.cover(off, end, streaming)
	r.take(off, end, kind != streamRead && !again)
	if streaming {
		ahead := min(r.budget, r.opt.InitialChunk+4*(r.pos-r.start))
		r.extend(r.pos+ahead, -1, -1)
	}
	return held, missed || created, ok
}

// take records that a read takes [off, end) and releases the chunks all of
// whose bytes reads have taken.
//
// The taken bytes keep the invariant that a sequential read of the object,
// whatever the order its reads arrive in within the kernel's read-ahead,
// fetches each byte at most once. Such a read takes each byte once, so:
//
//   - a chunk stays until reads have taken all of its bytes, however late
//     the last of them arrives: only making room evicts it sooner, and not
//     while a read of it may still be in flight (see evict);
//   - a fetch never asks for bytes a read has taken: read-ahead passes over
//     them (extend), and a fetch for a read stops at the next one (cover);
//   - making room never drops a chunk ahead of the stream position.
//
// A jump (newPass) to bytes taken before starts a new pass over them, and
// the taken bytes are forgotten; the previous read once more, as a shared
// read falling back to a copy is, is no jump. Requires r.mu.
func (r *Reader) take(off, end int64, newPass bool) {
	if newPass && r.taken.overlaps(off, end) {
		clear(r.taken)
		r.taken = r.taken[:0]
	}
	r.taken.add(off, end)
	if len(r.taken) > maxTaken {
		r.taken = slices.Delete(r.taken, 0, 1)
	}
	r.dropChunks(func(c *chunk) bool { return c.overlaps(off, end) && r.taken.covers(c.off, c.end()) })
}

// classify tells how a read at off relates to the reads before it.
// Requires r.mu.
func (r *Reader) classify(off int64) access {
	// Clients keep several sequential reads in flight (the kernel's
	// read-ahead, an NFS client's parallel READs), so reads arrive out of
	// order, up to a few chunks ahead of the stream position or as far
	// behind as the read-ahead window: still the stream, not a jump.
	if r.stream && off >= r.pos-max(r.slack, r.budget) && off <= max(r.pos+2*r.slack, r.front) {
		return streamRead
	}
	if off >= r.last[0] && off <= r.last[1]+randomRound {
		return newStream
	}
	return randomRead
}

// extend fetches stream chunks from the stream's front until it reaches
// limit, passing over bytes reads have taken. When [keepOff, keepEnd) is a
// read's range (keepOff >= 0), the read needs these chunks: the window does
// not limit them. Otherwise it is read-ahead, limited to Window chunks ahead
// of the stream position. It reports whether it started a fetch.
// Requires r.mu.
func (r *Reader) extend(limit, keepOff, keepEnd int64) (started bool) {
	limit = min(limit, r.size)
	demand := keepOff >= 0
	for r.front < limit {
		i := r.search(r.front)
		if i < len(r.chunks) && r.chunks[i].off <= r.front {
			r.front = r.chunks[i].end()
			continue
		}
		if skip := r.taken.skip(r.front); skip > r.front {
			r.front = skip // reads have taken these bytes
			continue
		}
		if !demand && r.ahead() >= r.opt.Window {
			return started
		}
		n := min(r.next, r.size-r.front, r.taken.from(r.front)-r.front)
		if i < len(r.chunks) {
			n = min(n, r.chunks[i].off-r.front)
		}
		c := r.startFetch(r.front, n, keepOff, keepEnd)
		if c == nil {
			return started
		}
		started = true
		r.front = c.end()
		r.next = min(2*r.next, r.opt.ChunkSize)
	}
	return started
}

// cover takes a reference on each chunk covering [off, end), starting
// fetches for the gaps: up to ChunkSize for a stream read, just the range
// rounded up to 128 KiB for a random read, and never past the read's end
// into bytes a read has taken. If a gap cannot be buffered it drops the
// references and returns !ok. Requires r.mu.
func (r *Reader) cover(off, end int64, streaming bool) (held []*chunk, created, ok bool) {
	for cur := off; cur < end; {
		i := r.search(cur)
		if i < len(r.chunks) && r.chunks[i].off <= cur {
			c := r.chunks[i]
			c.readers++
			held = append(held, c)
			cur = c.end()
			continue
		}
		gapEnd := r.size
		if i < len(r.chunks) {
			gapEnd = r.chunks[i].off
		}
		n := min(gapEnd-cur, r.opt.ChunkSize)
		if !streaming {
			n = min(n, roundUp(end-cur, randomRound))
		}
		n = min(n, r.taken.from(end)-cur)
		c := r.startFetch(cur, n, off, end)
		if c == nil {
			r.unholdLocked(held)
			return nil, created, false
		}
		created = true
		c.readers++
		held = append(held, c)
		cur = c.end()
	}
	return held, created, true
}

// ahead counts the chunks that end after the stream position. Requires r.mu.
func (r *Reader) ahead() int {
	n := 0
	for _, c := range r.chunks {
		if c.end() > r.pos {
			n++
		}
	}
	return n
}

func roundUp(n, to int64) int64 {
	return (n + to - 1) / to * to
}
