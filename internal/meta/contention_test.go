package meta

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

// accessLog records, while on, the keys the Updates of one Store read
// (Get, and the ranges Scan covers) and write (Set, Delete, DeleteRange):
// what a serializable backend (PostgreSQL) locks or checks for conflicts.
type accessLog struct {
	mu                      sync.Mutex
	on                      bool
	reads, writes           map[string]bool
	readRanges, writeRanges []keyRange
}

// keyRange is [lower, upper); a nil upper has no bound.
type keyRange struct{ lower, upper []byte }

func (r keyRange) has(k string) bool {
	return k >= string(r.lower) && (r.upper == nil || k < string(r.upper))
}

func (r keyRange) overlaps(o keyRange) bool {
	return (o.upper == nil || bytes.Compare(r.lower, o.upper) < 0) &&
		(r.upper == nil || bytes.Compare(o.lower, r.upper) < 0)
}

func (r keyRange) String() string { return fmt.Sprintf("[%q, %q)", r.lower, r.upper) }

func newAccessLog() *accessLog {
	return &accessLog{reads: map[string]bool{}, writes: map[string]bool{}}
}

func (l *accessLog) start() {
	l.mu.Lock()
	l.on = true
	l.mu.Unlock()
}

func (l *accessLog) point(write bool, k []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	if write {
		l.writes[string(k)] = true
	} else {
		l.reads[string(k)] = true
	}
}

func (l *accessLog) span(write bool, lower, upper []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	r := keyRange{append([]byte(nil), lower...), append([]byte(nil), upper...)}
	if upper == nil {
		r.upper = nil
	}
	if write {
		l.writeRanges = append(l.writeRanges, r)
	} else {
		l.readRanges = append(l.readRanges, r)
	}
}

// common lists what both logs touch: keys both read or wrote, keys one
// touched inside a range the other scanned or deleted, and ranges of the
// two that overlap.
func (l *accessLog) common(o *accessLog) []string {
	var out []string
	points := func(a *accessLog) map[string]bool {
		m := map[string]bool{}
		for k := range a.reads {
			m[k] = true
		}
		for k := range a.writes {
			m[k] = true
		}
		return m
	}
	ranges := func(a *accessLog) []keyRange { return append(slices.Clone(a.readRanges), a.writeRanges...) }
	lp, op := points(l), points(o)
	for k := range lp {
		if op[k] {
			out = append(out, fmt.Sprintf("key %q", k))
		}
	}
	for _, pair := range [][2]*accessLog{{l, o}, {o, l}} {
		for _, r := range ranges(pair[0]) {
			for k := range points(pair[1]) {
				if r.has(k) {
					out = append(out, fmt.Sprintf("key %q in range %s", k, r))
				}
			}
		}
	}
	for _, r := range ranges(l) {
		for _, q := range ranges(o) {
			if r.overlaps(q) {
				out = append(out, fmt.Sprintf("ranges %s and %s", r, q))
			}
		}
	}
	slices.Sort(out)
	return out
}

// recordingKV is a kv.Store whose Updates are recorded in log; everything
// else goes to the store below unchanged.
type recordingKV struct {
	kv.Store
	log *accessLog
}

func (r recordingKV) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return r.Store.Update(ctx, func(tx kv.Txn) error { return fn(recordingTxn{tx, r.log}) })
}

func (r recordingKV) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	return r.Store.UpdateSized(ctx, size, func(tx kv.Txn) error { return fn(recordingTxn{tx, r.log}) })
}

type recordingTxn struct {
	kv.Txn
	log *accessLog
}

func (t recordingTxn) Get(key []byte) ([]byte, error) {
	t.log.point(false, key)
	return t.Txn.Get(key)
}

func (t recordingTxn) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	t.log.span(false, lower, upper)
	return t.Txn.Scan(lower, upper, fn)
}

func (t recordingTxn) Prefetch(keys ...[]byte) error {
	for _, k := range keys {
		t.log.point(false, k)
	}
	return t.Txn.Prefetch(keys...)
}

// PrefetchRef records ref and keys; the key ref names is recorded by the
// Get that reads it (an entry's inode is always read after).
func (t recordingTxn) PrefetchRef(ref, prefix []byte, n int, keys ...[]byte) error {
	t.log.point(false, ref)
	for _, k := range keys {
		t.log.point(false, k)
	}
	return t.Txn.PrefetchRef(ref, prefix, n, keys...)
}

func (t recordingTxn) Set(key, value []byte) error {
	t.log.point(true, key)
	return t.Txn.Set(key, value)
}

func (t recordingTxn) SetWith(key []byte, n int, fill func(value []byte)) error {
	t.log.point(true, key)
	return t.Txn.SetWith(key, n, fill)
}

func (t recordingTxn) Delete(key []byte) error {
	t.log.point(true, key)
	return t.Txn.Delete(key)
}

func (t recordingTxn) DeleteRange(lower, upper []byte) error {
	t.log.span(true, lower, upper)
	return t.Txn.DeleteRange(lower, upper)
}

// twoServers opens two Stores on one kv, as two servers of one file
// system on one database (the change log on), each recording its Updates.
func twoServers(t *testing.T) (a, b *Store, la, lb *accessLog) {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	la, lb = newAccessLog(), newAccessLog()
	if a, err = Open(ctx, recordingKV{db, la}, Options{ExportDelay: time.Minute, ChangeLog: true}); err != nil {
		t.Fatal(err)
	}
	if b, err = Open(ctx, recordingKV{db, lb}, Options{ExportDelay: time.Minute, ChangeLog: true}); err != nil {
		t.Fatal(err)
	}
	return a, b, la, lb
}

