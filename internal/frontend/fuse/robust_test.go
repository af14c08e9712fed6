package fuse_test

// Restarts and bad conditions on a real mount: inode numbers and pending
// exports across a restart, the state directory lock, the mount command's
// refusals, a store that goes away or throttles, a full tier, and unlink of
// an open file.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/engine"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
)

func statIno(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// writeFileSynced writes data to path and fsyncs it before closing.
func writeFileSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range ents {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

func TestARestartKeepsInodeNumbersDataAndPendingExports(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour))
	e.put("imported/a.txt", []byte("from the bucket"), nil)
	e.put("imported/sub/b.txt", []byte("deeper"), nil)
	// Exported now, then renamed and removed: the bucket side of both
	// waits for the delay.
	writeFile(t, e.path("to-rename"), []byte("moved"))
	writeFile(t, e.path("to-remove"), []byte("doomed"))
	e.flush()
	if err := os.Rename(e.path("to-rename"), e.path("renamed")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("to-remove")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.path("dir/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	synced := randomBytes(300 << 10)
	writeFileSynced(t, e.path("dir/sub/file"), synced)
	writeFile(t, e.path("top"), []byte("closed, not fsynced"))

	names := []string{"", "dir", "dir/sub", "dir/sub/file", "top", "renamed",
		"imported", "imported/a.txt", "imported/sub", "imported/sub/b.txt"}
	before := map[string]uint64{}
	for _, n := range names {
		before[n] = statIno(t, e.path(n))
	}
	if got := readFile(t, e.path("imported/a.txt")); string(got) != "from the bucket" {
		t.Fatalf("imported/a.txt = %q", got)
	}

	// With an hour's delay, nothing is due yet and nothing is exported.
	n, oldest, err := e.eng.Meta.QueueStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 || time.Until(oldest) < 30*time.Minute {
		t.Fatalf("export queue holds %d inodes, oldest due in %v; want the new files queued for an hour", n, time.Until(oldest))
	}
	unexported := func(when string) {
		t.Helper()
		for _, k := range []string{"dir/sub/file", "top", "renamed"} {
			if _, _, ok := e.get(k); ok {
				t.Fatalf("%s was exported %s", k, when)
			}
		}
		for _, k := range []string{"to-rename", "to-remove"} {
			if _, _, ok := e.get(k); !ok {
				t.Fatalf("%s was deleted %s", k, when)
			}
		}
	}
	unexported("before its export delay")
	e.stop()
	unexported("by stopping the engine")

	// Restart with a short delay: the queue survived, and the new delay
	// applies to it.
	e.cfg.ExportDelay = 100 * time.Millisecond
	e.start()
	for _, n := range names {
		if got := statIno(t, e.path(n)); got != before[n] {
			t.Errorf("/%s: inode %d after restart, was %d", n, got, before[n])
		}
	}
	if got := readFile(t, e.path("dir/sub/file")); !bytes.Equal(got, synced) {
		t.Fatal("fsynced data differs after restart")
	}
	if got := readFile(t, e.path("top")); string(got) != "closed, not fsynced" {
		t.Fatalf("top = %q after a clean restart", got)
	}
	if got := readFile(t, e.path("imported/sub/b.txt")); string(got) != "deeper" {
		t.Fatalf("imported/sub/b.txt = %q after restart", got)
	}
	// New inodes do not reuse numbers.
	writeFile(t, e.path("after-restart"), nil)
	fresh := statIno(t, e.path("after-restart"))
	for n, ino := range before {
		if fresh == ino {
			t.Fatalf("a file made after the restart got inode %d of /%s", fresh, n)
		}
	}
	eventually(t, "export of the changes queued before the restart", func() bool {
		b1, _, ok1 := e.get("dir/sub/file")
		b2, _, ok2 := e.get("top")
		b3, _, ok3 := e.get("renamed")
		_, _, old := e.get("to-rename")
		_, _, gone := e.get("to-remove")
		return ok1 && ok2 && ok3 && !old && !gone &&
			bytes.Equal(b1, synced) && string(b2) == "closed, not fsynced" && string(b3) == "moved"
	})
}

func TestASecondEngineOnAStateDirectoryInUseNamesTheHolder(t *testing.T) {
	e := newEnv(t)
	eng, err := engine.Open(context.Background(), e.cfg)
	if err == nil {
		eng.Close()
		t.Fatal("a second engine opened a state directory that is in use")
	}
	if want := fmt.Sprintf("in use by process %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("second open: %q, want it to say %q", err, want)
	}
	// The refused open harmed neither the running file system nor the lock.
	writeFile(t, e.path("still-works"), []byte("yes"))
	if got := readFile(t, e.path("still-works")); string(got) != "yes" {
		t.Fatalf("still-works = %q", got)
	}
	e.stop()
	e.start()
	if got := readFile(t, e.path("still-works")); string(got) != "yes" {
		t.Fatalf("still-works = %q after restart", got)
	}
}

// moduleRoot is the directory of go.mod. The embedded store changes the
// process working directory, so it cannot come from there.
func moduleRoot(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// lockedBuffer collects output from several writers (a child process,
// an engine's log) while they run.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mountProcess is a running `bucketfs mount`.
type mountProcess struct {
	proc   *os.Process
	exited chan struct{}
	err    error // of the exit, once exited is closed
}

// stop signals the process and returns how it exited.
func (p *mountProcess) stop(sig os.Signal) error {
	p.proc.Signal(sig)
	<-p.exited
	return p.err
}

func TestTheMountCommand(t *testing.T) {
	testkv.SkipOnPostgres(t, "the bucketfs command runs on a Pebble store in its state directory, and is killed holding it")
	e := newEnv(t)
	e.put("seen-by-the-command", []byte("hi"), nil)
	bin := filepath.Join(t.TempDir(), "bucketfs")
	build := exec.Command("go", "build", "-o", bin, "./cmd/bucketfs")
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	command := func(t *testing.T, stateDir, mountpoint string, exportDelay time.Duration) (*exec.Cmd, *lockedBuffer, *lockedBuffer) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		cmd := exec.CommandContext(ctx, bin, "mount", "--state-dir", stateDir, "--bucket", "s3://"+e.bucket,
			"--endpoint", e.srv.Endpoint, "--export-delay", exportDelay.String(), mountpoint)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+e.srv.AccessKey,
			"AWS_SECRET_ACCESS_KEY="+e.srv.SecretKey, "AWS_REGION="+e.srv.Region, "AWS_CA_BUNDLE=")
		cmd.WaitDelay = time.Second
		var stdout, stderr lockedBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd, &stdout, &stderr
	}
	// mount runs the command until it reports the mount; the caller ends
	// it and waits for its exit. A mount left behind by a killed process
	// is detached at cleanup.
	mount := func(t *testing.T, stateDir, mnt string, exportDelay time.Duration) *mountProcess {
		t.Helper()
		cmd, stdout, stderr := command(t, stateDir, mnt, exportDelay)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &mountProcess{proc: cmd.Process, exited: make(chan struct{})}
		go func() { p.err = cmd.Wait(); close(p.exited) }()
		t.Cleanup(func() {
			p.proc.Kill()
			<-p.exited
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		})
		eventually(t, "the mount message", func() bool {
			select {
			case <-p.exited:
				t.Fatalf("bucketfs mount exited: %v\nstdout: %s\nstderr: %s", p.err, stdout, stderr)
			default:
			}
			return strings.Contains(stdout.String(), "mounted at "+mnt)
		})
		return p
	}

	for _, tc := range []struct {
		name, stateDir, mountpoint, want string
	}{
		{"refuses a missing mountpoint", t.TempDir(), filepath.Join(t.TempDir(), "missing"), "no such file or directory"},
		{"refuses a mountpoint in use", t.TempDir(), e.mnt, "already mounted"},
		{"refuses a state directory in use", e.stateDir, t.TempDir(), fmt.Sprintf("in use by process %d", os.Getpid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, stdout, stderr := command(t, tc.stateDir, tc.mountpoint, time.Second)
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
				t.Fatalf("exit: %v, want a non-zero exit code\nstdout: %s\nstderr: %s", err, stdout, stderr)
			}
			msg := strings.TrimRight(stderr.String(), "\n")
			if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "bucketfs: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("stderr:\n%s\nwant one line \"bucketfs: ...%s...\"", msg, tc.want)
			}
		})
	}

	// The same flags on a good mountpoint mount the bucket: the refusals
	// above are about the mountpoint. SIGTERM unmounts cleanly.
	t.Run("mounts and unmounts on SIGTERM", func(t *testing.T) {
		mnt := t.TempDir()
		p := mount(t, t.TempDir(), mnt, time.Second)
		if got := readFile(t, filepath.Join(mnt, "seen-by-the-command")); string(got) != "hi" {
			t.Fatalf("seen-by-the-command = %q", got)
		}
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
		var st, parent syscall.Stat_t
		if syscall.Stat(mnt, &st) != nil || syscall.Stat(filepath.Dir(mnt), &parent) != nil || st.Dev != parent.Dev {
			t.Fatal("the mountpoint is still mounted after SIGTERM")
		}
	})

	// Killed without warning, the process loses nothing that was fsynced,
	// and its pending export is carried out by the next mount.
	t.Run("loses nothing fsynced when killed", func(t *testing.T) {
		stateDir, mnt := t.TempDir(), t.TempDir()
		p := mount(t, stateDir, mnt, time.Hour)
		data := randomBytes(100 << 10)
		if err := os.Mkdir(filepath.Join(mnt, "crash"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFileSynced(t, filepath.Join(mnt, "crash", "fsynced"), data)
		ino := statIno(t, filepath.Join(mnt, "crash", "fsynced"))
		p.stop(syscall.SIGKILL)
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Fatalf("detach the dead mount: %v", err)
		}
		if _, _, ok := e.get("crash/fsynced"); ok {
			t.Fatal("exported before its export delay")
		}

		p = mount(t, stateDir, mnt, 100*time.Millisecond)
		if got := readFile(t, filepath.Join(mnt, "crash", "fsynced")); !bytes.Equal(got, data) {
			t.Fatal("fsynced data differs after a crash")
		}
		if got := statIno(t, filepath.Join(mnt, "crash", "fsynced")); got != ino {
			t.Errorf("inode %d after a crash, was %d", got, ino)
		}
		eventually(t, "export of the file fsynced before the crash", func() bool {
			b, _, ok := e.get("crash/fsynced")
			return ok && bytes.Equal(b, data)
		})
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
	})
}

