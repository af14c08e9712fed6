package readahead

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the random read orders (0: from the clock)")

// memSource is a fake S3: one object version held in memory. The real S3
// adapter is tested against a real store elsewhere; these tests only care
// about the access pattern: how many ranged GETs, of which ranges, and how
// many at once. latency simulates the network round trip of each GET, and
// fail injects errors.
type memSource struct {
	data    []byte
	latency time.Duration
	fail    atomic.Pointer[func(off, end int64) error]

	mu          sync.Mutex
	calls       int
	inFlight    int
	maxInFlight int
	pastEnd     int    // calls that asked for bytes at or past the end
	fetched     []span // the bytes each call returned
}

var errInjected = errors.New("injected GET failure")

func (s *memSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	s.mu.Lock()
	s.calls++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	if end > int64(len(s.data)) || len(p) == 0 {
		s.pastEnd++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if s.latency > 0 {
		select {
		case <-time.After(s.latency):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if fail := s.fail.Load(); fail != nil {
		if err := (*fail)(off, end); err != nil {
			return 0, err
		}
	}
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(p, s.data[off:])
	s.mu.Lock()
	s.fetched = append(s.fetched, span{off, off + int64(n)})
	s.mu.Unlock()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// failCovering makes every GET that covers offset at fail.
func (s *memSource) failCovering(at int64) {
	f := func(off, end int64) error {
		if off <= at && at < end {
			return errInjected
		}
		return nil
	}
	s.fail.Store(&f)
}

func (s *memSource) heal() { s.fail.Store(nil) }

func (s *memSource) counts() (calls, inFlight, maxInFlight, pastEnd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.inFlight, s.maxInFlight, s.pastEnd
}

func (s *memSource) resetMaxInFlight() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxInFlight = s.inFlight
}

func newSource(size int64, latency time.Duration) *memSource {
	data := make([]byte, size)
	var seed [32]byte
	seed[0] = byte(size)
	rand.NewChaCha8(seed).Read(data)
	return &memSource{data: data, latency: latency}
}

// newReader returns a Reader of src that the test closes on cleanup,
// checking that its buffers are all given back and that no GET asked for
// bytes past the end.
func newReader(t testing.TB, src *memSource, opt Options) *Reader {
	t.Helper()
	r := New(src, int64(len(src.data)), opt)
	t.Cleanup(func() {
		r.Close()
		r.mu.Lock()
		mem := r.mem
		r.mu.Unlock()
		if mem != 0 {
			t.Errorf("after Close the reader still holds %d buffer bytes", mem)
		}
		if _, _, _, pastEnd := src.counts(); pastEnd != 0 {
			t.Errorf("%d GETs asked for bytes past the end of the object", pastEnd)
		}
	})
	return r
}

// checkMemory fails the test if r holds more than Window*ChunkSize bytes.
func checkMemory(t testing.TB, r *Reader) {
	t.Helper()
	r.mu.Lock()
	mem, budget := r.mem, r.budget
	r.mu.Unlock()
	if mem > budget {
		t.Fatalf("reader holds %d buffer bytes, more than its bound %d", mem, budget)
	}
}

// readSequentially reads the whole object with reads of readSize bytes.
func readSequentially(t testing.TB, r *Reader, size int64, readSize int) []byte {
	t.Helper()
	got := make([]byte, 0, size)
	buf := make([]byte, readSize)
	for off := int64(0); ; {
		n, err := r.ReadAt(context.Background(), buf, off)
		got = append(got, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			if off != size {
				t.Fatalf("io.EOF at %d, object size %d", off, size)
			}
			return got
		}
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
		if n != readSize {
			t.Fatalf("ReadAt(%d) = %d bytes and no error, want %d", off, n, readSize)
		}
	}
}

func TestSequentialReadReturnsExactBytesAndFetchesEachByteOnce(t *testing.T) {
	const size = 100 << 20
	src := newSource(size, 0)
	r := newReader(t, src, Options{})

	got := make([]byte, 0, size)
	buf := make([]byte, 128<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := r.ReadAt(context.Background(), buf, off)
		if err != nil && !(err == io.EOF && off+int64(n) == size) {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
		got = append(got, buf[:n]...)
		checkMemory(t, r)
	}
	if !bytes.Equal(got, src.data) {
		t.Fatal("bytes read differ from the object")
	}
	st := r.Stats()
	t.Logf("%+v", st)
	if st.BytesFetched > size+size/100 {
		t.Errorf("fetched %d bytes to read %d sequentially", st.BytesFetched, size)
	}
	if maxGETs := int64(size/DefaultChunkSize + 8); st.Fetches > maxGETs {
		t.Errorf("%d GETs, want at most %d", st.Fetches, maxGETs)
	}
	if st.Hits < 9*st.Misses {
		t.Errorf("hits %d, misses %d: read-ahead did not keep ahead", st.Hits, st.Misses)
	}
}

func TestSequentialReadKeepsSeveralFetchesInFlight(t *testing.T) {
	// Each GET takes 40 ms, far longer than the reader needs to consume a
	// chunk even on a loaded machine, so the window fills whenever the
	// read-ahead asks early enough. (With 5 ms GETs a busy CI machine's
	// reader fell behind the fetches and saw only 3 in flight.)
	const size = 24 << 20
	src := newSource(size, 40*time.Millisecond)
	opt := Options{ChunkSize: 1 << 20, Window: 8, InitialChunk: 256 << 10}
	r := newReader(t, src, opt)

	got := readSequentially(t, r, size, 128<<10)
	if !bytes.Equal(got, src.data) {
		t.Fatal("bytes read differ from the object")
	}
	_, _, maxInFlight, _ := src.counts()
	t.Logf("%+v, at most %d GETs in flight", r.Stats(), maxInFlight)
	if maxInFlight < 4 {
		t.Errorf("at most %d GETs in flight, want at least 4", maxInFlight)
	}
	if maxInFlight > opt.Window+1 {
		t.Errorf("%d GETs in flight, more than the window of %d", maxInFlight, opt.Window)
	}
}

func TestConcurrentOutOfOrderReadsReturnExactBytes(t *testing.T) {
	const (
		size      = 48<<20 + 12345
		block     = 128 << 10
		readers   = 8
		shuffleBy = 8 // blocks a read may arrive early or late by
	)
	nblocks := int((size + block - 1) / block)
	tests := []struct {
		name  string
		order func() []int
	}{
		{"in order from a shared queue", func() []int {
			order := make([]int, nblocks)
			for i := range order {
				order[i] = i
			}
			return order
		}},
		{"shuffled within small groups", func() []int {
			rng := rand.New(rand.NewPCG(1, 2))
			order := make([]int, nblocks)
			for i := range order {
				order[i] = i
			}
			for i := 0; i < nblocks; i += shuffleBy {
				group := order[i:min(i+shuffleBy, nblocks)]
				rng.Shuffle(len(group), func(a, b int) { group[a], group[b] = group[b], group[a] })
			}
			return order
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(size, time.Millisecond)
			r := newReader(t, src, Options{ChunkSize: 1 << 20, Window: 8})
			order := tt.order()
			got := make([]byte, nblocks*block) // the last read crosses the end
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, readers)
			for range readers {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(len(order)) {
							return
						}
						off := int64(order[i]) * block
						end := min(off+block, size)
						n, err := r.ReadAt(context.Background(), got[off:off+block:off+block], off)
						if n != int(end-off) || (err != nil && !(err == io.EOF && end == size)) {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("concurrent ReadAt: %v", err)
			}
			if !bytes.Equal(got[:size], src.data) {
				t.Fatal("bytes read differ from the object")
			}
			checkMemory(t, r)
			if st := r.Stats(); st.BytesFetched > size+size/10 {
				t.Errorf("fetched %d bytes to read %d: reordering broke the stream", st.BytesFetched, size)
			}
		})
	}
}

func TestRandomReadsDoNotStartReadAhead(t *testing.T) {
	const (
		size  = 100 << 20
		reads = 300
	)
	src := newSource(size, 0)
	r := newReader(t, src, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 4<<10)
	for range reads {
		off := rng.Int64N(size - int64(len(buf)))
		n, err := r.ReadAt(context.Background(), buf, off)
		if err != nil || n != len(buf) {
			t.Fatalf("ReadAt(%d) = %d, %v", off, n, err)
		}
		if !bytes.Equal(buf, src.data[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d) returned wrong bytes", off)
		}
	}
	st := r.Stats()
	t.Logf("%+v", st)
	if limit := int64(reads*randomRound + 4<<20); st.BytesFetched > limit {
		t.Errorf("random reads fetched %d bytes, want at most %d", st.BytesFetched, limit)
	}
	if st.Fetches > reads+4 {
		t.Errorf("%d GETs for %d random reads", st.Fetches, reads)
	}
	r.mu.Lock()
	mem := r.mem
	r.mu.Unlock()
	if mem > randomRound {
		t.Errorf("reader holds %d buffer bytes between random reads, want at most %d", mem, randomRound)
	}
}

func TestSequentialReadsAfterAJumpRestartReadAhead(t *testing.T) {
	const size = 96 << 20
	src := newSource(size, 2*time.Millisecond)
	r := newReader(t, src, Options{ChunkSize: 1 << 20, Window: 8})
	buf := make([]byte, 128<<10)
	read := func(off int64) {
		t.Helper()
		n, err := r.ReadAt(context.Background(), buf, off)
		if err != nil || !bytes.Equal(buf[:n], src.data[off:off+int64(len(buf))]) {
			t.Fatalf("ReadAt(%d) = %d, %v or wrong bytes", off, n, err)
		}
	}
	for off := int64(0); off < 4<<20; off += int64(len(buf)) {
		read(off)
	}
	// Two jumps: the stream is dropped and no read-ahead starts.
	read(70 << 20)
	read(40 << 20)
	before := r.Stats()
	if got := before.BytesFetched; got > 4<<20+8<<20+2*randomRound {
		t.Errorf("fetched %d bytes before the stream restarted", got)
	}
	src.resetMaxInFlight()
	for off := int64(40<<20) + int64(len(buf)); off < 72<<20; off += int64(len(buf)) {
		read(off)
	}
	after := r.Stats()
	if _, _, maxInFlight, _ := src.counts(); maxInFlight < 3 {
		t.Errorf("after the stream restarted at most %d GETs were in flight", maxInFlight)
	}
	if hits, misses := after.Hits-before.Hits, after.Misses-before.Misses; hits < 4*misses {
		t.Errorf("after the stream restarted: hits %d, misses %d", hits, misses)
	}
}

func TestReadsAtTheEndOfTheObject(t *testing.T) {
	opt := Options{ChunkSize: 256 << 10, Window: 4, InitialChunk: 64 << 10}
	for _, size := range []int64{1, 64<<10 - 1, 256<<10 - 1, 256<<10 + 1, 3*256<<10 + 12345} {
		t.Run(fmt.Sprintf("size %d", size), func(t *testing.T) {
			src := newSource(size, 0)

			r := newReader(t, src, opt)
			if got := readSequentially(t, r, size, 100_003); !bytes.Equal(got, src.data) {
				t.Fatalf("size %d: sequential read differs from the object", size)
			}

			cases := []struct {
				off    int64
				len    int
				wantN  int64
				wantIO error
			}{
				{size, 10, 0, io.EOF},
				{size + 1000, 10, 0, io.EOF},
				{max(size-10, 0), 100, min(10, size), io.EOF},
				{0, int(size), size, nil},
				{0, int(size) + 1, size, io.EOF},
				{size - 1, 1, 1, nil},
				{0, 0, 0, nil},
			}
			r = newReader(t, src, opt)
			for _, c := range cases {
				buf := make([]byte, c.len)
				n, err := r.ReadAt(context.Background(), buf, c.off)
				if int64(n) != c.wantN || err != c.wantIO {
					t.Errorf("size %d: ReadAt(len %d, off %d) = %d, %v; want %d, %v",
						size, c.len, c.off, n, err, c.wantN, c.wantIO)
					continue
				}
				if !bytes.Equal(buf[:n], src.data[min(c.off, size):min(c.off, size)+int64(n)]) {
					t.Errorf("size %d: ReadAt(len %d, off %d) returned wrong bytes", size, c.len, c.off)
				}
			}
			if _, err := r.ReadAt(context.Background(), make([]byte, 1), -1); err == nil {
				t.Error("ReadAt at a negative offset succeeded")
			}
		})
	}
}

func TestFetchErrorsReachTheReadThatNeedsTheChunkAndRetriesRefetch(t *testing.T) {
	const (
		size   = 16 << 20
		failAt = 5<<20 + 100
		block  = 128 << 10
	)
	tests := []struct {
		name  string
		start int64 // where reading starts: 0 streams; far from 0 is a random read
		first int64 // the first read that needs the failing GET
	}{
		{"in a read-ahead chunk", 0, 5 << 20},
		{"in a random read", failAt, failAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(size, time.Millisecond)
			src.failCovering(failAt)
			r := newReader(t, src, Options{ChunkSize: 1 << 20, Window: 4})
			buf := make([]byte, block)

			off := tt.start
			var err error
			for ; off < size; off += block {
				if _, err = r.ReadAt(context.Background(), buf, off); err != nil {
					break
				}
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("reading on from %d: got %v, want the injected error", tt.start, err)
			}
			if off != tt.first {
				t.Errorf("the error reached the read at %d, want the read at %d", off, tt.first)
			}

			// A retry refetches and fails again while the store fails.
			fetches := r.Stats().Fetches
			if _, err := r.ReadAt(context.Background(), buf, off); !errors.Is(err, errInjected) {
				t.Fatalf("retry while failing: got %v, want the injected error", err)
			}
			if r.Stats().Fetches == fetches {
				t.Error("the retry did not fetch again")
			}

			// Once the store recovers, the retry succeeds and reading goes on.
			src.heal()
			for ; off < size; off += block {
				n, err := r.ReadAt(context.Background(), buf, off)
				if err != nil && err != io.EOF {
					t.Fatalf("ReadAt(%d) after recovery: %v", off, err)
				}
				if !bytes.Equal(buf[:n], src.data[off:off+int64(n)]) {
					t.Fatalf("ReadAt(%d) after recovery returned wrong bytes", off)
				}
			}
			if st := r.Stats(); st.FetchErrors < 2 {
				t.Errorf("FetchErrors = %d, want at least 2", st.FetchErrors)
			}
		})
	}
}

func TestCloseWithFetchesInFlightLeaksNoGoroutines(t *testing.T) {
	baseline := runtime.NumGoroutine()
	src := newSource(64<<20, time.Hour) // fetches end only when cancelled
	r := New(src, int64(len(src.data)), Options{ChunkSize: 1 << 20})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.ReadAt(ctx, make([]byte, 4<<20), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadAt with a short deadline: got %v, want deadline exceeded", err)
	}
	if _, inFlight, _, _ := src.counts(); inFlight < 2 {
		t.Fatalf("%d GETs in flight before Close, want several", inFlight)
	}

	r.Close()
	if _, inFlight, _, _ := src.counts(); inFlight != 0 {
		t.Errorf("%d GETs still in flight after Close returned", inFlight)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := r.ReadAt(context.Background(), make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close: got %v, want ErrClosed", err)
	}
	r.Close() // a second Close is harmless
}

func TestCloseUnblocksAWaitingRead(t *testing.T) {
	src := newSource(16<<20, time.Hour)
	r := New(src, int64(len(src.data)), Options{ChunkSize: 1 << 20})
	errc := make(chan error, 1)
	go func() {
		_, err := r.ReadAt(context.Background(), make([]byte, 4096), 0)
		errc <- err
	}()
	for {
		if _, inFlight, _, _ := src.counts(); inFlight > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("waiting ReadAt: got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting on a fetch did not return after Close")
	}
}

func TestZeroOptionsTakeTheDefaults(t *testing.T) {
	got := Options{}.withDefaults()
	want := Options{ChunkSize: DefaultChunkSize, Window: DefaultWindow, InitialChunk: DefaultInitialChunk}
	if got != want {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if got := (Options{ChunkSize: 64 << 10}).withDefaults(); got.InitialChunk != 64<<10 {
		t.Errorf("InitialChunk %d exceeds ChunkSize %d", got.InitialChunk, got.ChunkSize)
	}
}

// BenchmarkSequentialRead256MiB reads a 256 MiB object from a store that
// takes 2 ms per GET, in 1 MiB reads like the kernel's.
func BenchmarkSequentialRead256MiB(b *testing.B) {
	const size = 256 << 20
	src := newSource(size, 2*time.Millisecond)
	buf := make([]byte, 1<<20)
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		r := New(src, size, Options{})
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := r.ReadAt(context.Background(), buf, off); err != nil && err != io.EOF {
				b.Fatal(err)
			}
		}
		r.Close()
	}
}

// An NFS client keeps many READs of one sequential stream in flight; they
// reach the server out of order, several blocks ahead of the stream's
// position. Such reads must not count as jumps (two jumps drop the stream
// and what it fetched, which is then fetched again).
func TestReadsSeveralBlocksAheadStayInTheStream(t *testing.T) {
	const size, block = 128 << 20, 1 << 20
	src := newSource(size, 0)
	r := newReader(t, src, Options{})
	got := make([]byte, size)
	read := func(off int64) {
		t.Helper()
		if _, err := r.ReadAt(context.Background(), got[off:off+block], off); err != nil {
			t.Fatal(err)
		}
	}
	for off := int64(0); off < 8*block; off += block {
		read(off)
	}
	// Two reads that overtook the ones before them.
	read(20 * block)
	read(21 * block)
	for off := int64(8 * block); off < size; off += block {
		if off != 20*block && off != 21*block {
			read(off)
		}
	}
	if !bytes.Equal(got, src.data) {
		t.Fatal("bytes differ")
	}
	if f := r.Stats().BytesFetched; f > size*11/10 {
		t.Fatalf("fetched %d bytes to read %d: the stream was dropped and refetched", f, size)
	}
}

func TestSharedReadsReturnExactBytesAndKeepHeldBuffersUntilReleased(t *testing.T) {
	const size = 24 << 20
	src := newSource(size, 0)
	r := newReader(t, src, Options{ChunkSize: 1 << 20, Window: 4})
	ctx := context.Background()
	concat := func(bufs [][]byte) []byte { return bytes.Join(bufs, nil) }

	// Reads of 768 KiB straddle the 1 MiB chunk boundaries.
	const readSize = 768 << 10
	first, releaseFirst, ok, err := r.ReadShared(ctx, 0, readSize)
	if err != nil || !ok {
		t.Fatalf("ReadShared(0) = ok %v, %v", ok, err)
	}
	want := bytes.Clone(src.data[:readSize])
	for off := int64(readSize); off+readSize <= size; off += readSize {
		bufs, release, ok, err := r.ReadShared(ctx, off, readSize)
		if err != nil || !ok {
			t.Fatalf("ReadShared(%d) = ok %v, %v", off, ok, err)
		}
		if got := concat(bufs); !bytes.Equal(got, src.data[off:off+readSize]) {
			t.Fatalf("ReadShared(%d): wrong bytes", off)
		}
		release()
		release() // a second release is harmless
		checkMemory(t, r)
	}
	// The stream has moved 23 MiB past the first read, far beyond the
	// window, so its chunk was trimmed; the bytes still held must not
	// have been reused for later chunks.
	if !bytes.Equal(concat(first), want) {
		t.Fatal("a buffer held by an unreleased shared read was reused")
	}
	releaseFirst()

	if _, _, _, err := r.ReadShared(ctx, size-10, 11); err == nil {
		t.Fatal("ReadShared past the end of the object succeeded")
	}
}

func TestASharedReadHeldAcrossCloseIsReleasedAfterwards(t *testing.T) {
	src := newSource(4<<20, 0)
	r := newReader(t, src, Options{ChunkSize: 1 << 20})
	bufs, release, ok, err := r.ReadShared(context.Background(), 1<<20, 1<<20)
	if err != nil || !ok {
		t.Fatalf("ReadShared = ok %v, %v", ok, err)
	}
	r.Close()
	if !bytes.Equal(bytes.Join(bufs, nil), src.data[1<<20:2<<20]) {
		t.Fatal("Close changed the bytes of a shared read still held")
	}
	release() // newReader's cleanup checks that every buffer byte came back
}

// The kernel reads a file through a FUSE mount in 1 MiB requests, many in
// flight, which reach the server in any order: its first reads overtake each
// other, and a request of one read-ahead window may arrive after all those of
// the next, some 30 MiB late (seen in the benchmark suite's cold read). The
// Reader's invariant holds whatever the order: a sequential read fetches each
// byte at most once. Before it held, a late read whose chunk had been
// released made room by dropping the read-ahead, and from there on each
// fetch dropped the next ones: the cold read fetched most bytes twice.
func TestASequentialReadFetchesEachByteOnceWhateverOrderItsReadsArriveIn(t *testing.T) {
	const (
		size   = 160 << 20
		block  = 1 << 20
		blocks = size / block
		window = 16 // blocks in the kernel's read-ahead window
	)
	inOrder := func() []int64 {
		order := make([]int64, blocks)
		for i := range order {
			order[i] = int64(i)
		}
		return order
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-seed to repeat)", seed)
	tests := []struct {
		name  string
		order func() []int64
	}{
		{"in order", inOrder},
		{"the first reads out of order", func() []int64 {
			order := inOrder()
			copy(order, []int64{1, 0, 3, 4, 2})
			return order
		}},
		{"four reads 32 MiB late", func() []int64 {
			return late(inOrder(), []int64{64, 65, 66, 67}, 32)
		}},
		{"reads of three chunks 30 MiB late", func() []int64 {
			return late(inOrder(), []int64{50, 58, 60, 66}, 30)
		}},
		{"shuffled within each read-ahead window", func() []int64 {
			rng := rand.New(rand.NewPCG(seed, 5))
			order := inOrder()
			for i := 0; i < len(order); i += window {
				w := order[i:min(i+window, len(order))]
				rng.Shuffle(len(w), func(a, b int) { w[a], w[b] = w[b], w[a] })
			}
			return order
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(size, 0)
			r := newReader(t, src, Options{})
			ctx := context.Background()
			buf := make([]byte, block)
			for _, i := range tt.order() {
				off := i * block
				// As the FUSE front end reads: shared, else copied.
				bufs, release, ok, err := r.ReadShared(ctx, off, block)
				if err == nil && ok {
					buf = bytes.Join(bufs, nil)
					release()
				} else if err == nil {
					_, err = r.ReadAt(ctx, buf, off)
				}
				if err != nil {
					t.Fatalf("read at %d: %v", off, err)
				}
				if !bytes.Equal(buf, src.data[off:off+block]) {
					t.Fatalf("read at %d returned wrong bytes", off)
				}
				checkMemory(t, r)
				// The next read comes once every fetch has landed, so
				// that what is fetched does not depend on timing.
				waitFetched(t, r, src)
			}
			src.mu.Lock()
			twice, first := overlap(src.fetched)
			src.mu.Unlock()
			t.Logf("%+v", r.Stats())
			if twice > 0 {
				t.Errorf("fetched %d bytes more than once, the first at %d", twice, first)
			}
		})
	}
}

// late moves each read of blocks in order to just after the read by blocks
// further on.
func late(order, blocks []int64, by int64) []int64 {
	var moved []int64
	for _, i := range order {
		if !slices.Contains(blocks, i) {
			moved = append(moved, i)
		}
		for _, b := range blocks {
			if i == b+by {
				moved = append(moved, b)
			}
		}
	}
	return moved
}

// overlap returns how many bytes the ranges cover more than once, and the
// first such byte.
func overlap(ranges []span) (twice, first int64) {
	ranges = slices.Clone(ranges)
	slices.SortFunc(ranges, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	first = -1
	var reach int64 // the highest end so far
	for _, s := range ranges {
		if n := min(s.end, reach) - s.off; n > 0 {
			twice += n
			if first < 0 {
				first = s.off
			}
		}
		reach = max(reach, s.end)
	}
	return twice, first
}

// waitFetched waits until no fetch of r is in flight.
func waitFetched(t testing.TB, r *Reader, src *memSource) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		busy := slices.ContainsFunc(r.chunks, func(c *chunk) bool { return c.fetching })
		r.mu.Unlock()
		if _, inFlight, _, _ := src.counts(); !busy && inFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("fetches still in flight after 10 s")
		}
		runtime.Gosched()
	}
}