// Issue 23, item 6: the schema must not need one row lock that every
// operation takes. Two servers (two Stores on one kv) create, write,
// mkdir, link, chmod, rename, truncate, unlink and rmdir, each in its own
// directory: the keys the transactions of one read or write are never
// keys (or in ranges) the other's transactions read or write, so on a
// serializable database neither waits for nor aborts the other. The
// write runs under a tier capacity, as a server with --tier-capacity
// does.
func TestOperationsInTwoDirectoriesThroughTwoServersTouchNoCommonKey(t *testing.T) {
	a, b, la, lb := twoServers(t)
	ctx := context.Background()
	da := mustCreate(t, a, RootIno, "a", syscall.S_IFDIR|0o755)
	db := mustCreate(t, b, RootIno, "b", syscall.S_IFDIR|0o755)
	la.start()
	lb.start()

	lim := Limits{Dirty: 1 << 30, Total: 1 << 30}
	steps := []struct {
		what string
		do   func(s *Store, dir Ino) error
	}{
		{"create f", func(s *Store, dir Ino) error {
			_, err := s.Create(ctx, dir, "f", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
			return err
		}},
		{"write f", func(s *Store, dir Ino) error {
			f, err := s.Lookup(ctx, dir, "f")
			if err != nil {
				return err
			}
			_, err = s.WriteData(ctx, f.Ino, []byte("a small file"), 0, false, time.Now().UnixNano(), lim, nil)
			return err
		}},
		{"append to f", func(s *Store, dir Ino) error {
			f, err := s.Lookup(ctx, dir, "f")
			if err != nil {
				return err
			}
			_, err = s.WriteData(ctx, f.Ino, []byte(", longer"), 0, true, time.Now().UnixNano(), lim, nil)
			return err
		}},
		{"mkdir sub", func(s *Store, dir Ino) error {
			_, err := s.Create(ctx, dir, "sub", Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
			return err
		}},
		{"create g", func(s *Store, dir Ino) error {
			_, err := s.Create(ctx, dir, "g", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
			return err
		}},
		{"link g as sub/h", func(s *Store, dir Ino) error {
			g, err := s.Lookup(ctx, dir, "g")
			if err != nil {
				return err
			}
			sub, err := s.Lookup(ctx, dir, "sub")
			if err != nil {
				return err
			}
			_, err = s.Link(ctx, g.Ino, sub.Ino, "h", nil)
			return err
		}},
		{"chmod g", func(s *Store, dir Ino) error {
			g, err := s.Lookup(ctx, dir, "g")
			if err != nil {
				return err
			}
			_, err = s.Update(ctx, g.Ino, func(in *Inode) (Change, error) {
				in.Mode = in.Type() | 0o600
				return AttrChange, nil
			})
			return err
		}},
		{"rename f to sub/f2", func(s *Store, dir Ino) error {
			sub, err := s.Lookup(ctx, dir, "sub")
			if err != nil {
				return err
			}
			_, err = s.Rename(ctx, dir, "f", sub.Ino, "f2", 0, nil)
			return err
		}},
		{"truncate sub/f2", func(s *Store, dir Ino) error {
			sub, err := s.Lookup(ctx, dir, "sub")
			if err != nil {
				return err
			}
			f, err := s.Lookup(ctx, sub.Ino, "f2")
			if err != nil {
				return err
			}
			_, err = s.ResizeData(ctx, f.Ino, 3, false, nil)
			return err
		}},
		{"unlink g", func(s *Store, dir Ino) error {
			_, err := s.Remove(ctx, dir, "g", false, nil)
			return err
		}},
		{"unlink sub/h, the last name of g", func(s *Store, dir Ino) error {
			sub, err := s.Lookup(ctx, dir, "sub")
			if err != nil {
				return err
			}
			_, err = s.Remove(ctx, sub.Ino, "h", false, nil)
			return err
		}},
		{"unlink sub/f2", func(s *Store, dir Ino) error {
			sub, err := s.Lookup(ctx, dir, "sub")
			if err != nil {
				return err
			}
			_, err = s.Remove(ctx, sub.Ino, "f2", false, nil)
			return err
		}},
		{"rmdir sub", func(s *Store, dir Ino) error {
			_, err := s.Remove(ctx, dir, "sub", true, nil)
			return err
		}},
	}
	for _, st := range steps {
		if err := st.do(a, da.Ino); err != nil {
			t.Fatalf("%s in a through the first server: %v", st.what, err)
		}
		if err := st.do(b, db.Ino); err != nil {
			t.Fatalf("%s in b through the second server: %v", st.what, err)
		}
	}
	if len(la.writes) == 0 || len(lb.writes) == 0 {
		t.Fatalf("the servers' transactions wrote %d and %d keys: nothing was recorded", len(la.writes), len(lb.writes))
	}
	if common := la.common(lb); len(common) > 0 {
		t.Fatalf("the two servers' transactions share %d keys or ranges:\n%s", len(common), joinLines(common))
	}
	// Disjoint keys are not enough on PostgreSQL, whose serializable
	// transactions lock what they read by index page: two operations that
	// each read and wrote a counter's key (all of which lie on one or two
	// pages) aborted one another. They read none (counters.go).
	for i, l := range []*accessLog{la, lb} {
		for _, c := range []counter{queuedCounter, usageCounter} {
			counterKeys := keyRange{c.prefix, kv.PrefixEnd(c.prefix)}
			for k := range l.reads {
				if counterKeys.has(k) {
					t.Errorf("server %d read the counter key %q", i, k)
				}
			}
			for _, r := range l.readRanges {
				if r.overlaps(counterKeys) {
					t.Errorf("server %d read the range %s of counter keys", i, r)
				}
			}
		}
	}
	checkCounters(t, a, "after the operations")
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString("\t" + l + "\n")
	}
	return b.String()
}
