// Package kvtest is the contract every kv.Store backend keeps: one suite of
// behaviours, run by each backend's tests with its own opener (kv/pebble,
// kv/postgres), so that meta never needs to know which backend it has.
package kvtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/kv"
)

// Behaviors are the behaviours every kv.Store backend must have, by name.
var Behaviors = []struct {
	Name string
	Test func(t *testing.T, s kv.Store)
}{
	{"GetReturnsWhatSetStored", testGetSetDelete},
	{"GetReturnsACopyTheCallerOwns", testGetReturnsCopy},
	{"ScanHonorsBoundsAndStopsEarly", testScanBounds},
	{"KeysSortBytewiseWithZeroAndFFBytes", testBytewiseOrder},
	{"ScanMergesTheTxnWritesOverManyCommittedKeys", testScanMergesManyKeys},
	{"LargeValuesRoundTrip", testLargeValues},
	{"UpdateWritesNothingWhenFnFails", testUpdateRollback},
	{"UpdateWritesNothingWhenFnPanics", testUpdatePanicRollback},
	{"UpdateReadsItsOwnWrites", testReadYourWrites},
	{"ViewSeesASnapshotDespiteConcurrentUpdate", testViewSnapshotIsolation},
	{"ViewNeverSeesHalfAnUpdate", testViewNeverSeesHalfAnUpdate},
	{"SnapshotIsStableAndSharedByGoroutines", testSnapshot},
	{"ConcurrentUpdatesAreSerializable", testConcurrentCounter},
	{"ConcurrentUpdatesNeverWriteSkew", testNoWriteSkew},
	{"RandomUpdatesMatchAModel", testRandomUpdatesMatchAModel},
	{"PrefetchChangesNoAnswer", testPrefetch},
	{"PrefetchRefChangesNoAnswer", testPrefetchRef},
	{"UpdateAndViewRefuseACancelledContext", testCancelledContext},
}

// Run runs every behaviour as a subtest on a fresh, empty store from open.
// open registers the store's Close with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) kv.Store) {
	for _, b := range Behaviors {
		t.Run(b.Name, func(t *testing.T) { b.Test(t, open(t)) })
	}
}

