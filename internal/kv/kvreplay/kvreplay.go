// Package kvreplay is a kv.Store for tests that runs the fn of an Update
// twice: once on a transaction it then throws away, as a backend does when
// the commit fails with a serialization failure (PostgreSQL's SERIALIZABLE
// transactions), and again on a fresh transaction that it commits. It
// checks the rule kv's callers keep (see package kv, "Rules for callers"):
// fn may run more than once, so what it does outside the store must be
// safe to repeat. A caller that counts, calls back or sends from inside fn
// does so twice under this store, and its test sees the difference.
//
// Views, Sync and Snapshot pass through to the store it wraps. It is for
// tests only: it makes every replayed Update cost two.
package kvreplay

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"bucketfs/internal/kv"
)

// Options say which Updates are replayed.
type Options struct {
	// Fraction is the share of Updates replayed, chosen at random with
	// Seed; 0 or 1 (or more) replays every Update.
	Fraction float64
	// Seed seeds the choice when Fraction is below 1.
	Seed uint64
}

// Store is the replaying wrapper; see the package comment.
type Store struct {
	inner   kv.Store
	opt     Options
	mu      sync.Mutex // guards rnd
	rnd     *rand.Rand
	replays atomic.Int64
	between atomic.Pointer[func(ctx context.Context)]
}

// New wraps inner.
func New(inner kv.Store, opt Options) *Store {
	return &Store{inner: inner, opt: opt, rnd: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9E3779B97F4A7C15))}
}

// Inner is the wrapped store.
func (s *Store) Inner() kv.Store { return s.inner }

// BetweenRuns sets a hook called after each thrown-away run and before the
// run that commits, outside any transaction: a test commits there the
// concurrent change that made the first commit fail. An Update the hook
// makes on this store is replayed too (and calls the hook again), unless
// the hook takes itself out first (BetweenRuns(nil)). nil removes it.
func (s *Store) BetweenRuns(fn func(ctx context.Context)) {
	if fn == nil {
		s.between.Store(nil)
		return
	}
	s.between.Store(&fn)
}

// Replays counts the Updates whose fn ran on a thrown-away transaction.
func (s *Store) Replays() int64 { return s.replays.Load() }

// EnvVar turns the wrapper on in the test helpers that call FromEnv:
// "1" replays every Update, a number between 0 and 1 that share of them.
// EnvSeed fixes the seed of the latter.
const (
	EnvVar  = "BUCKETFS_KV_REPLAY"
	EnvSeed = "BUCKETFS_KV_REPLAY_SEED"
)

// FromEnv wraps db when EnvVar is set (see EnvVar), logging the fraction
// and the seed to tb, and returns db unchanged otherwise.
func FromEnv(tb testing.TB, db kv.Store) kv.Store {
	v := os.Getenv(EnvVar)
	if v == "" || v == "0" {
		return db
	}
	frac, err := strconv.ParseFloat(v, 64)
	if err != nil || frac <= 0 {
		tb.Fatalf("%s=%q: want 1 or a fraction between 0 and 1", EnvVar, v)
	}
	seed := rand.Uint64()
	if sv := os.Getenv(EnvSeed); sv != "" {
		if seed, err = strconv.ParseUint(sv, 10, 64); err != nil {
			tb.Fatalf("%s=%q: %v", EnvSeed, sv, err)
		}
	}
	tb.Logf("kv Updates replayed (kvreplay): %s=%g %s=%d", EnvVar, frac, EnvSeed, seed)
	return New(db, Options{Fraction: frac, Seed: seed})
}

// errThrowAway aborts the run whose transaction is thrown away.
var errThrowAway = errors.New("kvreplay: transaction thrown away")

func (s *Store) replay() bool {
	if s.opt.Fraction <= 0 || s.opt.Fraction >= 1 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Float64() < s.opt.Fraction
}

// View implements kv.Store.
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	return s.inner.View(ctx, fn)
}

// Update implements kv.Store.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return s.UpdateSized(ctx, 0, fn)
}

// UpdateSized implements kv.Store: fn runs on a transaction that is thrown
// away and then on one that commits. An error (or panic) of the first run
// is returned as it is, with nothing written and no second run, as a
// backend does when fn itself fails.
func (s *Store) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	if !s.replay() {
		return s.inner.UpdateSized(ctx, size, fn)
	}
	err := s.inner.UpdateSized(ctx, size, func(tx kv.Txn) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errThrowAway
	})
	if !errors.Is(err, errThrowAway) {
		return err
	}
	s.replays.Add(1)
	if hook := s.between.Load(); hook != nil {
		(*hook)(ctx)
	}
	return s.inner.UpdateSized(ctx, size, fn)
}

// Sync implements kv.Store.
func (s *Store) Sync(ctx context.Context) error { return s.inner.Sync(ctx) }

// Snapshot implements kv.Store.
func (s *Store) Snapshot(ctx context.Context) (kv.Snapshot, error) { return s.inner.Snapshot(ctx) }

// Close implements kv.Store.
func (s *Store) Close() error { return s.inner.Close() }

var _ kv.Store = (*Store)(nil)
