package vfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/heartbeat"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/locks"
	"bucketfs/internal/meta"
)

// patience bounds how long a test waits for what should happen soon; it
// is a failure deadline, never a synchronisation device.
const patience = 20 * time.Second

// sharedServer is one of several servers on one kv store: its namespace
// store, its FS and its heartbeat.
type sharedServer struct {
	id    uint64
	fs    *FS
	beats *heartbeat.Beats
}

// sharedServers opens n servers (ids 1..n) on one Pebble store, each
// beating every 10ms with the given lease. Waits blocked by another
// server's lock ask again every 5ms.
func sharedServers(t *testing.T, n int, lease time.Duration) (kv.Store, []*sharedServer) {
	t.Helper()
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var out []*sharedServer
	for id := uint64(1); id <= uint64(n); id++ {
		m, err := meta.Open(ctx, db, meta.Options{ExportDelay: time.Minute, Server: id})
		if err != nil {
			t.Fatal(err)
		}
		beats, err := heartbeat.Start(ctx, db, id, 10*time.Millisecond, lease)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(beats.Stop) // before db.Close: cleanups run last first
		fs := New(m, nil, nil, Config{Liveness: beats, SharedLockRetry: 5 * time.Millisecond})
		t.Cleanup(fs.WaitCloses) // before db.Close
		out = append(out, &sharedServer{id: id, fs: fs, beats: beats})
	}
	return db, out
}

// sharedFile creates name through s and returns its inode, closed.
func sharedFile(t *testing.T, s *sharedServer, name string, data string) Ino {
	t.Helper()
	ctx := context.Background()
	a, h, err := s.fs.Create(ctx, Root, meta.RootIno, name, 0o644, syscall.O_RDWR|syscall.O_CREAT)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte(data), 0); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	return a.Ino
}

func wrLock(o uint64, start, end uint64) Lock {
	return Lock{Start: start, End: end, Kind: LockWrite, Owner: LockOwner{ID: o}}
}

func rdLock(o uint64, start, end uint64) Lock {
	return Lock{Start: start, End: end, Kind: LockRead, Owner: LockOwner{ID: o}}
}

