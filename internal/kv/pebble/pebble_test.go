package pebble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func openPebble(t testing.TB, dir string) kv.Store {
	t.Helper()
	s, err := Open(dir, Options{CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestPebbleStore(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store {
		s := openPebble(t, t.TempDir())
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// Pebble serializes Updates through one writer slot: an Update waiting
// for it gives up at its deadline.
func TestPebbleUpdateWaitingForTheWriterSlotGivesUpAtItsDeadline(t *testing.T) {
	s := openPebble(t, t.TempDir())
	defer s.Close()
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Update(context.Background(), func(tx kv.Txn) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := s.Update(ctx, func(tx kv.Txn) error { return nil })
	close(release)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting Update = %v, want deadline exceeded", err)
	}
	if err := <-done; err != nil {
		t.Errorf("holding Update: %v", err)
	}
}

func TestPebbleKeepsDataAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openPebble(t, dir)
	kvtest.Set(t, s, "a", "1", "b", "2")
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = openPebble(t, dir)
	defer s.Close()
	if got := kvtest.ViewGet(t, s, "b"); got != "2" {
		t.Fatalf("after reopen Get(b) = %q, want 2", got)
	}
}

// A copy of the directory taken after Sync, while the store is still open,
// is what a crash leaves behind: it must hold every synced commit.
func TestPebbleSyncedCommitsSurviveACrash(t *testing.T) {
	dir := t.TempDir()
	s := openPebble(t, dir)
	defer s.Close()
	for i := range 100 {
		kvtest.Set(t, s, string(kv.AppendUint64([]byte("k"), uint64(i))), "v")
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	c := openPebble(t, crashed)
	defer c.Close()
	if got := kvtest.ViewGet(t, c, string(kv.AppendUint64([]byte("k"), 99))); got != "v" {
		t.Fatalf("last synced commit lost: Get = %q", got)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		dst.Close()
	}
}

func TestPebbleRefusesASecondOpenInThisProcess(t *testing.T) {
	dir := t.TempDir()
	s := openPebble(t, dir)
	_, err := Open(dir, Options{})
	if !errors.Is(err, kv.ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Once closed, the directory opens again.
	openPebble(t, dir).Close()
}

// The child process opens the directory named in the environment.
const lockChildEnv = "BUCKETFS_KV_LOCK_CHILD_DIR"

func TestPebbleRefusesADirectoryHeldByAnotherProcess(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		_, err := Open(dir, Options{})
		if !errors.Is(err, kv.ErrLocked) {
			t.Fatalf("Open in child = %v, want ErrLocked", err)
		}
		t.Logf("child saw: %v", err)
		return
	}
	dir := t.TempDir()
	s := openPebble(t, dir)
	defer s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleRefusesADirectoryHeldByAnotherProcess$", "-test.v")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// Reads must agree whether a key lives in an sstable, the memtable, or both
// (a newer overwrite or delete shadowing a flushed value).
func TestPebbleReadsAgreeAcrossMemtableAndSSTables(t *testing.T) {
	s := openPebble(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	const n = 3000
	key := func(i int) []byte { return kv.AppendUint64([]byte("k"), uint64(i)) }
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for i := range n {
			if err := tx.Set(key(i), []byte("old")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.(*pebbleStore).db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for i := 0; i < n; i += 3 {
			tx.Delete(key(i))
		}
		for i := 1; i < n; i += 3 {
			tx.Set(key(i), []byte("new"))
		}
		return tx.Set(key(n), []byte("new"))
	}); err != nil {
		t.Fatal(err)
	}
	want := func(i int) string {
		switch {
		case i == n || i%3 == 1:
			return "new"
		case i%3 == 0:
			return "<none>"
		}
		return "old"
	}
	s.View(ctx, func(r kv.Reader) error {
		for i := range n + 2 {
			if got, w := kvtest.Get(t, r, string(key(i))), want(i); got != w && !(i == n+1 && got == "<none>") {
				t.Fatalf("Get(k%d) = %q, want %q", i, got, w)
			}
		}
		count := 0
		r.Scan([]byte("k"), kv.PrefixEnd([]byte("k")), func(k, v []byte) bool {
			if i := int(kv.Uint64(k[1:])); string(v) != want(i) {
				t.Errorf("Scan k%d = %q, want %q", i, v, want(i))
			}
			count++
			return true
		})
		if wantCount := n - (n+2)/3 + 1; count != wantCount {
			t.Errorf("Scan saw %d keys, want %d", count, wantCount)
		}
		return nil
	})
}

// On a file system that loses writes not fsynced (a power loss), the
// commits before a Sync survive, whether their log records are in the open
// log or in logs rotated out before it (the small memtable rotates the log
// every few commits here), and the store opens again. Each seed keeps a
// different half of the unsynced writes, torn and out of order, as a
// kernel's writeback may: a store whose log claimed more was synced than
// was (a Sync that only wrote) failed to open on most seeds.
func TestPebbleSyncedCommitsSurviveAPowerLoss(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { powerLoss(t, seed) })
	}
}

func powerLoss(t *testing.T, seed uint64) {
	mem := vfs.NewCrashableMem()
	s, err := Open("/db", Options{FS: mem, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	val := make([]byte, 200<<10)
	const synced = 40
	for i := range synced + 10 {
		val[0] = byte(i)
		if err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(kv.AppendUint64([]byte("k"), uint64(i)), val) }); err != nil {
			t.Fatal(err)
		}
		if i == synced-1 {
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 7))})
	s.Close()
	c, err := Open("/db", Options{FS: crashed})
	if err != nil {
		t.Fatalf("seed %d: the store does not open after the power loss: %v", seed, err)
	}
	defer c.Close()
	for i := range synced {
		got, err := getValue(c, kv.AppendUint64([]byte("k"), uint64(i)))
		if err != nil || len(got) != len(val) || got[0] != byte(i) {
			t.Fatalf("commit %d, synced before the power loss, is lost (len %d, err %v)", i, len(got), err)
		}
	}
}

func getValue(s kv.Store, key []byte) (v []byte, err error) {
	err = s.View(context.Background(), func(r kv.Reader) error {
		v, err = r.Get(key)
		return err
	})
	return v, err
}

// Pebble charges its memtables to the block cache: with the default sizes,
// once the memtables have filled, the block cache must still keep the
// blocks a lookup reads, or every lookup goes to the files.
func TestPebbleBlockCacheOutlivesFullMemtables(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*pebbleStore)
	ctx := context.Background()
	val := make([]byte, 4096)
	for i := range 24 << 10 { // 96 MiB: three memtables' worth
		if i%256 == 0 {
			err := s.Update(ctx, func(tx kv.Txn) error {
				for j := i; j < i+256; j++ {
					if err := tx.Set(kv.AppendUint64([]byte("b"), uint64(j)), val); err != nil {
						return err
					}
				}
				return tx.Set(kv.AppendUint64([]byte("i"), uint64(i)), val[:64])
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	key := kv.AppendUint64([]byte("i"), 256)
	for range 10 {
		if _, err := getValue(s, key); err != nil {
			t.Fatal(err)
		}
	}
	if m := s.db.Metrics().BlockCache; m.Hits == 0 {
		t.Fatalf("ten lookups of one key: block cache %+v, want hits", m)
	}
}

// The memtables, and so the log files Pebble preallocates for them, are
// sized to the disk: a 128th of it, from 4 MiB on a disk of 512 MiB or
// less to 32 MiB on one of 4 GiB or more. A file system that cannot tell
// its size gets the largest.
func TestMemtablesAreSizedToTheDisk(t *testing.T) {
	for _, c := range []struct{ disk, want uint64 }{
		{160 << 20, 4 << 20},
		{512 << 20, 4 << 20},
		{1 << 30, 8 << 20},
		{1<<30 + 100<<20, 8 << 20},
		{4 << 30, 32 << 20},
		{1 << 40, 32 << 20},
		{0, 32 << 20},
	} {
		fs := vfs.NewMem()
		if c.disk > 0 {
			fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: c.disk, AvailBytes: c.disk})
		}
		if got := memTableFor(fs, "/"); got != c.want {
			t.Errorf("a disk of %d MiB gets memtables of %d MiB, want %d", c.disk>>20, got>>20, c.want>>20)
		}
	}
}

// A provisional key is found after a crash only if the commit that last set
// it is the last commit the store kept (kv.ProvisionalTxn). Every commit of
// a random sequence writes its number to "n"; some also set the
// provisional key "p" to it, some Sync after. Each seed crashes once,
// keeping a random share of what was not synced, and checks the rule
// against what survived: "p" is there exactly when the last commit kept
// set it and no Sync came after that commit, and then holds its number.
func TestAProvisionalKeyOutlivesACrashOnlyAsPartOfTheLastCommitKept(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	t.Logf("seed base %d", base)
	for i := range uint64(40) {
		seed := base + i
		rng := rand.New(rand.NewPCG(seed, 1))
		mem := vfs.NewCrashableMem()
		s, err := Open("/db", Options{FS: mem, MemTableSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		setsP := map[uint64]bool{}       // commit number -> it set "p"
		syncedAfter := map[uint64]bool{} // commit number -> a Sync came after it
		commits := 1 + rng.IntN(30)
		for c := range uint64(commits) {
			setP := rng.IntN(2) == 0
			setsP[c] = setP
			err := s.Update(ctx, func(tx kv.Txn) error {
				if setP {
					if err := tx.(kv.ProvisionalTxn).SetProvisional([]byte("p"), kv.AppendUint64(nil, c)); err != nil {
						return err
					}
				}
				return tx.Set([]byte("n"), kv.AppendUint64(nil, c))
			})
			if err != nil {
				t.Fatal(err)
			}
			// Within the running store the rule holds at once.
			if v, err := getValue(s, []byte("p")); setP != (err == nil) || setP && kv.Uint64(v) != c {
				t.Fatalf("seed %d: after commit %d (sets p: %v) p reads %x, %v", seed, c, setP, v, err)
			}
			if rng.IntN(5) == 0 {
				if err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				for d := range c + 1 {
					syncedAfter[d] = true
				}
				if _, err := getValue(s, []byte("p")); !errors.Is(err, kv.ErrNotFound) {
					t.Fatalf("seed %d: p is there after a Sync: %v", seed, err)
				}
			}
		}
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, 2))})
		s.Close()
		c, err := Open("/db", Options{FS: crashed})
		if err != nil {
			t.Fatalf("seed %d: open after the crash: %v", seed, err)
		}
		nv, nerr := getValue(c, []byte("n"))
		pv, perr := getValue(c, []byte("p"))
		c.Close()
		if errors.Is(nerr, kv.ErrNotFound) {
			if perr == nil {
				t.Fatalf("seed %d: no commit kept, yet p = %x", seed, pv)
			}
			continue
		}
		if nerr != nil || perr != nil && !errors.Is(perr, kv.ErrNotFound) {
			t.Fatal(nerr, perr)
		}
		last := kv.Uint64(nv)
		want := setsP[last] && !syncedAfter[last]
		if want != (perr == nil) || want && kv.Uint64(pv) != last {
			t.Fatalf("seed %d: the last commit kept is %d (set p: %v, synced after: %v), and p reads %x (%v)",
				seed, last, setsP[last], syncedAfter[last], pv, perr)
		}
	}
}

// A clean Close deletes the provisional keys of the last commit.
func TestAProvisionalKeyIsGoneAfterACleanClose(t *testing.T) {
	dir := t.TempDir()
	s := openPebble(t, dir)
	ctx := context.Background()
	if err := s.Update(ctx, func(tx kv.Txn) error {
		return tx.(kv.ProvisionalTxn).SetProvisional([]byte("p"), []byte("x"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if v, err := getValue(s2, []byte("p")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("after a clean close p reads %q, %v", v, err)
	}
}
