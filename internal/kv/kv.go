package kv

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Reader.Get when the key has no value.
var ErrNotFound = errors.New("kv: not found")

// ErrLocked is returned by Open functions when the store's directory is
// already open in another process or another Store of this process.
var ErrLocked = errors.New("directory is locked by another open store (is another bucketfs running?)")

// ErrUnknownOutcome is returned (wrapped) by Update when the store cannot
// tell whether the transaction committed: the connection to the database
// was lost while the commit was under way. Its writes may have landed;
// Update does not run fn again, because repeating a write that did land
// could be wrong. The caller reads to find out.
var ErrUnknownOutcome = errors.New("kv: commit outcome unknown (connection lost during commit)")

// Reader reads a consistent state of the store. A Reader is valid only inside
// the View or Update call that provided it and must not be shared between
// goroutines.
type Reader interface {
	// Get returns the value stored at key, or ErrNotFound. The returned slice
	// is a copy the caller may keep and modify.
	Get(key []byte) ([]byte, error)

	// Scan calls fn for every key in [lower, upper) in ascending order. A nil
	// lower starts at the first key; a nil upper means no upper bound. fn
	// returns false to stop early. k and v are valid only during the call.
	// Inside an Update, Scan sees the transaction's writes made before Scan
	// was called, but not those fn makes while the scan runs.
	Scan(lower, upper []byte, fn func(k, v []byte) bool) error

	// Prefetch says that keys are about to be read with Get. A store whose
	// reads cross a network (PostgreSQL) reads them all now, in one request,
	// and answers their Gets from what it read; a store whose reads are
	// local (Pebble) does nothing. It never changes what a Get returns: the
	// values are those of the Reader's state, merged in a Txn with its own
	// writes at the time of the Get. A key prefetched and never read may
	// still count as read (for a serializable store's conflict checks), so
	// callers prefetch only keys they will read. The error is a failed read,
	// as Get's would be.
	Prefetch(keys ...[]byte) error

	// PrefetchRef is Prefetch of ref, of keys, and of the key ref's value
	// names: prefix followed by the first n bytes of that value (none when
	// ref has no value or a shorter one). An index entry and the record it
	// points to are read in one request.
	PrefetchRef(ref, prefix []byte, n int, keys ...[]byte) error
}

// RefKey is the key that value names for PrefetchRef(ref, prefix, n):
// prefix followed by value[:n], or nil when value is shorter than n.
func RefKey(prefix []byte, n int, value []byte) []byte {
	if len(value) < n {
		return nil
	}
	return append(append(make([]byte, 0, len(prefix)+n), prefix...), value[:n]...)
}

// Txn is a read-write transaction. Its reads see its own writes.
type Txn interface {
	Reader

	// Set stores value at key. The store copies key and value; the caller may
	// reuse them when Set returns.
	Set(key, value []byte) error

	// SetWith stores a value of n bytes at key that fill writes in place,
	// saving a copy of large values. fill must write all n bytes.
	SetWith(key []byte, n int, fill func(value []byte)) error

	// Delete removes key. Deleting a missing key is not an error.
	Delete(key []byte) error

	// DeleteRange removes every key in [lower, upper). upper must not be nil;
	// use PrefixEnd to bound a prefix.
	DeleteRange(lower, upper []byte) error
}

// ProvisionalTxn is the Txn of a store whose commits become durable only at
// Sync and which a crash cuts at a commit boundary, keeping a prefix of the
// commits (Pebble). SetProvisional stores value at key as Set does, and the
// store deletes the key again, in the same batch, with the next commit of
// any Update that does not set it provisionally itself; a Sync, and a clean
// Close, delete it first too. So a provisional key is found after a crash
// (by the next open of the store) only if the commit that last set it is
// the last commit the store kept: nothing committed after it survived, and
// no Sync covered it.
//
// meta marks the pieces of an unfinished write(2) with one, so that a crash
// that kept only its first pieces can be undone at the next start instead of
// every such write paying a sync (meta's unfinished.go).
type ProvisionalTxn interface {
	Txn
	SetProvisional(key, value []byte) error
}

// Snapshot is a read-only view of one committed state; see Store.Snapshot.
type Snapshot interface {
	Reader
	Close() error
}

// Store is an ordered transactional key-value store. All methods are safe for
// concurrent use.
type Store interface {
	// View runs fn against a consistent snapshot. It never waits for writers.
	// The error fn returns is returned unchanged.
	View(ctx context.Context, fn func(r Reader) error) error

	// Update runs fn as a serializable transaction. If fn returns nil its
	// writes are committed atomically; otherwise nothing is written and fn's
	// error is returned unchanged. Commits are visible at once but durable
	// only after Sync.
	//
	// fn may run more than once, each time on a fresh transaction; only the
	// last run commits. What fn does outside the store must be safe to
	// repeat (see "Rules for callers" in the package doc).
	// An error matching ErrUnknownOutcome means the writes may or may not
	// have committed.
	Update(ctx context.Context, fn func(tx Txn) error) error

	// UpdateSized is Update for a transaction expected to write about size
	// bytes, so that a large one (file data) is not copied as it grows.
	UpdateSized(ctx context.Context, size int, fn func(tx Txn) error) error

	// Sync makes every Update committed before the call durable.
	Sync(ctx context.Context) error

	// Snapshot pins the committed state of this moment for reading over a
	// longer time than a View should last (the exporter uploads a file's
	// bytes from one). Unlike a View's Reader, a Snapshot may be used from
	// several goroutines at once. Close it when done: it holds on to
	// state that compactions would otherwise free.
	Snapshot(ctx context.Context) (Snapshot, error)

	// Close releases the store. Calls after Close are not allowed.
	Close() error
}
