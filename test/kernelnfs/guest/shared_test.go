//go:build kernelnfs

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The two servers of one file system (serve --meta on one PostgreSQL
// database, one bucket) that the host runs for
// TestTwoServersOfOneFileSystemAreOneFileSystemToTheKernelClient, as
// "shared-a" and "shared-b" for its control port.
const (
	envSharedAPort = "KN_SHARED_A_PORT"
	envSharedBPort = "KN_SHARED_B_PORT"
)

// TestTwoServersOfOneFileSystemAreOneFileSystemToTheKernelClient mounts two
// bucketfs servers of one file system, A and B at several pairs of NFS
// minor versions (pairs), as two clients of them would, and checks issue 23's promises through the Linux
// client itself: close-to-open across servers (what one server's client
// wrote and closed is what the other's reads at its next open, even where
// its page cache holds the old bytes), one namespace (a name made, renamed,
// linked or removed through one is so through the other), byte-range locks
// and flock that conflict across servers, and a kill -9 of one server that
// loses none of what was fsynced through it, with its locks released to
// the other server's clients after the lease time and refused to its own
// client's reclaim when it is back. The host checks the bucket against
// what it expects (Server "shared").
func TestTwoServersOfOneFileSystemAreOneFileSystemToTheKernelClient(t *testing.T) {
	portA, portB := os.Getenv(envSharedAPort), os.Getenv(envSharedBPort)
	if portA == "" || portB == "" {
		t.Skip("no servers of one file system")
	}
	for _, vers := range pairs() {
		t.Run("v"+vers[0]+"-v"+vers[1], func(t *testing.T) { sharedPair(t, portA, portB, vers) })
	}
}

// pairs are the versions A and B are mounted at, in turn: KN_SHARED_PAIRS
// (e.g. "4.0:4.1") or, by default, 4.1 and 4.2, 4.0 and 4.1, then 4.2
// and 4.0 (B, the server killed, with a 4.0 client).
func pairs() [][2]string {
	var out [][2]string
	for _, p := range strings.Split(os.Getenv("KN_SHARED_PAIRS"), "/") {
		if a, b, ok := strings.Cut(p, ":"); ok {
			out = append(out, [2]string{a, b})
		}
	}
	if len(out) == 0 {
		out = [][2]string{{"4.1", "4.2"}, {"4.0", "4.1"}, {"4.2", "4.0"}}
	}
	return out
}

// sharedPair is the test above for a mount of A at vers[0] and of B at
// vers[1].
func sharedPair(t *testing.T, portA, portB string, vers [2]string) {
	name := "v" + vers[0] + "-v" + vers[1]
	mntA, mntB := "/mnt/shared-a-"+name, "/mnt/shared-b-"+name
	mountNFS(t, portA, mntA, mountSpec{vers: vers[0]})
	mountNFS(t, portB, mntB, mountSpec{vers: vers[1]})
	// Each pair of versions works in a directory of its own.
	if err := os.Mkdir(filepath.Join(mntA, name), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(mntA, name), filepath.Join(mntB, name)
	exp := func(rel string, data []byte) {
		expect(t, Expectation{Server: "shared", Key: name + "/" + rel, Size: len(data), SHA256: digest(data), Mode: 0o644})
	}
	gone := func(rel string) { expect(t, Expectation{Server: "shared", Key: name + "/" + rel, Absent: true}) }
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("close-to-open", func(t *testing.T) {
		first := content("c2o#1", 1<<20+3)
		must(t, os.WriteFile(filepath.Join(a, "c2o"), first, 0o644))
		readBack(t, filepath.Join(b, "c2o"), first)

		// Appended through B: A's page cache holds the first bytes, and
		// its next open must see that the file changed.
		f, err := os.OpenFile(filepath.Join(b, "c2o"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		second := content("c2o#2", 5000)
		_, err = f.Write(second)
		must(t, err)
		must(t, f.Close())
		whole := append(append([]byte{}, first...), second...)
		readBack(t, filepath.Join(a, "c2o"), whole)

		// Overwritten in place through B, the size unchanged: only the
		// change attribute tells A's client that its pages are stale.
		f, err = os.OpenFile(filepath.Join(b, "c2o"), os.O_WRONLY, 0)
		must(t, err)
		third := content("c2o#3", 4096)
		_, err = f.WriteAt(third, 0)
		must(t, err)
		must(t, f.Close())
		copy(whole, third)
		readBack(t, filepath.Join(a, "c2o"), whole)
		exp("c2o", whole)
	})

	t.Run("one-namespace", func(t *testing.T) {
		must(t, os.Mkdir(filepath.Join(a, "dir"), 0o755))
		data := content("dir/f", 7000)
		must(t, os.WriteFile(filepath.Join(b, "dir", "f"), data, 0o644))
		must(t, os.Rename(filepath.Join(b, "dir", "f"), filepath.Join(b, "dir", "g")))
		readBack(t, filepath.Join(a, "dir", "g"), data)
		must(t, os.Link(filepath.Join(a, "dir", "g"), filepath.Join(a, "dir", "h")))
		if st := stat(t, filepath.Join(b, "dir", "h")); st.Nlink != 2 {
			t.Errorf("a file linked through A has nlink %d through B, want 2", st.Nlink)
		}
		entries, err := os.ReadDir(filepath.Join(a, "dir"))
		must(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"g", "h"}) {
			t.Errorf("dir through A lists %q, want [g h]", names)
		}
		// B's client still has the name g from its rename: its open asks
		// the server by name, which says it is gone.
		must(t, os.Remove(filepath.Join(a, "dir", "g")))
		if _, err := os.Open(filepath.Join(b, "dir", "g")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("open through B of a name removed through A: %v, want ENOENT", err)
		}
		if st := stat(t, filepath.Join(b, "dir", "h")); st.Nlink != 1 {
			t.Errorf("after the removal of its other name through A, the file has nlink %d through B, want 1", st.Nlink)
		}
		exp("dir/h", data)
		gone("dir/f")
		gone("dir/g")
	})

	t.Run("locks", func(t *testing.T) {
		data := content("locked", 1000)
		fa, fb := writeAndOpenBoth(t, a, b, "locked", data)
		setlk := func(f *os.File, typ int16, start, n int64) error {
			return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: typ, Whence: 0, Start: start, Len: n})
		}
		must(t, setlk(fa, unix.F_WRLCK, 0, 100))
		if err := setlk(fb, unix.F_WRLCK, 50, 100); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Errorf("a write lock through B over one A holds: %v, want EAGAIN", err)
		}
		if err := setlk(fb, unix.F_RDLCK, 99, 1); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Errorf("a read lock through B over A's write lock: %v, want EAGAIN", err)
		}
		must(t, setlk(fb, unix.F_WRLCK, 200, 100))
		probe := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 10}
		must(t, unix.FcntlFlock(fb.Fd(), unix.F_GETLK, &probe))
		if probe.Type != unix.F_WRLCK || probe.Start != 0 || probe.Len != 100 {
			t.Errorf("F_GETLK through B names %+v, want A's write lock of bytes 0-99", probe)
		}
		if err := setlk(fa, unix.F_WRLCK, 250, 1); !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			t.Errorf("a write lock through A over one B holds: %v, want EAGAIN", err)
		}

		// A waiting lock through B is granted once A lets go (the client
		// polls for it: no CB_NOTIFY_LOCK here).
		granted := make(chan error, 1)
		go func() {
			granted <- unix.FcntlFlock(fb.Fd(), unix.F_SETLKW, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 100})
		}()
		select {
		case err := <-granted:
			t.Fatalf("a waiting lock through B returned (%v) while A held the range", err)
		default:
		}
		must(t, setlk(fa, unix.F_UNLCK, 0, 100))
		start := time.Now()
		select {
		case err := <-granted:
			must(t, err)
			t.Logf("B's waiting lock was granted %s after A's unlock", time.Since(start).Round(time.Millisecond))
		case <-time.After(2 * time.Minute):
			t.Fatal("B's waiting lock was not granted within 2 minutes of A's unlock")
		}

		// flock is a whole-file byte-range lock on NFS (LOCK_EX a write
		// lock, so the file is open for writing): it conflicts across
		// servers too.
		ga, gb := writeAndOpenBoth(t, a, b, "flocked", data)
		must(t, unix.Flock(int(ga.Fd()), unix.LOCK_SH|unix.LOCK_NB))
		if err := unix.Flock(int(gb.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("flock LOCK_EX through B of a file A holds shared: %v, want EWOULDBLOCK", err)
		}
		must(t, unix.Flock(int(gb.Fd()), unix.LOCK_SH|unix.LOCK_NB))
		must(t, unix.Flock(int(ga.Fd()), unix.LOCK_UN))
		must(t, unix.Flock(int(gb.Fd()), unix.LOCK_UN))
		exp("locked", data)
		exp("flocked", data)
	})

	t.Run("kill-one-server", func(t *testing.T) {
		if os.Getenv(envControlPort) == "" {
			t.Skip("no control port")
		}
		// Fsynced through B, not exported (the export delay is a minute),
		// then B is killed: A's client reads it all, from the database.
		data := content("durable", 300<<10+11)
		f, err := os.Create(filepath.Join(b, "durable"))
		must(t, err)
		_, err = f.Write(data)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
		must(t, os.WriteFile(filepath.Join(b, "held"), data[:100], 0o644))
		h, err := os.OpenFile(filepath.Join(b, "held"), os.O_RDWR, 0)
		must(t, err)
		defer h.Close()
		must(t, unix.FcntlFlock(h.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}))

		before := kernelLog(t)
		askHost(t, "kill shared-b")
		killed := time.Now()
		restarted := false
		defer func() {
			if !restarted {
				// Failed with B down: start it again, or closing the
				// files open through it waits for ever (hard mount).
				askHost(t, "start shared-b")
			}
			if t.Failed() {
				t.Logf("the kernel logged since B's kill:\n%s", strings.TrimPrefix(kernelLog(t), before))
			}
		}()
		readBack(t, filepath.Join(a, "durable"), data)

		// B's lock holds until B's lease has passed on A, then A's
		// clients may take the file.
		ha, err := os.OpenFile(filepath.Join(a, "held"), os.O_RDWR, 0)
		must(t, err)
		defer ha.Close()
		deadline := killed.Add(2 * time.Minute)
		for {
			err := unix.FcntlFlock(ha.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0})
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
				t.Fatalf("a lock through A of a file a dead B's client locked: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatal("the dead server's lock still held 2 minutes after its kill")
			}
			time.Sleep(500 * time.Millisecond) // the lock is released by a lease running out: poll for it
		}
		t.Logf("A's client took the lock of a dead B's client %s after the kill", time.Since(killed).Round(time.Millisecond))

		// B back: its client reads what it fsynced before the kill, and
		// cannot take back the lock A's client now holds.
		before = kernelLog(t)
		askHost(t, "start shared-b")
		restarted = true
		readBack(t, filepath.Join(b, "durable"), data)
		err = unix.FcntlFlock(h.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1})
		if err == nil {
			t.Error("B's client locked a byte of a file A's client holds locked, after B's restart")
		}
		// The client tried to reclaim its lock at B's restart, and B
		// refused (another server had dropped it and A's client took the
		// file): the kernel says so.
		for deadline := time.Now().Add(time.Minute); !strings.Contains(strings.TrimPrefix(kernelLog(t), before), "lost 1 locks"); {
			if time.Now().After(deadline) {
				t.Fatalf("B's client did not report its lock lost after B's restart; the kernel logged:\n%s", strings.TrimPrefix(kernelLog(t), before))
			}
			time.Sleep(100 * time.Millisecond) // polling the kernel's log
		}
		t.Logf("B's client's lock after B's restart: %v; the kernel logged:\n%s", err, strings.TrimPrefix(kernelLog(t), before))
		exp("durable", data)
		exp("held", data[:100])
	})
	unmountNFS(t, mntA)
	unmountNFS(t, mntB)
}

// writeAndOpenBoth writes name through the mount a and opens it for
// reading and writing through a and through b, until t ends.
func writeAndOpenBoth(t *testing.T, a, b, name string, data []byte) (fa, fb *os.File) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(a, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(dir string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return open(a), open(b)
}
