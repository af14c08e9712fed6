package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"bucketfs/internal/kv"
)

// model is the expected content of a store: what a Scan must show.
type model map[string]string

// scan returns the model's "k=v" entries in [lower, upper), bytewise
// ordered, at most limit of them when limit > 0.
func (m model) scan(lower, upper []byte, limit int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if bytes.Compare([]byte(k), lower) < 0 || upper != nil && bytes.Compare([]byte(k), upper) >= 0 {
			continue
		}
		out = append(out, k+"="+m[k])
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out
}

// Keys order bytewise, as unsigned bytes, shorter prefix first: 0x00 and
// 0xff bytes included, both for committed keys and a transaction's own.
func testBytewiseOrder(t *testing.T, s kv.Store) {
	keys := []string{"\xff\xff\xff", "a\x00", "\x00\x01", "a\xff\x00", "\x80", "a", "\x00",
		"a\x7f", "\xff", "b", "a\x80", "\x01", "a\x00\x00", "\xff\x00", "\x7f", "a\xff", "\x00\x00",
		"a\x01", "a\xff\xff", "\xff\xff"}
	m := model{}
	for i, k := range keys {
		if i%2 == 0 {
			Set(t, s, k, fmt.Sprintf("%x", k))
		}
		m[k] = fmt.Sprintf("%x", k)
	}
	check := func(where string, r kv.Reader) {
		bounds := [][2][]byte{{nil, nil}, {[]byte("a"), kv.PrefixEnd([]byte("a"))}, {[]byte("a\xff"), nil},
			{[]byte("\x00"), []byte("\x00\x01")}, {[]byte("\xff"), []byte("\xff\xff")}, {nil, []byte("\x01")}}
		for _, b := range bounds {
			if got, want := ScanKeys(t, r, b[0], b[1], 0), m.scan(b[0], b[1], 0); !slices.Equal(got, want) {
				t.Errorf("%s: Scan[%q, %q) = %q, want %q", where, b[0], b[1], got, want)
			}
		}
		for _, k := range keys {
			if got := Get(t, r, k); got != m[k] {
				t.Errorf("%s: Get(%q) = %q, want %q", where, k, got, m[k])
			}
		}
	}
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		for i, k := range keys {
			if i%2 == 1 {
				if err := tx.Set([]byte(k), []byte(m[k])); err != nil {
					return err
				}
			}
		}
		check("in the Update that wrote half", tx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.View(context.Background(), func(r kv.Reader) error { check("View", r); return nil })
}

// A transaction's sets, deletes and range deletes are merged over a range
// of committed keys larger than any one read of a backend (the PostgreSQL
// store pages through a Scan), and what commits is that merge.
func testScanMergesManyKeys(t *testing.T, s kv.Store) {
	const n = 2500
	key := func(i int) string { return string(kv.AppendUint64([]byte("k"), uint64(i))) }
	m := model{}
	ctx := context.Background()
	if err := s.Update(ctx, func(tx kv.Txn) error {
		for i := range n {
			m[key(i)] = fmt.Sprint("c", i)
			if err := tx.Set([]byte(key(i)), []byte(m[key(i)])); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bounds := [][2][]byte{{nil, nil}, {[]byte(key(50)), []byte(key(2000))}, {[]byte(key(1100)), nil}, {[]byte("k"), []byte(key(150))}}
	check := func(where string, r kv.Reader) {
		for _, b := range bounds {
			for _, limit := range []int{0, 1, 1234} {
				if got, want := ScanKeys(t, r, b[0], b[1], limit), m.scan(b[0], b[1], limit); !slices.Equal(got, want) {
					t.Errorf("%s: Scan[%x, %x) limit %d: %d entries, want %d; differ at %d", where, b[0], b[1], limit, len(got), len(want), firstDifference(got, want))
				}
			}
		}
		for _, i := range []int{0, 99, 100, 205, 1099, 1100, 1500, 1505, 2499, 3000} {
			if got, want := Get(t, r, key(i)), m[key(i)]; got != want && !(got == "<none>" && want == "") {
				t.Errorf("%s: Get(k%d) = %q, want %q", where, i, got, want)
			}
		}
	}
	if err := s.Update(ctx, func(tx kv.Txn) error {
		if err := tx.DeleteRange([]byte(key(100)), []byte(key(1100))); err != nil {
			return err
		}
		for i := 100; i < 1100; i++ {
			delete(m, key(i))
		}
		for i := 1500; i < 1510; i++ {
			tx.Delete([]byte(key(i)))
			delete(m, key(i))
		}
		for _, i := range []int{200, 201, 205, 210, 1500, 3000} {
			m[key(i)] = "t"
			tx.Set([]byte(key(i)), []byte("t"))
		}
		m["j"] = "t"
		tx.Set([]byte("j"), []byte("t"))
		check("in the Update", tx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(r kv.Reader) error { check("View after commit", r); return nil })
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Values of file blocks (4 KiB to 64 KiB) and larger round-trip through
// Set, SetWith and UpdateSized, inside the transaction and after it.
func testLargeValues(t *testing.T, s kv.Store) {
	pattern := func(n int, seed byte) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(i*7) + seed
		}
		return v
	}
	want := map[string][]byte{"block4k": pattern(4<<10, 1), "block64k": pattern(64<<10, 2), "big": pattern(1<<20, 3)}
	ctx := context.Background()
	err := s.UpdateSized(ctx, 1<<20+68<<10, func(tx kv.Txn) error {
		if err := tx.Set([]byte("block4k"), want["block4k"]); err != nil {
			return err
		}
		for _, k := range []string{"block64k", "big"} {
			if err := tx.SetWith([]byte(k), len(want[k]), func(v []byte) { copy(v, want[k]) }); err != nil {
				return err
			}
		}
		for k, w := range want {
			if got, err := tx.Get([]byte(k)); err != nil || !bytes.Equal(got, w) {
				t.Errorf("in the Update: Get(%s) = %d bytes, %v; want the %d written", k, len(got), err, len(w))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.View(ctx, func(r kv.Reader) error {
		for k, w := range want {
			if got, err := r.Get([]byte(k)); err != nil || !bytes.Equal(got, w) {
				t.Errorf("View: Get(%s) = %d bytes, %v; want the %d written", k, len(got), err, len(w))
			}
		}
		n := 0
		r.Scan(nil, nil, func(k, v []byte) bool {
			if !bytes.Equal(v, want[string(k)]) {
				t.Errorf("View: Scan %s = %d bytes, want the %d written", k, len(v), len(want[string(k)]))
			}
			n++
			return true
		})
		if n != len(want) {
			t.Errorf("View: Scan saw %d keys, want %d", n, len(want))
		}
		return nil
	})
}

// Each Update moves a marker: x and y both become i, z<i-1> is replaced by
// z<i>. A View, whichever reads it makes, sees all of one Update or none.
func testViewNeverSeesHalfAnUpdate(t *testing.T, s kv.Store) {
	const updates = 150
	ctx := context.Background()
	z := func(i uint64) []byte { return kv.AppendUint64([]byte("z"), i) }
	if err := s.Update(ctx, func(tx kv.Txn) error {
		tx.Set([]byte("x"), kv.AppendUint64(nil, 0))
		tx.Set([]byte("y"), kv.AppendUint64(nil, 0))
		return tx.Set(z(0), nil)
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var views atomic.Int64 // Views that ran to the end
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				err := s.View(ctx, func(r kv.Reader) error {
					var zs []uint64
					if err := r.Scan([]byte("z"), kv.PrefixEnd([]byte("z")), func(k, v []byte) bool {
						zs = append(zs, kv.Uint64(k[1:]))
						return true
					}); err != nil {
						return err
					}
					x, err := r.Get([]byte("x"))
					if err != nil {
						return err
					}
					y, err := r.Get([]byte("y"))
					if err != nil {
						return err
					}
					if kv.Uint64(x) != kv.Uint64(y) || len(zs) != 1 || zs[0] != kv.Uint64(x) {
						t.Errorf("a View saw half an Update: x=%d y=%d z=%v", kv.Uint64(x), kv.Uint64(y), zs)
					}
					return nil
				})
				if err != nil {
					t.Errorf("View: %v", err)
					return
				}
				views.Add(1)
			}
		}()
	}
	// Keep updating until the readers have run Views among the Updates.
	for i := uint64(1); i <= updates || views.Load() < 50 && i < 100*updates; i++ {
		err := s.Update(ctx, func(tx kv.Txn) error {
			tx.Set([]byte("x"), kv.AppendUint64(nil, i))
			tx.Delete(z(i - 1))
			tx.Set(z(i), nil)
			return tx.Set([]byte("y"), kv.AppendUint64(nil, i))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	readers.Wait()
	if views.Load() == 0 {
		t.Error("no View ran during the Updates")
	}
}

// A Snapshot keeps showing the state of its moment to several goroutines
// at once while Updates commit, until it is closed.
func testSnapshot(t *testing.T, s kv.Store) {
	ctx := context.Background()
	Set(t, s, "a", "1", "b", "1")
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx kv.Txn) error {
		tx.Set([]byte("a"), []byte("2"))
		tx.Delete([]byte("b"))
		return tx.Set([]byte("c"), []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	for g := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := range 20 {
				if got := Get(t, snap, "a") + Get(t, snap, "b") + Get(t, snap, "c"); got != "11<none>" {
					t.Errorf("reader %d, read %d: snapshot shows a, b, c = %q, want 1, 1, none", g, i, got)
					return
				}
				if got := fmt.Sprint(ScanKeys(t, snap, nil, nil, 0)); got != "[a=1 b=1]" {
					t.Errorf("reader %d, read %d: snapshot Scan = %s", g, i, got)
					return
				}
			}
		}()
	}
	for i := range 10 {
		Set(t, s, "d", fmt.Sprint(i))
	}
	readers.Wait()
	if err := snap.Close(); err != nil {
		t.Fatalf("Snapshot.Close: %v", err)
	}
	if got := ViewGet(t, s, "a") + ViewGet(t, s, "b") + ViewGet(t, s, "d"); got != "2<none>9" {
		t.Errorf("View after the snapshot: a, b, d = %q", got)
	}
}

// Two keys on and off, at least one on: each worker turns its own key off
// when both are on, and back on when it is off. Under snapshot isolation
// two workers can both see both on and both turn theirs off (write skew);
// serializable Updates never let that commit.
func testNoWriteSkew(t *testing.T, s kv.Store) {
	ctx := context.Background()
	keys := [2][]byte{[]byte("on0"), []byte("on1")}
	Set(t, s, "on0", "1", "on1", "1")
	errBothOff := errors.New("both keys off")
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				err := s.Update(ctx, func(tx kv.Txn) error {
					mine, err := tx.Get(keys[w])
					if err != nil {
						return err
					}
					other, err := tx.Get(keys[1-w])
					if err != nil {
						return err
					}
					switch {
					case string(mine) == "0" && string(other) == "0":
						return errBothOff
					case string(mine) == "0":
						return tx.Set(keys[w], []byte("1"))
					case string(other) == "1":
						return tx.Set(keys[w], []byte("0"))
					}
					return nil
				})
				if err != nil {
					t.Errorf("worker %d: Update: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := ViewGet(t, s, "on0") + ViewGet(t, s, "on1"); got == "00" {
		t.Errorf("both keys off at the end")
	}
}