// Set commits the pairs key, value, ... in one Update.
func Set(t testing.TB, s kv.Store, kvs ...string) {
	t.Helper()
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i := 0; i < len(kvs); i += 2 {
			if err := tx.Set([]byte(kvs[i]), []byte(kvs[i+1])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// Get returns the value of key as a string, or "<none>".
func Get(t testing.TB, r kv.Reader, key string) string {
	t.Helper()
	v, err := r.Get([]byte(key))
	if errors.Is(err, kv.ErrNotFound) {
		return "<none>"
	}
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(v)
}

// ViewGet is Get in a View of its own.
func ViewGet(t testing.TB, s kv.Store, key string) string {
	t.Helper()
	var got string
	if err := s.View(context.Background(), func(r kv.Reader) error {
		got = Get(t, r, key)
		return nil
	}); err != nil {
		t.Fatalf("View: %v", err)
	}
	return got
}

// ScanKeys returns "k=v" for each key Scan visits, stopping after limit
// entries when limit > 0.
func ScanKeys(t testing.TB, r kv.Reader, lower, upper []byte, limit int) []string {
	t.Helper()
	var out []string
	err := r.Scan(lower, upper, func(k, v []byte) bool {
		out = append(out, string(k)+"="+string(v))
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func testGetSetDelete(t *testing.T, s kv.Store) {
	if got := ViewGet(t, s, "a"); got != "<none>" {
		t.Fatalf("empty store: Get(a) = %q", got)
	}
	Set(t, s, "a", "1")
	if got := ViewGet(t, s, "a"); got != "1" {
		t.Fatalf("Get(a) = %q, want 1", got)
	}
	Set(t, s, "a", "2")
	if got := ViewGet(t, s, "a"); got != "2" {
		t.Fatalf("after overwrite Get(a) = %q, want 2", got)
	}
	Set(t, s, "empty", "")
	if got := ViewGet(t, s, "empty"); got != "" {
		t.Fatalf("Get(empty) = %q, want empty value", got)
	}
	if err := s.Update(context.Background(), func(tx kv.Txn) error {
		if err := tx.Delete([]byte("missing")); err != nil {
			return err
		}
		return tx.Delete([]byte("a"))
	}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := ViewGet(t, s, "a"); got != "<none>" {
		t.Fatalf("after Delete Get(a) = %q", got)
	}
}

func testGetReturnsCopy(t *testing.T, s kv.Store) {
	Set(t, s, "k", "value")
	var kept []byte
	s.View(context.Background(), func(r kv.Reader) error {
		kept, _ = r.Get([]byte("k"))
		kept[0] = 'X'
		return nil
	})
	Set(t, s, "k", "other")
	if string(kept) != "Xalue" {
		t.Fatalf("kept value changed under the caller: %q", kept)
	}
	if got := ViewGet(t, s, "k"); got != "other" {
		t.Fatalf("Get(k) = %q, want other", got)
	}
}

func testScanBounds(t *testing.T, s kv.Store) {
	Set(t, s, "a", "1", "b", "2", "c", "3", "d", "4", "p\xff", "5", "p\xff\x00", "6", "q", "7")
	tests := []struct {
		name         string
		lower, upper []byte
		limit        int
		want         string
	}{
		{"AllKeys", nil, nil, 0, "[a=1 b=2 c=3 d=4 p\xff=5 p\xff\x00=6 q=7]"},
		{"HalfOpenRange", []byte("b"), []byte("d"), 0, "[b=2 c=3]"},
		{"NoLowerBound", nil, []byte("c"), 0, "[a=1 b=2]"},
		{"NoUpperBound", []byte("d"), nil, 0, "[d=4 p\xff=5 p\xff\x00=6 q=7]"},
		{"EmptyRange", []byte("b"), []byte("b"), 0, "[]"},
		{"BoundsBetweenKeys", []byte("bb"), []byte("cc"), 0, "[c=3]"},
		{"PrefixWithFF", []byte("p\xff"), kv.PrefixEnd([]byte("p\xff")), 0, "[p\xff=5 p\xff\x00=6]"},
		{"StopsWhenFnReturnsFalse", nil, nil, 2, "[a=1 b=2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.View(context.Background(), func(r kv.Reader) error {
				if got := fmt.Sprint(ScanKeys(t, r, tt.lower, tt.upper, tt.limit)); got != tt.want && !(got == "[]" && tt.want == "[]") {
					t.Errorf("View Scan = %q, want %q", got, tt.want)
				}
				return nil
			})
			s.Update(context.Background(), func(tx kv.Txn) error {
				if got := fmt.Sprint(ScanKeys(t, tx, tt.lower, tt.upper, tt.limit)); got != tt.want {
					t.Errorf("Update Scan = %q, want %q", got, tt.want)
				}
				return nil
			})
		})
	}
}

func testUpdateRollback(t *testing.T, s kv.Store) {
	Set(t, s, "keep", "old")
	errBoom := errors.New("boom")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("keep"), []byte("new"))
		tx.Set([]byte("added"), []byte("x"))
		tx.Delete([]byte("keep"))
		return fmt.Errorf("wrapped: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update error = %v, want fn's error", err)
	}
	if got := ViewGet(t, s, "keep"); got != "old" {
		t.Errorf("Get(keep) = %q, want old", got)
	}
	if got := ViewGet(t, s, "added"); got != "<none>" {
		t.Errorf("Get(added) = %q, want none", got)
	}
}

func testUpdatePanicRollback(t *testing.T, s kv.Store) {
	func() {
		defer func() { recover() }()
		s.Update(context.Background(), func(tx kv.Txn) error {
			tx.Set([]byte("p"), []byte("x"))
			panic("fn panics")
		})
	}()
	// The writer slot must have been released, or this blocks.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Update(ctx, func(tx kv.Txn) error { return nil }); err != nil {
		t.Fatalf("Update after panic: %v", err)
	}
	if got := ViewGet(t, s, "p"); got != "<none>" {
		t.Errorf("Get(p) = %q, want none", got)
	}
}

func testReadYourWrites(t *testing.T, s kv.Store) {
	Set(t, s, "a", "1", "b", "2", "c", "3", "d", "4")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		tx.Set([]byte("b"), []byte("20"))
		tx.Set([]byte("bb"), []byte("25"))
		tx.Delete([]byte("c"))
		if got := Get(t, tx, "b"); got != "20" {
			t.Errorf("Get(b) = %q, want own write 20", got)
		}
		if got := Get(t, tx, "c"); got != "<none>" {
			t.Errorf("Get(c) = %q, want own delete", got)
		}
		if got := Get(t, tx, "a"); got != "1" {
			t.Errorf("Get(a) = %q, want committed 1", got)
		}
		if got := fmt.Sprint(ScanKeys(t, tx, nil, nil, 0)); got != "[a=1 b=20 bb=25 d=4]" {
			t.Errorf("Scan = %s", got)
		}
		// Writes made while a scan runs must not disturb it.
		var seen []string
		err := tx.Scan(nil, nil, func(k, v []byte) bool {
			seen = append(seen, string(k))
			if err := tx.Set(append([]byte("z"), k...), v); err != nil {
				t.Errorf("Set in Scan: %v", err)
			}
			return true
		})
		if err != nil || fmt.Sprint(seen) != "[a b bb d]" {
			t.Errorf("Scan with writes = %v, %v", seen, err)
		}
		if err := tx.DeleteRange([]byte("a"), []byte("c")); err != nil {
			return err
		}
		if got := fmt.Sprint(ScanKeys(t, tx, nil, []byte("z"), 0)); got != "[d=4]" {
			t.Errorf("Scan after DeleteRange = %s", got)
		}
		if got := Get(t, tx, "bb"); got != "<none>" {
			t.Errorf("Get(bb) after DeleteRange = %q", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	s.View(context.Background(), func(r kv.Reader) error {
		if got := fmt.Sprint(ScanKeys(t, r, nil, nil, 0)); got != "[d=4 za=1 zb=20 zbb=25 zd=4]" {
			t.Errorf("committed = %s", got)
		}
		return nil
	})
}

func testViewSnapshotIsolation(t *testing.T, s kv.Store) {
	Set(t, s, "a", "1")
	err := s.View(context.Background(), func(r kv.Reader) error {
		if got := Get(t, r, "a"); got != "1" {
			t.Fatalf("Get(a) = %q", got)
		}
		done := make(chan error)
		go func() {
			done <- s.Update(context.Background(), func(tx kv.Txn) error {
				tx.Set([]byte("a"), []byte("2"))
				return tx.Set([]byte("b"), []byte("2"))
			})
		}()
		if err := <-done; err != nil {
			return err
		}
		if got := Get(t, r, "a"); got != "1" {
			t.Errorf("inside View after Update: Get(a) = %q, want 1", got)
		}
		if got := fmt.Sprint(ScanKeys(t, r, nil, nil, 0)); got != "[a=1]" {
			t.Errorf("inside View after Update: Scan = %s", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ViewGet(t, s, "b"); got != "2" {
		t.Errorf("new View: Get(b) = %q, want 2", got)
	}

	// The same when the View starts with a Scan and reads a key after.
	err = s.View(context.Background(), func(r kv.Reader) error {
		if got := fmt.Sprint(ScanKeys(t, r, nil, nil, 0)); got != "[a=2 b=2]" {
			t.Errorf("Scan = %s", got)
		}
		if err := s.Update(context.Background(), func(tx kv.Txn) error {
			tx.Delete([]byte("a"))
			return tx.Set([]byte("c"), []byte("3"))
		}); err != nil {
			return err
		}
		if got := Get(t, r, "a"); got != "2" {
			t.Errorf("inside View after Update: Get(a) = %q, want 2", got)
		}
		if got := Get(t, r, "c"); got != "<none>" {
			t.Errorf("inside View after Update: Get(c) = %q, want none", got)
		}
		if got := fmt.Sprint(ScanKeys(t, r, []byte("b"), nil, 0)); got != "[b=2]" {
			t.Errorf("inside View after Update: Scan = %s", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testConcurrentCounter(t *testing.T, s kv.Store) {
	const workers, each = 8, 50
	key := []byte("counter")
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := s.Update(context.Background(), func(tx kv.Txn) error {
					var n uint64
					v, err := tx.Get(key)
					switch {
					case err == nil:
						n = kv.Uint64(v)
					case !errors.Is(err, kv.ErrNotFound):
						return err
					}
					return tx.Set(key, kv.AppendUint64(nil, n+1))
				})
				if err != nil {
					t.Errorf("Update: %v", err)
					return
				}
			}
		}()
	}
	// Readers run alongside and must never see a torn or decreasing value.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.View(context.Background(), func(r kv.Reader) error {
				if v, err := r.Get(key); err == nil {
					if n := kv.Uint64(v); n < last {
						t.Errorf("counter went back from %d to %d", last, n)
					} else {
						last = n
					}
				}
				return nil
			})
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	s.View(context.Background(), func(r kv.Reader) error {
		v, err := r.Get(key)
		if err != nil || kv.Uint64(v) != workers*each {
			t.Errorf("counter = %v (%v), want %d", v, err, workers*each)
		}
		return nil
	})
}

func testCancelledContext(t *testing.T, s kv.Store) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := s.Update(cancelled, func(tx kv.Txn) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Update(cancelled) = %v, ran=%v", err, ran)
	}
	if err := s.View(cancelled, func(r kv.Reader) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("View(cancelled) = %v, ran=%v", err, ran)
	}
}

// Prefetch reads ahead and changes no answer: a View's Gets after it see
// its one state (not an Update committed in between), a missing key stays
// missing, a returned value is a copy; in an Update, writes and deletes
// made after the Prefetch win over what it read.
func testPrefetch(t *testing.T, s kv.Store) {
	Set(t, s, "a", "1", "b", "2", "c", "3")
	ctx := context.Background()
	err := s.View(ctx, func(r kv.Reader) error {
		if err := r.Prefetch([]byte("a"), []byte("b"), []byte("zz"), []byte("a")); err != nil {
			return err
		}
		Set(t, s, "a", "changed", "zz", "new")
		v, err := r.Get([]byte("a"))
		if err != nil || string(v) != "1" {
			t.Errorf("Get(a) after Prefetch = %q, %v; want 1 (the View's state)", v, err)
		}
		v[0] = 'x'
		if got := Get(t, r, "a"); got != "1" {
			t.Errorf("Get(a) again = %q: the first Get did not return a copy", got)
		}
		if got := Get(t, r, "zz"); got != "<none>" {
			t.Errorf("Get(zz) = %q, want none (missing in the View's state)", got)
		}
		if got := Get(t, r, "c"); got != "3" {
			t.Errorf("Get(c) (not prefetched) = %q, want 3", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx kv.Txn) error {
		if err := tx.Set([]byte("b"), []byte("mine")); err != nil {
			return err
		}
		if err := tx.Prefetch([]byte("a"), []byte("b"), []byte("c"), []byte("q")); err != nil {
			return err
		}
		if err := tx.Delete([]byte("a")); err != nil {
			return err
		}
		if err := tx.DeleteRange([]byte("c"), []byte("d")); err != nil {
			return err
		}
		if err := tx.Set([]byte("q"), []byte("set later")); err != nil {
			return err
		}
		for k, want := range map[string]string{"a": "<none>", "b": "mine", "c": "<none>", "q": "set later", "zz": "new"} {
			if got := Get(t, tx, k); got != want {
				t.Errorf("in the Update, Get(%s) after Prefetch = %q, want %q", k, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// PrefetchRef reads an index entry and what it names and changes no
// answer: the named key, a named key that is missing, a ref that is
// missing or too short, and in an Update a ref rewritten before the call
// (the key its new value names is what Gets then see).
func testPrefetchRef(t *testing.T, s kv.Store) {
	Set(t, s, "ix/a", "01xx", "ix/short", "0", "r/01", "one", "r/02", "two", "other", "o")
	ctx := context.Background()
	check := func(r kv.Reader, want map[string]string) {
		t.Helper()
		for k, w := range want {
			if got := Get(t, r, k); got != w {
				t.Errorf("Get(%q) after PrefetchRef = %q, want %q", k, got, w)
			}
		}
	}
	err := s.View(ctx, func(r kv.Reader) error {
		for _, ref := range []string{"ix/a", "ix/short", "ix/none"} {
			if err := r.PrefetchRef([]byte(ref), []byte("r/"), 2, []byte("other")); err != nil {
				return err
			}
		}
		Set(t, s, "r/01", "changed")
		check(r, map[string]string{"ix/a": "01xx", "r/01": "one", "ix/short": "0", "ix/none": "<none>", "other": "o", "r/0": "<none>"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx kv.Txn) error {
		if err := tx.Set([]byte("ix/a"), []byte("02")); err != nil {
			return err
		}
		if err := tx.PrefetchRef([]byte("ix/a"), []byte("r/"), 2); err != nil {
			return err
		}
		if err := tx.PrefetchRef([]byte("ix/b"), []byte("r/"), 2); err != nil {
			return err
		}
		if err := tx.Delete([]byte("r/02")); err != nil {
			return err
		}
		check(tx, map[string]string{"ix/a": "02", "r/02": "<none>", "r/01": "changed", "ix/b": "<none>"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
