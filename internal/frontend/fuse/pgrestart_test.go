package fuse_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bucketfs/internal/pgtest"
)

// pgOpDeadline bounds one file operation while the database restarts: an
// operation is retried while the database is away and answers (or fails
// with EIO) once it is back or the operation timeout has passed; it never
// hangs.
const pgOpDeadline = 60 * time.Second

// Issue 23, point 5: two servers on PostgreSQL carry on when the database
// restarts under load. Writers through both mounts write, fsync and close
// files while PostgreSQL is restarted (fast shutdown: every connection is
// closed) and killed (a crash: recovery at the next start). Every
// operation returns within pgOpDeadline (an error while the database is
// away is allowed, a hang is not); every file whose write, fsync and close
// succeeded reads back whole through both mounts afterwards; and both
// mounts serve new writes afterwards. A hung operation fails the test with
// the stacks of every goroutine (the engines run in this process).
func TestTwoServersOnPostgreSQLCarryOnAfterTheDatabaseRestarts(t *testing.T) {
	pg := pgtest.Start(t)
	a, b, _, _, _ := postgresMountsOn(t, pg)

	var (
		mu    sync.Mutex
		acked = map[string][]byte{} // name -> content, for writes that succeeded
		stop  atomic.Bool
		wg    sync.WaitGroup
		busy  sync.Map // worker -> op start time, while an op is under way
	)
	writer := func(id int, mnt string) {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("w%d-%d", id, i)
			data := bytes.Repeat([]byte(name+"|"), 1+i%3000)
			busy.Store(id, time.Now())
			err := writeSync(filepath.Join(mnt, name), data)
			busy.Delete(id)
			if err == nil {
				mu.Lock()
				acked[name] = data
				mu.Unlock()
			}
		}
	}
	watch := func(what string) {
		// Fails the test when an operation has been under way for longer
		// than the deadline.
		t.Helper()
		busy.Range(func(k, v any) bool {
			if since := time.Since(v.(time.Time)); since > pgOpDeadline {
				buf := make([]byte, 1<<22)
				n := runtime.Stack(buf, true)
				t.Fatalf("%s: worker %v's operation has hung for %v; goroutines:\n%s", what, k, since, buf[:n])
			}
			return true
		})
	}
	for id, mnt := range []string{a, b, a, b} {
		wg.Add(1)
		go writer(id, mnt)
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(2 * pgOpDeadline)
		for !cond() {
			watch(what)
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	for _, how := range []string{"restart", "kill"} {
		n := ackedCount()
		waitFor("writes before the "+how, func() bool { return ackedCount() >= n+20 })
		if how == "restart" {
			pg.Restart()
		} else {
			pg.Kill()
			pg.Start()
		}
		n = ackedCount()
		waitFor("writes after the "+how, func() bool { return ackedCount() >= n+20 })
	}
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(100 * time.Millisecond):
			watch("the writers' last operations")
		}
	}

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d files acknowledged", len(acked))
	bad := 0
	for name, want := range acked {
		for _, mnt := range []string{a, b} {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil || !bytes.Equal(got, want) {
				bad++
				t.Errorf("%s through %s after the restarts: %d bytes, %v; want the %d acknowledged", name, mnt, len(got), err, len(want))
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d reads of acknowledged files were wrong", bad, 2*len(acked))
	}
}

// writeSync writes data to a new file at path, fsyncs and closes it: the
// file is acknowledged only when all three succeed.
func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
