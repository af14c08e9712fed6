package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// clearFailure reports whether err is a failure issue 23 allows while the
// database is away: EIO (NFS4ERR_IO through NFS), or NFS4ERR_DELAY, which
// asks the client to try again. Anything else is a wrong answer, and a
// call that did not return is a hang.
func clearFailure(err error) bool {
	var errno syscall.Errno
	return !errors.Is(err, errHung) && errors.As(err, &errno) && (errno == syscall.EIO || errno == syscall.EBUSY)
}

// worker is a writer or a streamer, as the restart test watches them.
type worker interface {
	progress() int // acknowledgements so far
	busyFor() time.Duration
	failures() []writeFailure
	label() string
}

func (w *writer) progress() int   { return len(w.acknowledged()) }
func (w *writer) label() string   { return "files through " + w.fs.name() }
func (s *streamer) label() string { return s.path + " through " + s.fs.name() }

// lastFailure is the worker's last failure, if any.
func lastFailure(w worker) error {
	if fs := w.failures(); len(fs) > 0 {
		return fs[len(fs)-1].err
	}
	return nil
}

// PostgreSQL restarted under load (issue 23, point 5): while new files
// are written through all three servers, and one file per server is kept
// open and written and synced (NFS COMMIT, fsync) chunk after chunk, the
// database goes away and comes back, and a flush is asked for while it is
// away. It goes away twice, in two subtests: a restart (a fast shutdown,
// down for a second) and a crash (kill -9 of all its processes, down for
// three seconds, then crash recovery). Every operation returns within
// opDeadline, never hangs, and a failure is a clear EIO (or an NFS DELAY,
// which asks for a retry), never a wrong answer; an operation begun while
// the database was down was safe to retry and must have waited for it.
// Afterwards every file and chunk acknowledged as durable reads back whole
// through every server and reaches the bucket, the three servers show one
// tree, and each serves new writes. A hang fails the test with the
// servers' goroutines.
func TestClusterSurvivesAPostgreSQLRestartUnderLoad(t *testing.T) {
	t.Run("restart", func(t *testing.T) { restartUnderLoad(t, false, time.Second) })
	t.Run("crash", func(t *testing.T) { restartUnderLoad(t, true, 3*time.Second) })
}