func wantBlocked(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("%s = %v, want EAGAIN", what, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A write lock taken through one server refuses every overlapping lock
// asked through the other, even by an owner with the same numbers, and
// F_GETLK through the other reports it; beside it the range is free. The
// same holds for flock.
func TestAWriteLockThroughOneServerRefusesOverlappingLocksThroughAnother(t *testing.T) {
	ctx := context.Background()
	_, s := sharedServers(t, 2, time.Minute)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")

	must(t, a.SetLock(ctx, ino, wrLock(1, 0, 99), false))
	wantBlocked(t, "a write lock through b over a's", b.SetLock(ctx, ino, wrLock(1, 50, 59), false))
	wantBlocked(t, "a read lock through b over a's write lock", b.SetLock(ctx, ino, rdLock(2, 99, 200), false))
	must(t, b.SetLock(ctx, ino, wrLock(1, 100, 199), false))
	c, ok, err := b.TestLock(ctx, ino, rdLock(1, 10, locks.ToEOF))
	if err != nil || !ok || c != wrLock(1, 0, 99) {
		t.Fatalf("TestLock through b = %v, %v, %v; want a's write lock [0,99]", c, ok, err)
	}
	c, ok, err = a.TestLock(ctx, ino, wrLock(7, 150, 150))
	if err != nil || !ok || c != wrLock(1, 100, 199) {
		t.Fatalf("TestLock through a = %v, %v, %v; want b's write lock [100,199]", c, ok, err)
	}
	if held := b.locks.Held(uint64(ino)); len(held) != 1 {
		t.Fatalf("b's table holds %v, want only its own lock", held)
	}

	must(t, a.Flock(ctx, ino, LockOwner{ID: 9}, LockWrite, false))
	wantBlocked(t, "a shared flock through b beside a's exclusive one", b.Flock(ctx, ino, LockOwner{ID: 9}, LockRead, false))
	// flock and record locks do not interact, across servers either.
	must(t, b.SetLock(ctx, ino, wrLock(3, 1000, 2000), false))
}

// Read locks (and shared flocks) taken through two servers share a range;
// neither can then upgrade to a write lock over the other's.
func TestReadLocksThroughTwoServersShareARange(t *testing.T) {
	ctx := context.Background()
	_, s := sharedServers(t, 2, time.Minute)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")

	must(t, a.SetLock(ctx, ino, rdLock(1, 0, locks.ToEOF), false))
	must(t, b.SetLock(ctx, ino, rdLock(2, 10, 19), false))
	wantBlocked(t, "an upgrade through a over b's read lock", a.SetLock(ctx, ino, wrLock(1, 0, 10), false))
	wantBlocked(t, "an upgrade through b over a's read lock", b.SetLock(ctx, ino, wrLock(2, 10, 19), false))
	if held := a.locks.Held(uint64(ino)); len(held) != 1 || held[0] != rdLock(1, 0, locks.ToEOF) {
		t.Fatalf("the refused upgrade changed a's locks: %v", held)
	}
	must(t, a.Flock(ctx, ino, LockOwner{ID: 1}, LockRead, false))
	must(t, b.Flock(ctx, ino, LockOwner{ID: 1}, LockRead, false))
	wantBlocked(t, "an exclusive flock through b beside a's shared one", b.Flock(ctx, ino, LockOwner{ID: 2}, LockWrite, false))
}

// refusals counts, per server, the grants another server's lock refused.
func refusals(s *sharedServer) *atomic.Int64 {
	n := new(atomic.Int64)
	s.fs.shared.testHookRefused = func(uint64) { n.Add(1) }
	return n
}

// awaitCount fails the test unless n reaches want within patience.
func awaitCount(t *testing.T, what string, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%d of %d)", what, n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(patience):
		t.Fatal("the wait never ended")
		return nil
	}
}

// A blocking request through one server waits, asking again every poll,
// while the other server holds the range, and is granted after that
// server's unlock (record locks) or close (flock).
func TestAnUnlockThroughOneServerLetsABlockingRequestThroughTheOtherIn(t *testing.T) {
	ctx := context.Background()
	_, s := sharedServers(t, 2, time.Minute)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")
	refused := refusals(s[1])

	must(t, a.SetLock(ctx, ino, wrLock(1, 0, 99), false))
	done := make(chan error, 1)
	go func() { done <- b.SetLock(ctx, ino, wrLock(2, 50, 149), true) }()
	awaitCount(t, "b's wait to ask three times", refused, 3)
	select {
	case err := <-done:
		t.Fatalf("b's wait returned %v while a held the range", err)
	default:
	}
	must(t, a.SetLock(ctx, ino, Lock{Start: 0, End: 99, Kind: LockUnlock, Owner: LockOwner{ID: 1}}, false))
	if err := result(t, done); err != nil {
		t.Fatalf("b's wait after a's unlock = %v", err)
	}
	wantBlocked(t, "a's lock back over b's", a.SetLock(ctx, ino, wrLock(1, 0, 99), false))

	must(t, a.Flock(ctx, ino, LockOwner{ID: 5}, LockWrite, false))
	n := refused.Load()
	go func() { done <- b.Flock(ctx, ino, LockOwner{ID: 5}, LockRead, true) }()
	awaitCount(t, "b's flock wait to ask twice", refused, n+2)
	a.ReleaseLocks(ino, LockOwner{ID: 5}) // a's file closed
	if err := result(t, done); err != nil {
		t.Fatalf("b's flock wait after a's close = %v", err)
	}
}

