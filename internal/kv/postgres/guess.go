package postgres

import (
	"bytes"
	"sync"
)

// Guessed reads: an Update that reads keys a recent transaction of this
// store read or wrote takes their values from memory, and checks them in
// the database with its writes and COMMIT, in the same round trip.
//
// A file system operation is a read followed by an Update that reads the
// same keys again: the kernel looks a name up before it creates it, a
// write follows the create of its file, a close the write. Each such
// Update paid a round trip for its reads (BEGIN and a SELECT) before the
// one that sends its writes and COMMIT. With guesses it pays only the
// second, and the first statement of that batch checks the guesses.
//
// Invariant (what makes a guess safe): an Update commits only if every
// value it took from guesses equals the committed value of its key at
// the transaction's snapshot, checked by a statement of the transaction
// itself, before its writes (statements.checkGuesses; no row counts as a
// value, "none"). Every read of an Update is then a read of its snapshot,
// whether the database or memory answered it, and SERIALIZABLE orders it
// among all other transactions of every server as if it had read them
// itself: a guess can cost a round trip, never a wrong commit. A check
// that fails fails the statement, so the database skips the writes and
// COMMIT of the batch, and the transaction rolls back; Update then runs fn
// again without guesses (Stats.Stale counts these).
//
// An Update that guessed and commits nothing (fn wrote nothing, or
// returned an error) is checked too: fn may have told its caller
// something from a guess (a name exists, a file's size). One that wrote
// nothing checks its guesses in a transaction of its own (BEGIN, the check,
// COMMIT: one round trip); one whose fn returned an error runs fn again
// without guesses, and that run's outcome is the Update's.
//
// Only Views and Updates feed the guesses (not a Snapshot, which may be
// old), with values of at most maxGuessValue bytes: inodes and directory
// entries, not file data. Views never use them: a View answers from the
// database, so that a read through one server sees every commit made
// through any server before it began.
type guesses struct {
	mu sync.Mutex
	m  map[string][]byte // key -> value (nil: no row)
}

const (
	// maxGuesses bounds the keys kept. When full, an eighth of them, the
	// ones map iteration yields first (at random), are dropped.
	maxGuesses = 16384
	// maxGuessValue is the largest value kept.
	maxGuessValue = 1024
)

func newGuesses() *guesses { return &guesses{m: make(map[string][]byte)} }

// get returns the guess for key: its value (nil: no row), and whether
// there is one.
func (g *guesses) get(key []byte) ([]byte, bool) {
	g.mu.Lock()
	v, ok := g.m[string(key)]
	g.mu.Unlock()
	return v, ok
}

// put records v (nil: no row) as the last known value of key. v must not
// change afterwards. A value too large to keep drops the key's guess.
func (g *guesses) put(key, v []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(v) > maxGuessValue {
		delete(g.m, string(key))
		return
	}
	if _, ok := g.m[string(key)]; !ok && len(g.m) >= maxGuesses {
		n := 0
		for k := range g.m {
			delete(g.m, k)
			if n++; n >= maxGuesses/8 {
				break
			}
		}
	}
	g.m[string(key)] = v
}

// drop forgets the guesses of keys.
func (g *guesses) drop(keys map[string][]byte) {
	g.mu.Lock()
	for k := range keys {
		delete(g.m, k)
	}
	g.mu.Unlock()
}

// dropRange forgets the guesses of keys in r.
func (g *guesses) dropRange(r keyRange) {
	g.mu.Lock()
	for k := range g.m {
		if r.contains([]byte(k)) {
			delete(g.m, k)
		}
	}
	g.mu.Unlock()
}

// equalGuess reports whether two values (nil: no row) are the same.
func equalGuess(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}