// storeProxy is a TCP proxy in front of the store that can go away: refuse
// (reset) or blackhole new connections, and answer requests with 503
// SlowDown.
type storeProxy struct {
	ln     net.Listener
	target string
	url    string

	mu       sync.Mutex
	mode     proxyMode
	slowDown int // connections still to be answered with 503 SlowDown
	conns    map[net.Conn]bool

	served503 atomic.Int64
}

type proxyMode int

const (
	forward   proxyMode = iota
	reset               // accept and reset at once
	blackhole           // accept, then never answer
)

func newStoreProxy(t *testing.T, endpoint string) *storeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &storeProxy{ln: ln, target: strings.TrimPrefix(endpoint, "http://"),
		url: "http://" + ln.Addr().String(), conns: map[net.Conn]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.closeAll()
	})
	return p
}

// set switches the mode and drops every open connection, so that the next
// request meets the new mode.
func (p *storeProxy) set(m proxyMode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
	p.closeAll()
}

// throttle answers the next n connections with 503 SlowDown.
func (p *storeProxy) throttle(n int) {
	p.mu.Lock()
	p.slowDown = n
	p.mu.Unlock()
	p.closeAll()
}

func (p *storeProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *storeProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = true
	p.mu.Unlock()
}

func (p *storeProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *storeProxy) serve(c net.Conn) {
	p.mu.Lock()
	mode, slow := p.mode, p.mode == forward && p.slowDown > 0
	if slow {
		p.slowDown--
	}
	if mode != reset {
		p.conns[c] = true // from here on, set and throttle close it
	}
	p.mu.Unlock()
	switch {
	case mode == reset:
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	case mode == blackhole:
		// Held open, unread, until the mode changes.
	case slow:
		defer p.untrack(c)
		p.answerSlowDown(c)
	default:
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.untrack(c)
			return
		}
		p.track(up)
		go func() {
			io.Copy(up, c)
			p.untrack(up)
			p.untrack(c)
		}()
		io.Copy(c, up)
		p.untrack(c)
		p.untrack(up)
	}
}

