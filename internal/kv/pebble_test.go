package kv

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func openPebble(t testing.TB, dir string) Store {
	t.Helper()
	s, err := OpenPebble(dir, PebbleOptions{CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("OpenPebble: %v", err)
	}
	return s
}

func TestPebbleStore(t *testing.T) {
	for _, b := range storeBehaviors {
		t.Run(b.name, func(t *testing.T) {
			s := openPebble(t, t.TempDir())
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			b.test(t, s)
		})
	}
}

func TestPebbleKeepsDataAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openPebble(t, dir)
	set(t, s, "a", "1", "b", "2")
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = openPebble(t, dir)
	defer s.Close()
	if got := viewGet(t, s, "b"); got != "2" {
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
		set(t, s, string(AppendUint64([]byte("k"), uint64(i))), "v")
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed)
	c := openPebble(t, crashed)
	defer c.Close()
	if got := viewGet(t, c, string(AppendUint64([]byte("k"), 99))); got != "v" {
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
	_, err := OpenPebble(dir, PebbleOptions{})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second OpenPebble = %v, want ErrLocked", err)
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
		_, err := OpenPebble(dir, PebbleOptions{})
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("OpenPebble in child = %v, want ErrLocked", err)
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
	key := func(i int) []byte { return AppendUint64([]byte("k"), uint64(i)) }
	if err := s.Update(ctx, func(tx Txn) error {
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
	if err := s.Update(ctx, func(tx Txn) error {
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
	s.View(ctx, func(r Reader) error {
		for i := range n + 2 {
			if got, w := get(t, r, string(key(i))), want(i); got != w && !(i == n+1 && got == "<none>") {
				t.Fatalf("Get(k%d) = %q, want %q", i, got, w)
			}
		}
		count := 0
		r.Scan([]byte("k"), PrefixEnd([]byte("k")), func(k, v []byte) bool {
			if i := int(Uint64(k[1:])); string(v) != want(i) {
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
