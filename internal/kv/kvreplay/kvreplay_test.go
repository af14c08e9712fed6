package kvreplay

import (
	"context"
	"errors"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/testkv"
)

func openStore(t *testing.T) kv.Store {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func get(t *testing.T, s kv.Store, key string) string {
	t.Helper()
	var got string
	err := s.View(context.Background(), func(r kv.Reader) error {
		v, err := r.Get([]byte(key))
		if errors.Is(err, kv.ErrNotFound) {
			got = "<none>"
			return nil
		}
		got = string(v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAnUpdateRunsTwiceAndCommitsOnlyItsSecondRun(t *testing.T) {
	s := New(openStore(t), Options{})
	runs := 0
	var between []string
	s.BetweenRuns(func(ctx context.Context) { between = append(between, get(t, s, "run")) })
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		runs++
		if runs == 1 {
			if err := tx.Set([]byte("first"), []byte("x")); err != nil {
				return err
			}
		}
		return tx.Set([]byte("run"), []byte{byte('0' + runs)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || s.Replays() != 1 {
		t.Fatalf("fn ran %d times, %d replays; want 2 and 1", runs, s.Replays())
	}
	if len(between) != 1 || between[0] != "<none>" {
		t.Fatalf("between the runs the store held run=%q; want nothing of the first run", between)
	}
	if got := get(t, s, "run"); got != "2" {
		t.Fatalf("run = %q, want the second run's 2", got)
	}
	if got := get(t, s, "first"); got != "<none>" {
		t.Fatalf("the thrown-away run's write stayed: first = %q", got)
	}
}

func TestAnUpdateWhoseFnFailsRunsOnceAndWritesNothing(t *testing.T) {
	s := New(openStore(t), Options{})
	runs := 0
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx kv.Txn) error {
		runs++
		if err := tx.Set([]byte("k"), []byte("v")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || runs != 1 {
		t.Fatalf("err %v after %d runs; want boom after 1", err, runs)
	}
	if got := get(t, s, "k"); got != "<none>" {
		t.Fatalf("k = %q after a failed fn", got)
	}
}

func TestAFractionReplaysSomeUpdatesAndNotOthers(t *testing.T) {
	s := New(openStore(t), Options{Fraction: 0.5, Seed: 7})
	const n = 200
	for i := 0; i < n; i++ {
		if err := s.Update(context.Background(), func(tx kv.Txn) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.Replays(); r == 0 || r == n {
		t.Fatalf("%d of %d Updates replayed with Fraction 0.5 (seed 7)", r, n)
	}
}