const slowDownBody = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>proxy</RequestId></Error>`

// answerSlowDown reads one request and answers it as S3 does when
// throttling.
func (p *storeProxy) answerSlowDown(c net.Conn) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	if req.Header.Get("Expect") != "100-continue" {
		io.Copy(io.Discard, req.Body)
	}
	fmt.Fprintf(c, "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(slowDownBody))
	if req.Method != http.MethodHead {
		io.WriteString(c, slowDownBody)
	}
	p.served503.Add(1)
}

// bounded runs fn and returns its error, failing the test if fn does not
// return within 20 s. A call stuck in the kernel cannot be abandoned
// cleanly; the mount's cleanup then reports it too.
func bounded(t *testing.T, what string, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

func TestAStoreThatGoesAwayFailsReadsInBoundedTimeAndLosesNoWrites(t *testing.T) {
	const opTimeout = time.Second
	p := newStoreProxy(t, s3test.Store(t).Endpoint)
	e := newEnv(t, withEndpoint(p.url), withOpTimeout(opTimeout))
	e.put("cold/x", []byte("cold"), nil)
	e.put("coldfile", []byte("never read"), nil)
	writeFile(t, e.path("warm"), []byte("v1"))
	e.flush()
	if b, _, ok := e.get("warm"); !ok || string(b) != "v1" {
		t.Fatalf("warm not exported before the outage: %q %v", b, ok)
	}
	if st, err := os.Stat(e.path("cold")); err != nil || !st.IsDir() {
		t.Fatalf("cold: %v %v", st, err)
	}

	// Listing a directory not imported yet fails with EIO, and returns;
	// so does reading a file whose data is only in the bucket.
	p.set(blackhole)
	err := bounded(t, "listing cold", func() error { _, err := os.ReadDir(e.path("cold")); return err })
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("listing cold with the store blackholed: %v, want EIO", err)
	}
	p.set(reset)
	err = bounded(t, "reading coldfile", func() error { _, err := os.ReadFile(e.path("coldfile")); return err })
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading coldfile with the store resetting connections: %v, want EIO", err)
	}

	// Files in the tier take writes at once: an open does not wait for
	// the store again once revalidation found it away. Their export is
	// tried and fails.
	p.set(blackhole)
	failures := e.eng.Exporter.Stats().Failures
	start := time.Now()
	f, err := os.OpenFile(e.path("warm"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= opTimeout {
		t.Errorf("opening warm with the store away took %v, an operation timeout", d)
	}
	if _, err := f.WriteString("v2, written while the store was away"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("new"), []byte("made while the store was away"))
	if got := readFile(t, e.path("warm")); string(got) != "v2, written while the store was away" {
		t.Fatalf("warm = %q", got)
	}
	eventually(t, "a failed export", func() bool { return e.eng.Exporter.Stats().Failures > failures })
	if b, _, _ := e.get("warm"); string(b) != "v1" {
		t.Fatalf("the bucket holds %q for warm during the outage, want v1", b)
	}
	if _, _, ok := e.get("new"); ok {
		t.Fatal("new reached the bucket during the outage")
	}

	// Back: the exports complete, and what failed works.
	p.set(forward)
	eventually(t, "export after the store came back", func() bool {
		w, _, ok1 := e.get("warm")
		n, _, ok2 := e.get("new")
		return ok1 && ok2 && string(w) == "v2, written while the store was away" && string(n) == "made while the store was away"
	})
	if got := listNames(t, e.path("cold")); len(got) != 1 || got[0] != "x" {
		t.Fatalf("cold lists %v, want [x]", got)
	}
	if got := readFile(t, e.path("coldfile")); string(got) != "never read" {
		t.Fatalf("coldfile = %q", got)
	}

	// Away again, with an export failing: stopping does not hang on the
	// store, and the export completes after a restart once it is back.
	p.set(blackhole)
	failures = e.eng.Exporter.Stats().Failures
	writeFile(t, e.path("late"), []byte("written before a restart"))
	eventually(t, "a failed export of late", func() bool { return e.eng.Exporter.Stats().Failures > failures })
	bounded(t, "stopping the engine with the store away", func() error { e.stop(); return nil })
	p.set(forward)
	e.start()
	eventually(t, "export of late after the restart", func() bool {
		b, _, ok := e.get("late")
		return ok && string(b) == "written before a restart"
	})
}

func TestASlowDownBurstIsRetriedTransparently(t *testing.T) {
	p := newStoreProxy(t, s3test.Store(t).Endpoint)
	e := newEnv(t, withEndpoint(p.url), func(c *engine.Config) { c.PartSize = 5 << 20 })
	e.put("burst/a", []byte("a"), nil)
	if _, err := os.Stat(e.path("burst")); err != nil {
		t.Fatal(err)
	}
	retries := e.eng.Bucket.Stats().Retries

	p.throttle(3)
	if got := listNames(t, e.path("burst")); len(got) != 1 || got[0] != "a" {
		t.Fatalf("burst lists %v during a SlowDown burst", got)
	}
	small := randomBytes(64 << 10)
	large := randomBytes(12 << 20) // three parts
	writeFile(t, e.path("burst/small"), small)
	writeFile(t, e.path("burst/large"), large)
	p.throttle(6)
	e.flush()
	for key, want := range map[string][]byte{"burst/small": small, "burst/large": large} {
		if b, _, ok := e.get(key); !ok || !bytes.Equal(b, want) {
			t.Fatalf("%s was not exported intact through a SlowDown burst", key)
		}
	}
	if n := p.served503.Load(); n != 9 {
		t.Fatalf("the proxy answered %d requests with SlowDown, want 9", n)
	}
	if r := e.eng.Bucket.Stats().Retries - retries; r < 9 {
		t.Fatalf("%d retries counted, want at least 9", r)
	}
}

func TestAFullTierFailsWritesWithENOSPCAndRecovers(t *testing.T) {
	// An hour's export delay: space must come back without waiting for
	// the exporter. Writes may take the unexported data up to 4 MiB.
	e := newEnv(t, withTierCapacity(4<<20), withExportDelay(time.Hour))
	imported := randomBytes(64 << 10)
	e.put("imported", imported, nil)
	before := randomBytes(512 << 10)
	writeFileSynced(t, e.path("before"), before)
	writeFileSynced(t, e.path("spare"), randomBytes(64<<10))

	f, err := os.Create(e.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := randomBytes(1<<20 + 12345)
	var werr error
	for i := 0; i < 8 && werr == nil; i++ {
		_, werr = f.Write(chunk)
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 8 MiB into a 4 MiB tier: %v, want ENOSPC", werr)
	}
	if got := readFile(t, e.path("before")); !bytes.Equal(got, before) {
		t.Fatal("a file written before the tier filled up differs")
	}
	// What the failed write left is a prefix of what was written.
	got := readFile(t, e.path("big"))
	for off := 0; off < len(got); off += len(chunk) {
		if n := min(len(chunk), len(got)-off); !bytes.Equal(got[off:off+n], chunk[:n]) {
			t.Fatalf("big holds bytes never written at [%d, %d) of its %d", off, off+n, len(got))
		}
	}
	// A write far past the end leaves a hole that reads as zeros.
	t.Run("a hole past the failed write reads zeros", func(t *testing.T) {
		if err := os.Remove(e.path("spare")); err != nil { // room for one more write
			t.Fatal(err)
		}
		g, err := os.OpenFile(e.path("big"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "a one-byte write past the end", func() bool {
			_, err := g.WriteAt([]byte("Z"), int64(len(got)+len(chunk)))
			return err == nil
		})
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if hole := readFile(t, e.path("big"))[len(got) : len(got)+len(chunk)]; !bytes.Equal(hole, make([]byte, len(chunk))) {
			t.Fatalf("the hole past a failed write reads %d non-zero bytes", len(hole)-bytes.Count(hole, []byte{0}))
		}
	})
	// A bucket file too small to stream is still readable: the full tier
	// cannot take it.
	if got := readFile(t, e.path("imported")); !bytes.Equal(got, imported) {
		t.Fatal("a bucket file read with the tier full differs")
	}

	if err := os.Remove(e.path("big")); err != nil {
		t.Fatal(err)
	}
	after := randomBytes(2 << 20)
	eventually(t, "a 2 MiB write after removing the big file", func() bool {
		return os.WriteFile(e.path("after"), after, 0o644) == nil
	})
	if got := readFile(t, e.path("after")); !bytes.Equal(got, after) {
		t.Fatal("the file written after recovery differs")
	}
	if got := readFile(t, e.path("before")); !bytes.Equal(got, before) {
		t.Fatal("a file written before the tier filled up differs after recovery")
	}
}

func TestAnUnlinkedFileStaysReadableWhileOpenAndIsDeletedAfterClose(t *testing.T) {
	e := newEnv(t)
	data := randomBytes(200 << 10)
	writeFile(t, e.path("victim"), data)
	e.flush()
	if _, _, ok := e.get("victim"); !ok {
		t.Fatal("victim was not exported")
	}
	ino := statIno(t, e.path("victim"))
	f, err := os.OpenFile(e.path("victim"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(e.path("victim")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.path("victim")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	// The unlink is exported while the file is still open.
	e.flush()
	if _, _, ok := e.get("victim"); ok {
		t.Fatal("flush left the object of an unlinked file in the bucket")
	}

	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the unlinked open file: %v, equal %v", err, bytes.Equal(got, data))
	}
	tail := []byte("written after unlink")
	if _, err := f.WriteAt(tail, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, len(tail))
	if _, err := f.ReadAt(got, int64(len(data))); err != nil || !bytes.Equal(got, tail) {
		t.Fatalf("read back after unlink: %q %v", got, err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if nl := st.Sys().(*syscall.Stat_t).Nlink; nl != 0 || st.Size() != int64(len(data)+len(tail)) {
		t.Fatalf("fstat of the unlinked file: nlink %d size %d", nl, st.Size())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// After the last close the inode and its tier data go, and nothing
	// comes back to the bucket.
	eventually(t, "the inode to be reclaimed", func() bool {
		_, err := e.eng.Meta.Get(context.Background(), meta.Ino(ino))
		return errors.Is(err, syscall.ENOENT)
	})
	if _, _, ok := e.get("victim"); ok {
		t.Fatal("the unlinked file was exported again after close")
	}
}