// serverKeys returns the keys under prefix p (P or O) that name server.
func serverKeys(t *testing.T, db kv.Store, p byte, server uint64) int {
	t.Helper()
	n := 0
	err := db.View(context.Background(), func(r kv.Reader) error {
		lo := []byte{p}
		return r.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
			if len(k) == 17 && kv.Uint64(k[9:]) == server {
				n++
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The locks of a server whose heartbeat stopped (a crash) bind the others
// until the lease time has passed; then they are ignored, and the server
// that finds them dead deletes them.
func TestADeadServersLocksAreIgnoredAfterTheLeaseAndDeleted(t *testing.T) {
	ctx := context.Background()
	db, s := sharedServers(t, 2, 300*time.Millisecond)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")

	must(t, a.SetLock(ctx, ino, wrLock(1, 0, locks.ToEOF), false))
	must(t, a.Flock(ctx, ino, LockOwner{ID: 1}, LockWrite, false))
	wantBlocked(t, "b's lock while a lives", b.SetLock(ctx, ino, rdLock(1, 0, 0), false))
	if n := serverKeys(t, db, 'P', 1); n != 1 {
		t.Fatalf("a has %d lock records, want 1", n)
	}

	s[0].beats.Stop()
	deadline := time.Now().Add(patience)
	for {
		err := b.SetLock(ctx, ino, wrLock(1, 0, locks.ToEOF), false)
		if err == nil {
			break
		}
		wantBlocked(t, "b's lock", err)
		if time.Now().After(deadline) {
			t.Fatal("a's lock still binds b long after a's heartbeat stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := serverKeys(t, db, 'P', 1); n != 0 {
		t.Fatalf("a's %d lock records are still there after b found a dead", n)
	}
	must(t, b.Flock(ctx, ino, LockOwner{ID: 1}, LockWrite, false))
}

// Two servers race for locks on one small range, through Set and through
// waits, with owners of the same numbers on both: at no moment do two
// owners hold conflicting locks. Each worker holds one lock at a time, so
// no wait can deadlock.
func TestRacingLockRequestsThroughTwoServersAreNeverBothGranted(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx := context.Background()
	_, s := sharedServers(t, 2, time.Minute)
	ino := sharedFile(t, s[0], "f", "data")

	var (
		mu       sync.Mutex
		held     = map[[2]uint64]Lock{} // by server and owner
		broken   string
		grants   [2]atomic.Int64
		refusedN atomic.Int64
	)
	granted := func(server uint64, l Lock) {
		mu.Lock()
		defer mu.Unlock()
		for k, x := range held {
			if k[0] == server && k[1] == l.Owner.ID {
				continue
			}
			if locks.Excludes(l, x) && broken == "" {
				broken = fmt.Sprintf("server %d owner %d was granted %v while server %d owner %d held %v",
					server, l.Owner.ID, l, k[0], k[1], x)
			}
		}
		held[[2]uint64{server, l.Owner.ID}] = l
	}
	released := func(server uint64, l Lock) {
		mu.Lock()
		defer mu.Unlock()
		delete(held, [2]uint64{server, l.Owner.ID})
	}

	const workers, rounds = 4, 60
	var wg sync.WaitGroup
	for si, srv := range s {
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(si*workers+w)))
				owner := uint64(w + 1) // the same numbers on both servers
				for range rounds {
					start := rng.Uint64N(16)
					l := Lock{Start: start, End: start + rng.Uint64N(8), Kind: LockRead, Owner: LockOwner{ID: owner}}
					if rng.IntN(2) == 0 {
						l.Kind = LockWrite
					}
					wait := rng.IntN(3) == 0
					wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					err := srv.fs.SetLock(wctx, ino, l, wait)
					cancel()
					if err != nil {
						if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("SetLock: %v", err)
							return
						}
						refusedN.Add(1)
						continue
					}
					grants[si].Add(1)
					granted(srv.id, l)
					for range rng.IntN(20) {
						runtime.Gosched()
					}
					released(srv.id, l)
					unlock := l
					unlock.Kind = LockUnlock
					if err := srv.fs.SetLock(ctx, ino, unlock, false); err != nil {
						t.Errorf("unlock: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if broken != "" {
		t.Fatalf("seed %d: %s", seed, broken)
	}
	if grants[0].Load() == 0 || grants[1].Load() == 0 || refusedN.Load() == 0 {
		t.Fatalf("seed %d: grants %d and %d, refusals %d: the servers never competed",
			seed, grants[0].Load(), grants[1].Load(), refusedN.Load())
	}
	t.Logf("grants %d and %d, refusals %d", grants[0].Load(), grants[1].Load(), refusedN.Load())
}

// A file one server holds open is open to the other too, after the other
// unlinked it, until the first server's last close; the other's own last
// close leaves the data alone meanwhile, and the first server still reads
// it whole.
func TestAFileOpenOnOneServerIsOpenOnTheOtherUntilItsLastClose(t *testing.T) {
	ctx := context.Background()
	db, s := sharedServers(t, 2, time.Minute)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "kept while open")

	h1, err := a.Open(ctx, Root, ino, syscall.O_RDONLY)
	must(t, err)
	h2, err := a.Open(ctx, Root, ino, syscall.O_RDONLY)
	must(t, err)
	if n := serverKeys(t, db, 'O', 1); n != 1 {
		t.Fatalf("a has %d open records for two handles on one inode, want 1", n)
	}
	hb, err := b.Open(ctx, Root, ino, syscall.O_RDONLY)
	must(t, err)
	must(t, b.Unlink(ctx, Root, meta.RootIno, "f"))
	hb.Release(ctx) // b's last close of an unlinked file: a still has it
	if !b.IsOpen(ino) || !b.InUse(ino) {
		t.Fatal("b does not see the file a holds open")
	}
	h1.Release(ctx)
	if !b.IsOpen(ino) {
		t.Fatal("b sees the file closed while a still has a handle")
	}
	buf := make([]byte, 64)
	n, err := h2.Read(ctx, buf, 0)
	if err != nil || string(buf[:n]) != "kept while open" {
		t.Fatalf("a reads %q, %v after b's close; want the data whole", buf[:n], err)
	}
	h2.Release(ctx)
	a.WaitCloses() // the record of a last close follows it (closed)
	if b.IsOpen(ino) || b.InUse(ino) {
		t.Fatal("b still sees the file open after a's last close")
	}
	if n := serverKeys(t, db, 'O', 1); n != 0 {
		t.Fatalf("a has %d open records after its last close, want 0", n)
	}
}

// A file held open by a server whose heartbeat stopped is open to the
// others until the lease time has passed, and then not; its open record
// is deleted by the server that finds it dead.
func TestAFileOpenOnADeadServerIsClosedToTheOthersAfterTheLease(t *testing.T) {
	ctx := context.Background()
	db, s := sharedServers(t, 2, 300*time.Millisecond)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")

	_, err := a.Open(ctx, Root, ino, syscall.O_RDONLY) // never closed: a dies
	must(t, err)
	must(t, b.Unlink(ctx, Root, meta.RootIno, "f"))
	if !b.IsOpen(ino) {
		t.Fatal("b does not see the file a holds open")
	}
	s[0].beats.Stop()
	deadline := time.Now().Add(patience)
	for b.IsOpen(ino) {
		if time.Now().After(deadline) {
			t.Fatal("the file of a dead server is still open to b")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := serverKeys(t, db, 'O', 1); n != 0 {
		t.Fatalf("the dead server's %d open records are still there", n)
	}
}

// NFS share reservations (the unions a server publishes per inode) refuse
// a conflicting reservation through another server while their server
// lives, and are ignored once its heartbeat has stopped for the lease.
func TestADeadServersShareReservationsAreIgnoredAfterTheLease(t *testing.T) {
	ctx := context.Background()
	db, s := sharedServers(t, 2, 300*time.Millisecond)
	a, b := s[0].fs, s[1].fs
	ino := sharedFile(t, s[0], "f", "data")
	const read, write = 1, 2 // OPEN4_SHARE_ACCESS_READ/WRITE, and the same deny bits

	if ok, err := a.ReserveShare(ctx, ino, read, write, read, write); err != nil || !ok {
		t.Fatalf("a's reservation = %v, %v", ok, err)
	}
	if ok, err := b.ReserveShare(ctx, ino, write, 0, write, 0); err != nil || ok {
		t.Fatalf("b's write access beside a's deny of writes = %v, %v; want refused", ok, err)
	}
	if ok, err := b.ReserveShare(ctx, ino, read, read, read, read); err != nil || ok {
		t.Fatalf("b's deny of reads beside a's read access = %v, %v; want refused", ok, err)
	}
	if denied, err := b.DeniedElsewhere(ctx, ino, write); err != nil || !denied {
		t.Fatalf("DeniedElsewhere(write) through b = %v, %v; want denied", denied, err)
	}
	if ok, err := b.ReserveShare(ctx, ino, read, 0, read, 0); err != nil || !ok {
		t.Fatalf("b's read access beside a's reservation = %v, %v; want granted", ok, err)
	}

	s[0].beats.Stop()
	deadline := time.Now().Add(patience)
	for {
		ok, err := b.ReserveShare(ctx, ino, write, 0, read|write, 0)
		must(t, err)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's reservation still binds b long after a's heartbeat stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := serverKeys(t, db, 'S', 1); n != 0 {
		t.Fatalf("the dead server's %d share records are still there", n)
	}
}

// A file created through one server is open to the other from the
// create's transaction on (its open record is written with the file), and
// stays so until the creator's last close is recorded; a second open of
// the new file through the creator, opened and closed before the
// creator's own handle closes, does not take the record away (the race
// openCreated guards: the batch of that close runs before the creator
// counts its open, or sees it counted).
func TestAFileCreatedThroughOneServerIsOpenToTheOtherUntilItsLastClose(t *testing.T) {
	ctx := context.Background()
	db, s := sharedServers(t, 2, time.Minute)
	a, b := s[0].fs, s[1].fs
	for i := range 50 {
		name := fmt.Sprint("f", i)
		in, h, err := a.Create(ctx, Root, meta.RootIno, name, 0o644, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL)
		must(t, err)
		if !b.IsOpen(in.Ino) {
			t.Fatalf("%s: b does not see the file a created and holds open", name)
		}
		// Another handle through a, opened and closed at once: its last
		// close is not a's last while h is open.
		h2, err := a.Open(ctx, Root, in.Ino, syscall.O_RDONLY)
		must(t, err)
		h2.Release(ctx)
		a.WaitCloses()
		if !b.IsOpen(in.Ino) {
			t.Fatalf("%s: b sees the file closed while a's creating handle is open", name)
		}
		h.Release(ctx)
		a.WaitCloses()
		if b.IsOpen(in.Ino) {
			t.Fatalf("%s: b sees the file open after a's last close was recorded", name)
		}
	}
	if n := serverKeys(t, db, 'O', 1); n != 0 {
		t.Fatalf("a has %d open records after its last closes, want 0", n)
	}

	// The race itself: another open of the new file through a comes and
	// goes, its close recorded, between the create's transaction and the
	// creator's open.
	testHookCreated = func(fs *FS, ino Ino) {
		h, err := fs.Open(ctx, Root, ino, syscall.O_RDONLY)
		must(t, err)
		h.Release(ctx)
		fs.WaitCloses()
	}
	t.Cleanup(func() { testHookCreated = nil })
	in, h, err := a.Create(ctx, Root, meta.RootIno, "raced", 0o644, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL)
	must(t, err)
	if !b.IsOpen(in.Ino) {
		t.Fatal("b sees the file closed while a's creating handle is open, after another handle's close came between the create and its open")
	}
	h.Release(ctx)
}
