package meta

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

// checkCounters checks that what s reports of the export queue's length
// and of Usage is what the store holds: the q entries, and the sum over
// the inodes.
func checkCounters(t *testing.T, s *Store, when string) {
	t.Helper()
	ctx := context.Background()
	var queued int
	var want Usage
	err := s.kv.View(ctx, func(r kv.Reader) error {
		if err := r.Scan([]byte{pQueue}, kv.PrefixEnd([]byte{pQueue}), func(k, v []byte) bool {
			queued++
			return true
		}); err != nil {
			return err
		}
		var bad error
		err := r.Scan([]byte{pInode}, kv.PrefixEnd([]byte{pInode}), func(k, v []byte) bool {
			in, err := decodeInode(Ino(kv.Uint64(k[1:])), v)
			if err != nil {
				bad = err
				return false
			}
			u := usageOf(&in)
			want.Total += u.Total
			want.Dirty += u.Dirty
			return true
		})
		if err == nil {
			err = bad
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := s.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != queued || u != want {
		t.Fatalf("%s: the counters say %d queued and usage %+v; the store holds %d queue entries and usage %+v",
			when, n, u, queued, want)
	}
}

// cellKeys counts the keys of c's cells.
func cellKeys(t *testing.T, db kv.Store, c counter) (n int) {
	t.Helper()
	err := db.View(context.Background(), func(r kv.Reader) error {
		return r.Scan(c.prefix, kv.PrefixEnd(c.prefix), func(k, v []byte) bool {
			n++
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Two servers on one kv (two Stores) write, export, unlink and forget
// files at the same time: the queue's length and Usage each of them
// reports are the store's own sums at every pause, and stay so across
// restarts, while the cells of the Stores that are gone are folded away.
func TestCountersAreTheStoresSumsThroughTwoServersAndRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for round := range 4 {
		db, err := testkv.Open(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		var stores [2]*Store
		for i := range stores {
			if stores[i], err = Open(ctx, db, Options{ExportDelay: time.Minute}); err != nil {
				db.Close()
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(stores))
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- churn(ctx, s, fmt.Sprintf("r%d-s%d", round, i))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				db.Close()
				t.Fatal(err)
			}
		}
		for i, s := range stores {
			checkCounters(t, s, fmt.Sprintf("round %d, server %d", round, i))
		}
		// After a fold each Store holds one cell; the keys of earlier
		// rounds were folded into this round's by their Opens.
		for _, s := range stores {
			s.foldDeltas(ctx)
		}
		for _, c := range []counter{queuedCounter, usageCounter} {
			if n := cellKeys(t, db, c); n > 2 {
				t.Errorf("round %d: %d keys under %q for two Stores after their folds", round, n, c.prefix)
			}
		}
		for i, s := range stores {
			checkCounters(t, s, fmt.Sprintf("round %d, server %d, after the folds", round, i))
		}
		db.Close()
	}
}

// churn makes a directory and files in it through s, writes them, marks
// some exported, and unlinks and forgets others.
func churn(ctx context.Context, s *Store, name string) error {
	d, err := s.Create(ctx, RootIno, name, Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		return err
	}
	for i := range 40 {
		f, err := s.Create(ctx, d.Ino, fmt.Sprint(i), Inode{Mode: syscall.S_IFREG | 0o644}, nil)
		if err != nil {
			return err
		}
		in, err := s.WriteData(ctx, f.Ino, bytes.Repeat([]byte{'x'}, 100+i), 0, false, 1, Limits{}, nil)
		if err != nil {
			return err
		}
		switch i % 3 {
		case 0: // exported
			at, queued, err := queuedAtOf(ctx, s, f.Ino)
			if err != nil || !queued {
				return fmt.Errorf("file %d not queued after a write (%v)", i, err)
			}
			if _, _, err := s.Synced(ctx, Queued{Ino: f.Ino, Due: at}, in.Gen, func(*Inode) {}); err != nil {
				return err
			}
		case 1: // unlinked, and forgotten after its export
			if _, err := s.Remove(ctx, d.Ino, fmt.Sprint(i), false, nil); err != nil {
				return err
			}
			if err := s.Forget(ctx, f.Ino); err != nil {
				return err
			}
		}
	}
	return nil
}

func queuedAtOf(ctx context.Context, s *Store, ino Ino) (due int64, queued bool, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		due, queued, err = queuedAt(r, ino)
		return err
	})
	return due, queued, err
}

// A file system made before counters had cells keeps the queue's length
// and Usage in one key each (c/queued: 8 bytes, c/usage: 16). Opening it
// moves their values into cells, once: the counters read as before, the
// old keys are gone, and its inodes keep their numbers.
func TestSingleCountersOfAnOlderFileSystemKeepTheirValuesAfterTheUpgrade(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, db, Options{ExportDelay: time.Minute})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if err := churn(ctx, s, "d"); err != nil {
		db.Close()
		t.Fatal(err)
	}
	d, err := s.Lookup(ctx, RootIno, "d")
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	n, _, err := s.QueueStats(ctx)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	u, err := s.Usage(ctx)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if n == 0 || u.Total == 0 || u.Dirty == 0 {
		db.Close()
		t.Fatalf("nothing to move: %d queued, usage %+v", n, u)
	}
	// The layout of earlier versions: the sums in one key each.
	err = db.Update(ctx, func(tx kv.Txn) error {
		for _, c := range []counter{queuedCounter, usageCounter} {
			if err := tx.DeleteRange(c.prefix, kv.PrefixEnd(c.prefix)); err != nil {
				return err
			}
		}
		if err := tx.Set(queuedCounter.legacy, kv.AppendUint64(nil, uint64(n))); err != nil {
			return err
		}
		return tx.Set(usageCounter.legacy, kv.AppendUint64(kv.AppendUint64(nil, uint64(u.Total)), uint64(u.Dirty)))
	})
	if err == nil {
		err = db.Sync(ctx)
	}
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir)
	checkCounters(t, s, "after the upgrade")
	if got, _, err := s.QueueStats(ctx); err != nil || got != n {
		t.Fatalf("after the upgrade %d queued (%v), want %d", got, err, n)
	}
	if got, err := s.Usage(ctx); err != nil || got != u {
		t.Fatalf("after the upgrade usage %+v (%v), want %+v", got, err, u)
	}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		for _, c := range []counter{queuedCounter, usageCounter} {
			if _, err := r.Get(c.legacy); err == nil {
				return fmt.Errorf("the old key %q is still there", c.legacy)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, RootIno, "d"); err != nil || got.Ino != d.Ino {
		t.Fatalf("after the upgrade d is inode %d (%v), was %d", got.Ino, err, d.Ino)
	}
	// Changes after the upgrade count on top of the moved values.
	if err := churn(ctx, s, "e"); err != nil {
		t.Fatal(err)
	}
	checkCounters(t, s, "after changes on the upgraded file system")
}

// Two servers (two Stores on one kv) create files at the same time, many
// more than one claim of numbers each, and restart: no inode number is
// given out twice, every name keeps its number across the restart, and
// the numbers given out after it are new.
func TestInodeNumbersAreGivenOutOnceAcrossServersAndRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	seen := map[Ino]string{}
	const perWorker = inoClaim*3/4 + 10 // two workers take a Store past its claim
	var before Ino                      // every number given out before this round is below it
	for round := range 2 {
		db, err := testkv.Open(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		var stores [2]*Store
		for i := range stores {
			if stores[i], err = Open(ctx, db, Options{ExportDelay: time.Minute}); err != nil {
				db.Close()
				t.Fatal(err)
			}
		}
		type made struct {
			name string
			ino  Ino
		}
		var mu sync.Mutex
		var all []made
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			s := stores[w%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("r%d-w%d", round, w)
				d, err := s.Create(ctx, RootIno, name, Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
				if err != nil {
					errs <- err
					return
				}
				mine := []made{{name, d.Ino}}
				for i := range perWorker {
					f, err := s.Create(ctx, d.Ino, fmt.Sprint(i), Inode{Mode: syscall.S_IFREG | 0o644}, nil)
					if err != nil {
						errs <- err
						return
					}
					mine = append(mine, made{name + "/" + fmt.Sprint(i), f.Ino})
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			db.Close()
			t.Fatal(err)
		}
		var top Ino
		for _, m := range all {
			if other, ok := seen[m.ino]; ok {
				db.Close()
				t.Fatalf("inode %d given to %s and to %s", m.ino, other, m.name)
			}
			if m.ino < before {
				db.Close()
				t.Fatalf("round %d gave %s the number %d, below %d, where earlier rounds gave theirs", round, m.name, m.ino, before)
			}
			seen[m.ino] = m.name
			top = max(top, m.ino)
		}
		before = top + 1
		if err := db.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	// After a restart every name still has its number.
	s := openStore(t, dir)
	for ino, path := range seen {
		p := RootIno
		name := path
		if d, f, ok := strings.Cut(path, "/"); ok {
			dir, err := s.Lookup(ctx, RootIno, d)
			if err != nil {
				t.Fatal(err)
			}
			p, name = dir.Ino, f
		}
		got, err := s.Lookup(ctx, p, name)
		if err != nil || got.Ino != ino {
			t.Fatalf("after a restart %s is inode %d (%v), was %d", path, got.Ino, err, ino)
		}
	}
}
