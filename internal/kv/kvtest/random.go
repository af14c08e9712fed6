package kvtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"bucketfs/internal/kv"
)

// Random Updates of sets, deletes, range deletes, reads, prefetches and
// scans (with bounds and early stops) over a small key space, checked against a model
// inside each Update (the writes merged over committed data) and in a
// View after it; every third Update fails on purpose and must leave
// nothing. The seed is printed; a failing seed replays.
func testRandomUpdatesMatchAModel(t *testing.T, s kv.Store) {
	seed := uint64(time.Now().UnixNano())
	if env := os.Getenv(SeedEnv); env != "" {
		seed, _ = strconv.ParseUint(env, 10, 64)
	}
	t.Logf("seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := []string{"", "\x00", "a", "a\x00", "a\xff", "ab", "b", "b\x00\x00", "ba", "c", "\xff", "\xff\xff"}
	key := func() []byte { return []byte(keys[1+rng.IntN(len(keys)-1)]) }
	bound := func() []byte {
		if rng.IntN(4) == 0 {
			return nil
		}
		return []byte(keys[rng.IntN(len(keys))])
	}
	committed := model{}
	ctx := context.Background()
	for round := range 60 {
		m := cloneModel(committed)
		fail := round%3 == 2
		err := s.Update(ctx, func(tx kv.Txn) error {
			m = cloneModel(committed) // fn may run again
			for op := range 12 {
				switch rng.IntN(8) {
				case 0, 1:
					k, v := key(), fmt.Sprint(round, ".", op)
					tx.Set(k, []byte(v))
					m[string(k)] = v
				case 2:
					k := key()
					tx.Delete(k)
					delete(m, string(k))
				case 3:
					lo, hi := key(), key()
					if string(lo) > string(hi) {
						lo, hi = hi, lo
					}
					tx.DeleteRange(lo, hi)
					for k := range m {
						if k >= string(lo) && k < string(hi) {
							delete(m, k)
						}
					}
				case 4:
					k := key()
					want, ok := m[string(k)]
					if got := Get(t, tx, string(k)); ok && got != want || !ok && got != "<none>" {
						return fmt.Errorf("seed %d round %d: Get(%q) = %q, want %q (present %v)", seed, round, k, got, want, ok)
					}
				case 6:
					// Read ahead, then read later: the Gets after it
					// (case 4) must still see the writes in between.
					var ks [][]byte
					for range 1 + rng.IntN(4) {
						ks = append(ks, key())
					}
					if err := tx.Prefetch(ks...); err != nil {
						return err
					}
				case 7:
					// A key whose value's first byte, after "a",
					// names another ("a" + "1" of "1.3" and so on,
					// missing mostly): read through it.
					if err := tx.PrefetchRef(key(), []byte("a"), 1, key()); err != nil {
						return err
					}
				case 5:
					lo, hi, limit := bound(), bound(), rng.IntN(4)
					if got, want := ScanKeys(t, tx, lo, hi, limit), m.scan(lo, hi, limit); !slices.Equal(got, want) {
						return fmt.Errorf("seed %d round %d: Scan[%q, %q) limit %d = %q, want %q", seed, round, lo, hi, limit, got, want)
					}
				}
			}
			if fail {
				return errFailOnPurpose
			}
			return nil
		})
		if fail && err == errFailOnPurpose {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		committed = m
		s.View(ctx, func(r kv.Reader) error {
			if got, want := ScanKeys(t, r, nil, nil, 0), committed.scan(nil, nil, 0); !slices.Equal(got, want) {
				t.Fatalf("seed %d round %d: committed %q, want %q", seed, round, got, want)
			}
			all := make([][]byte, len(keys))
			for i, k := range keys {
				all[i] = []byte(k)
			}
			if err := r.Prefetch(all...); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				want, ok := committed[k]
				if got := Get(t, r, k); ok && got != want || !ok && got != "<none>" {
					t.Fatalf("seed %d round %d: prefetched Get(%q) = %q, want %q (present %v)", seed, round, k, got, want, ok)
				}
			}
			return nil
		})
	}
}

// SeedEnv names the environment variable that replays a seed.
const SeedEnv = "BUCKETFS_KVTEST_SEED"

var errFailOnPurpose = fmt.Errorf("fn fails on purpose")

func cloneModel(m model) model {
	out := make(model, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
