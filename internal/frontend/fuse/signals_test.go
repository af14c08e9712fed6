package fuse_test

// Signals and FUSE requests. The kernel tells the server of every signal
// that reaches a thread waiting in a request (FUSE_INTERRUPT), caught or
// fatal alike. A local file system never fails stat, open or readdir with
// EINTR because a handler ran, and bucketfs must not either; but a process
// being killed must not wait for a store that does not answer.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/s3test"
)

// killPoll bounds how long the server takes to notice a kill that sent no
// interrupt (internal/frontend/fuse.killPoll).
const killPoll = 20 * time.Millisecond

// TestACaughtSignalNeverFailsACallWithEINTR runs lookups, opens, reads,
// directory reads and getxattr with raw system calls (no EINTR retry) on
// a thread that another goroutine keeps sending SIGUSR1, which the
// process catches. Not one call may fail with EINTR.
func TestACaughtSignalNeverFailsACallWithEINTR(t *testing.T) {
	e := newEnv(t)
	const files = 50
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		writeFile(t, e.path(fmt.Sprintf("d/f%02d", i)), []byte(strings.Repeat("x", 100+i)))
	}
	e.put("d/imported", []byte("from the bucket"), nil)

	caught := make(chan os.Signal, 1024)
	signal.Notify(caught, syscall.SIGUSR1)
	t.Cleanup(func() { signal.Stop(caught) })
	go func() {
		for range caught {
		}
	}()

	tid := make(chan int)
	var stop atomic.Bool
	var sent atomic.Int64
	type result struct {
		calls int
		eintr []string
		other []string
	}
	res := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- syscall.Gettid()
		var r result
		check := func(what string, err error) {
			r.calls++
			switch {
			case errors.Is(err, syscall.EINTR):
				r.eintr = append(r.eintr, what)
			case err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENODATA):
				r.other = append(r.other, fmt.Sprintf("%s: %v", what, err))
			}
		}
		buf := make([]byte, 4096)
		var st syscall.Stat_t
		for i := 0; !stop.Load(); i++ {
			// A name that does not exist is looked up by the server every
			// time; existing names only until the kernel caches them.
			check("stat missing", syscall.Stat(e.path(fmt.Sprintf("d/missing%d", i)), &st))
			name := e.path(fmt.Sprintf("d/f%02d", i%files))
			check("stat", syscall.Stat(name, &st))
			_, err := syscall.Getxattr(name, "user.none", buf)
			check("getxattr", err)
			for _, n := range []string{name, e.path("d/imported")} {
				fd, err := syscall.Open(n, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
				check("open", err)
				if err == nil {
					_, err = syscall.Read(fd, buf)
					check("read", err)
					syscall.Close(fd)
				}
			}
			fd, err := syscall.Open(e.path("d"), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
			check("open dir", err)
			if err == nil {
				_, err = syscall.ReadDirent(fd, buf)
				check("getdents", err)
				syscall.Close(fd)
			}
		}
		res <- r
	}()
	id := <-tid
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Tgkill(os.Getpid(), id, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		sent.Add(1)
		runtime.Gosched()
	}
	stop.Store(true)
	r := <-res
	t.Logf("%d calls, %d signals sent to the calling thread", r.calls, sent.Load())
	if len(r.other) > 0 {
		t.Errorf("%d calls failed: %v", len(r.other), r.other[:min(5, len(r.other))])
	}
	if len(r.eintr) > 0 {
		t.Fatalf("%d of %d calls failed with EINTR, first: %v", len(r.eintr), r.calls, r.eintr[:min(5, len(r.eintr))])
	}
}

// catchingReaderEnv makes the test binary a reader that catches SIGUSR1:
// it reads the file the variable names with raw system calls and exits.
const catchingReaderEnv = "BUCKETFS_TEST_CATCHING_READER"

func catchingReader(path string) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGUSR1)
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err == nil {
		_, err = syscall.Read(fd, make([]byte, 4096))
	}
	fmt.Println(err)
	os.Exit(0)
}

// waitingThread returns the thread of process pid that waits in a FUSE
// request, or 0.
func waitingThread(pid int) int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", fmt.Sprint(pid), "task", "*"))
	for _, task := range tasks {
		b, _ := os.ReadFile(filepath.Join(task, "wchan"))
		if strings.Contains(string(b), "request_wait_answer") {
			tid, _ := strconv.Atoi(filepath.Base(task))
			return tid
		}
	}
	return 0
}

// TestAKilledReaderOfAStoreThatDoesNotAnswerExitsAtOnce: a process blocked
// in a read that waits for the store is killed (SIGKILL, and SIGTERM with
// its default action), and exits well before the operation timeout. So
// does one whose request a caught signal interrupted first: the kernel
// interrupts a request only once, and the kill that follows tells the
// server nothing.
func TestAKilledReaderOfAStoreThatDoesNotAnswerExitsAtOnce(t *testing.T) {
	const opTimeout = 2 * time.Minute
	p := newStoreProxy(t, s3test.Store(t).Endpoint)
	e := newEnv(t, withEndpoint(p.url), withOpTimeout(opTimeout))
	for _, tc := range []struct {
		sig       syscall.Signal
		caughtOne bool
	}{{syscall.SIGKILL, false}, {syscall.SIGTERM, false}, {syscall.SIGKILL, true}} {
		sig := tc.sig
		name := strings.ReplaceAll(sig.String(), " ", "-")
		if tc.caughtOne {
			name = "after-a-caught-signal-" + name
		}
		t.Run(name, func(t *testing.T) {
			p.set(forward)
			key := "cold-" + name
			e.put(key, []byte("only in the bucket"), nil)
			if _, err := os.Stat(e.path(key)); err != nil {
				t.Fatal(err)
			}
			p.set(blackhole)
			cmd := exec.Command("cat", e.path(key))
			if tc.caughtOne {
				cmd = exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), catchingReaderEnv+"="+e.path(key))
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			var tid int
			eventually(t, "the reader waiting in a FUSE request", func() bool {
				tid = waitingThread(cmd.Process.Pid)
				return tid != 0
			})
			if tc.caughtOne {
				if err := syscall.Tgkill(cmd.Process.Pid, tid, syscall.SIGUSR1); err != nil {
					t.Fatal(err)
				}
				// The server learns of it, finds the caller alive, and
				// goes on waiting for the store.
				for range 10 {
					select {
					case err := <-waited:
						t.Fatalf("the reader exited after a signal it catches: %v", err)
					case <-time.After(killPoll):
					}
				}
				if waitingThread(cmd.Process.Pid) != tid {
					t.Fatal("the reader no longer waits in its FUSE request after a caught signal")
				}
			}
			start := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				t.Logf("the reader exited (%v) %v after the signal", err, time.Since(start))
			case <-time.After(20 * time.Second):
				p.set(reset)
				<-waited
				t.Fatalf("the reader killed with %v while waiting for the store still ran after 20 s", sig)
			}
		})
	}
}

// TestALockWaitEndsAtATimeoutSignal: flock -w sets a timer whose caught
// SIGALRM must end a lock wait with EINTR, as on a local file system.
func TestALockWaitEndsAtATimeoutSignal(t *testing.T) {
	e := newEnv(t)
	path := e.path("lockfile")
	writeFile(t, path, nil)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("flock", "-w", "0.5", path, "true")
	done := make(chan error, 1)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("flock -w 0.5 on a locked file: %v, want exit status 1 (timed out)", err)
		}
		t.Logf("flock -w 0.5 gave up after %v", time.Since(start))
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("flock -w 0.5 on a locked file still waited after 20 s")
	}
}