// restartUnderLoad is one run of TestClusterSurvivesAPostgreSQLRestartUnderLoad:
// the database stopped (crash: killed) and started again outage later.
func restartUnderLoad(t *testing.T, crash bool, outage time.Duration) {
	c := startCluster(t, clusterOptions{exportDelay: 100 * time.Millisecond})
	fss := c.clients()
	ctx := context.Background()
	var writers []*writer
	var streamers []*streamer
	var workers []worker
	for i, fs := range fss {
		dir := "w" + fs.name()
		if err := fs.mkdir(ctx, dir, 0o755); err != nil {
			t.Fatalf("mkdir %s through %s: %v", dir, fs.name(), err)
		}
		w := newWriter(fs, dir, uint64(10+i))
		p := "s" + fs.name()
		st, err := fs.create(ctx, p)
		if err != nil {
			t.Fatalf("create %s through %s: %v", p, fs.name(), err)
		}
		s := &streamer{fs: fs, path: p, st: st}
		writers, streamers, workers = append(writers, w), append(streamers, s), append(workers, w, s)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			writers[i].run(stop, 512<<10, 20*time.Millisecond, true)
		}()
		go func() {
			defer wg.Done()
			streamers[i].run(stop)
		}()
	}
	workersStopped := false
	stopWorkers := func() {
		if !workersStopped {
			workersStopped = true
			close(stop)
			wg.Wait()
		}
	}
	// A hung worker is left behind at the end, not waited for.
	t.Cleanup(func() {
		if !workersStopped {
			close(stop)
		}
	})
	// progress waits until every worker has n more acknowledgements,
	// failing with the servers' goroutines if a call hangs.
	progress := func(what string, n int) {
		t.Helper()
		var base []int
		for _, w := range workers {
			base = append(base, w.progress())
		}
		deadline := time.Now().Add(2 * opDeadline)
		for {
			if time.Now().After(deadline) {
				var got []string
				for i, w := range workers {
					got = append(got, fmt.Sprintf("%s: %d (last failure: %v)", w.label(), w.progress()-base[i], lastFailure(w)))
				}
				t.Fatalf("%s: not every worker made %d acknowledged writes within %v:\n%s\n%s", what, n, 2*opDeadline,
					strings.Join(got, "\n"), c.hangReport())
			}
			done := true
			for i, w := range workers {
				if w.progress() < base[i]+n {
					done = false
				}
				if d := w.busyFor(); d > opDeadline {
					t.Fatalf("%s: a call writing %s has not returned after %v (hung)\n%s", what, w.label(), d.Round(time.Second), c.hangReport())
				}
			}
			if done {
				return
			}
			time.Sleep(50 * time.Millisecond) // polling the workers
		}
	}
	progress("before the restart", 5)
	// The database goes away: a fast shutdown (its sessions end, what was
	// committed stays) or a crash (what was committed but not flushed to
	// its log is lost), then a start on the same port.
	restart := time.Now()
	if crash {
		c.pg.Kill()
	} else {
		c.pg.Stop()
	}
	stopped := time.Now()
	type flushResult struct {
		err  error
		took time.Duration
	}
	// The flush's own timeout is long: the test judges its time.
	flushed := make(chan flushResult, 1)
	go func() {
		err := c.nfsB().flush(5 * opDeadline)
		flushed <- flushResult{err, time.Since(stopped)}
	}()
	time.Sleep(outage) // the length of the fault, not a synchronisation
	c.pg.Start()
	t.Logf("PostgreSQL stopped (crash: %v) at %s in %v, down for %v, started in %v", crash, restart.Format("15:04:05.000"),
		stopped.Sub(restart).Round(time.Millisecond), outage, time.Since(stopped.Add(outage)).Round(time.Millisecond))
	progress("after the restart", 10)
	t.Logf("every worker made 10 more acknowledged writes %v after the restart began", time.Since(restart).Round(time.Millisecond))
	// The workers stop before the flush is waited for: a flush waits for
	// the export queue to empty, which files written on and on keep full.
	stopWorkers()
	select {
	case r := <-flushed:
		t.Logf("the flush asked for while the database was down returned after %v: %v", r.took.Round(time.Millisecond), r.err)
	case <-time.After(opDeadline - time.Since(stopped)):
		t.Fatalf("the flush asked for while the database was down has not returned after %v (hung)\n%s", opDeadline, c.hangReport())
	}
	all := map[string][]byte{}
	for _, s := range streamers {
		n, err := s.finish()
		if err != nil {
			t.Fatalf("%s: the last writes and sync after the restart: %v", s.label(), err)
		}
		var want []byte
		for i := range n {
			want = append(want, chunkOf(s.path, i)...)
		}
		all[s.path] = want
	}
	t.Logf("the streams were synced and closed %v after the restart began", time.Since(restart).Round(time.Millisecond))

	// A call begun while the database was down had sent nothing that
	// could commit: it is safe to retry, and must wait for the database
	// (down for far less than any operation timeout) and succeed. One
	// begun before the shutdown (or crash) ended may have had its COMMIT
	// cut off, an unknown outcome: a clear EIO is its answer.
	unretried := 0
	for _, w := range workers {
		for _, f := range w.failures() {
			switch {
			case !clearFailure(f.err):
				t.Errorf("a write failed otherwise than with EIO: %v", f.err)
			case !f.began.Before(stopped):
				unretried++
				if unretried <= 5 {
					t.Errorf("a call begun while the database was down failed instead of waiting for it: %v", f.err)
				}
			default:
				t.Logf("a call under way at the shutdown failed clearly: %v", f.err)
			}
		}
	}
	for _, w := range writers {
		for p, b := range w.acknowledged() {
			all[p] = b
		}
	}
	if unretried > 5 {
		t.Errorf("and %d more calls begun while the database was down failed", unretried-5)
	}

	// Every acknowledged file reads back whole through every server, and
	// the three show one tree.
	var trees []map[string][]byte
	for _, fs := range fss {
		for p, want := range all {
			got, err := bounded(opDeadline, func(ctx context.Context) ([]byte, error) { return fs.readFile(ctx, p) })
			if errors.Is(err, errHung) {
				t.Fatalf("read %s through %s: %v\n%s", p, fs.name(), err, c.hangReport())
			}
			if err != nil || !bytes.Equal(got, want) {
				span := "a stream's chunks"
				for _, w := range writers {
					if strings.HasPrefix(p, w.dir+"/") {
						span = w.span(p)
					}
				}
				at := firstDiff(got, want)
				t.Fatalf("%s (%s) through %s after the restart: %d bytes, %v; want the %d acknowledged; they differ from byte %d (chunk %d of a stream), which holds %q",
					p, span, fs.name(), len(got), err, len(want), at, at/streamChunk, got[at:min(len(got), at+48)])
			}
		}
		type tree struct{ datas map[string][]byte }
		tr, err := bounded(opDeadline, func(ctx context.Context) (tree, error) {
			_, datas, err := walk(ctx, fs)
			return tree{datas}, err
		})
		if errors.Is(err, errHung) {
			t.Fatalf("walk through %s: %v\n%s", fs.name(), err, c.hangReport())
		}
		if err != nil {
			t.Fatalf("walk through %s: %v", fs.name(), err)
		}
		trees = append(trees, tr.datas)
	}
	for i := 1; i < len(trees); i++ {
		for p, b := range trees[0] {
			if o, ok := trees[i][p]; !ok || !bytes.Equal(o, b) {
				t.Errorf("%s: %d bytes through %s, %d (present %v) through %s", p, len(b), fss[0].name(), len(o), ok, fss[i].name())
			}
		}
		if len(trees[i]) != len(trees[0]) {
			t.Errorf("%d files through %s, %d through %s", len(trees[0]), fss[0].name(), len(trees[i]), fss[i].name())
		}
	}

	t.Logf("every acknowledged file read back and the trees compared %v after the restart began", time.Since(restart).Round(time.Millisecond))

	// Each server serves new writes again, read back through the others.
	for i, fs := range fss {
		p := fmt.Sprintf("after-%s", fs.name())
		data := []byte("written after the restart through " + fs.name())
		if _, err := bounded(opDeadline, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, fs.writeFile(ctx, p, data, true)
		}); err != nil {
			t.Fatalf("write %s through %s after the restart: %v\n%s", p, fs.name(), err, c.hangReport())
		}
		all[p] = data
		other := fss[(i+1)%len(fss)]
		got, err := bounded(opDeadline, func(ctx context.Context) ([]byte, error) { return other.readFile(ctx, p) })
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s through %s: %q, %v", p, other.name(), got, err)
		}
	}

	// And everything reaches the bucket.
	flushStart := time.Now()
	go func() {
		err := c.nfsB().flush(5 * opDeadline)
		flushed <- flushResult{err, time.Since(flushStart)}
	}()
	select {
	case r := <-flushed:
		if r.err != nil {
			t.Fatalf("flush through nfs-b after the restart: %v", r.err)
		}
	case <-time.After(opDeadline):
		t.Fatalf("flush through nfs-b after the restart has not returned after %v (hung)\n%s", opDeadline, c.hangReport())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		bodies, _, err := c.bucketObjects(ctx)
		if err != nil {
			t.Fatal(err)
		}
		diff := ""
		for p, want := range all {
			if b, ok := bodies[p]; !ok || !bytes.Equal(b, want) {
				diff = fmt.Sprintf("%s: %d bytes in the bucket (present %v), want %d", p, len(b), ok, len(want))
				break
			}
		}
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the flush the bucket still lacks acknowledged files: %s", diff)
		}
		time.Sleep(100 * time.Millisecond) // polling the bucket
	}
	t.Logf("%d acknowledged files are intact through every server and in the bucket", len(all))
}
