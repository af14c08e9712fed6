package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"
	"bucketfs/internal/pgtest"
)

// Each way a guess can be wrong, made wrong by another server's commit
// after this one's View read the key: the Update must act on the
// committed value, never on the guess (guess.go's invariant), and say so
// in Stats.
func TestAGuessAnotherServerMadeWrongIsNeverActedOn(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	a, b := open(t, url, "bucketfs").(*Store), open(t, url, "bucketfs").(*Store)
	ctx := context.Background()
	// learn makes a guess of key in a: a View reads it.
	learn := func(key string) {
		t.Helper()
		a.View(ctx, func(r kv.Reader) error { _, err := r.Get([]byte(key)); return err })
		if _, ok := a.guesses.get([]byte(key)); !ok {
			t.Fatalf("a View's read of %q left no guess", key)
		}
	}
	// get reads key in fn's transaction: its value, or "none".
	get := func(tx kv.Txn, key string) (string, error) {
		v, err := tx.Get([]byte(key))
		if errors.Is(err, kv.ErrNotFound) {
			return "none", nil
		}
		return string(v), err
	}
	check := func(what string, stale0 int64, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
		if n := a.Stats().Stale - stale0; n != 1 {
			t.Errorf("%s: %d stale guesses counted, want 1", what, n)
		}
	}

	t.Run("a value changed", func(t *testing.T) {
		kvtest.Set(t, b, "v", "old")
		learn("v")
		kvtest.Set(t, b, "v", "new")
		stale := a.Stats().Stale
		err := a.Update(ctx, func(tx kv.Txn) error {
			v, err := get(tx, "v")
			if err != nil {
				return err
			}
			return tx.Set([]byte("v-copy"), []byte(v))
		})
		if err != nil {
			t.Fatal(err)
		}
		check("the copy written", stale, kvtest.ViewGet(t, b, "v-copy"), "new")
	})
	t.Run("a missing key made", func(t *testing.T) {
		learn("m")
		kvtest.Set(t, b, "m", "made")
		stale := a.Stats().Stale
		err := a.Update(ctx, func(tx kv.Txn) error {
			v, err := get(tx, "m")
			if err != nil {
				return err
			}
			return tx.Set([]byte("m-seen"), []byte(v))
		})
		if err != nil {
			t.Fatal(err)
		}
		check("what the Update saw", stale, kvtest.ViewGet(t, b, "m-seen"), "made")
	})
	t.Run("a key deleted", func(t *testing.T) {
		kvtest.Set(t, b, "d", "here")
		learn("d")
		if err := b.Update(ctx, func(tx kv.Txn) error { return tx.Delete([]byte("d")) }); err != nil {
			t.Fatal(err)
		}
		stale := a.Stats().Stale
		var seen string
		// Reads only: the guess is checked all the same.
		err := a.Update(ctx, func(tx kv.Txn) (err error) {
			seen, err = get(tx, "d")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		check("a read-only Update's answer", stale, seen, "none")
	})
	t.Run("an error from a guess", func(t *testing.T) {
		kvtest.Set(t, b, "e", "taken")
		learn("e")
		if err := b.Update(ctx, func(tx kv.Txn) error { return tx.Delete([]byte("e")) }); err != nil {
			t.Fatal(err)
		}
		runs := 0
		err := a.Update(ctx, func(tx kv.Txn) error {
			runs++
			v, err := get(tx, "e")
			if err != nil {
				return err
			}
			if v != "none" {
				return errTaken
			}
			return tx.Set([]byte("e"), []byte("mine"))
		})
		if err != nil {
			t.Fatalf("Update: %v; want it to run again without the guess and succeed", err)
		}
		if runs != 2 {
			t.Errorf("fn ran %d times, want 2 (with the guess, then without)", runs)
		}
		if got := kvtest.ViewGet(t, b, "e"); got != "mine" {
			t.Errorf("e = %q, want mine", got)
		}
	})
	t.Run("a right guess costs no read", func(t *testing.T) {
		kvtest.Set(t, b, "r", "1")
		learn("r")
		before := a.Stats()
		err := a.Update(ctx, func(tx kv.Txn) error {
			v, err := get(tx, "r")
			if err != nil {
				return err
			}
			return tx.Set([]byte("r"), []byte(v+"1"))
		})
		if err != nil {
			t.Fatal(err)
		}
		after := a.Stats()
		if rt, g, s := after.RoundTrips-before.RoundTrips, after.Guessed-before.Guessed, after.Stale-before.Stale; rt != 1 || g != 1 || s != 0 {
			t.Errorf("%d round trips, %d guessed reads, %d stale; want 1, 1, 0", rt, g, s)
		}
		if got := kvtest.ViewGet(t, b, "r"); got != "11" {
			t.Errorf("r = %q, want 11", got)
		}
	})
}

// Read-modify-write Updates racing through two servers, each reading
// keys its Views and its own commits made guesses of, many of them stale
// by the time they are used: no increment is lost, so no Update committed
// on a wrong guess. Random keys and interleaving; the seed is printed.
func TestIncrementsRacingThroughTwoServersWithGuessesLoseNone(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	stores := []*Store{open(t, url, "bucketfs").(*Store), open(t, url, "bucketfs").(*Store)}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	const keys, workers, steps = 4, 4, 150
	ctx := context.Background()
	key := func(i int) []byte { return []byte(fmt.Sprint("n", i)) }
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			s := stores[w%2]
			for range steps {
				k := key(rng.IntN(keys))
				if rng.IntN(3) == 0 { // a View: a fresh guess of k
					s.View(ctx, func(r kv.Reader) error { _, err := r.Get(k); return err })
				}
				err := s.Update(ctx, func(tx kv.Txn) error {
					n := 0
					v, err := tx.Get(k)
					switch {
					case err == nil:
						if n, err = strconv.Atoi(string(v)); err != nil {
							return err
						}
					case !errors.Is(err, kv.ErrNotFound):
						return err
					}
					return tx.Set(k, []byte(strconv.Itoa(n+1)))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sum := 0
	for i := range keys {
		n, err := strconv.Atoi(kvtest.ViewGet(t, stores[0], string(key(i))))
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	if sum != workers*steps {
		t.Errorf("the keys add up to %d, want %d: an increment was lost", sum, workers*steps)
	}
	var guessed, stale int64
	for _, s := range stores {
		guessed, stale = guessed+s.Stats().Guessed, stale+s.Stats().Stale
	}
	t.Logf("%d reads guessed, %d Updates found a guess stale", guessed, stale)
	if guessed == 0 || stale == 0 {
		t.Errorf("%d guessed reads, %d stale: the race proved nothing", guessed, stale)
	}
}

var errTaken = errors.New("taken")
