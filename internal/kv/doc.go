// Package kv is the ordered, transactional key-value store under the
// bucketfs namespace.
//
// # What it owns
//
// The namespace (inodes, directory entries, symlink targets, xattrs, sync
// state and the export queue) lives in package meta and is written once,
// above the [Store] interface. A backend only stores bytes: it knows nothing
// about inodes, and the interface carries no backend types, so the embedded
// Pebble store and the PostgreSQL store for several servers are
// interchangeable.
//
// # Model
//
// Keys are byte strings ordered bytewise. There are two kinds of access:
//
//   - [Store.View] runs fn against a consistent, read-only snapshot. Every read
//     in one View sees the same committed state, and a concurrent Update never
//     shows through half-way. Views never wait for writers.
//   - [Store.Update] runs fn as a serializable read-modify-write transaction.
//     Reads inside it see the transaction's own writes layered over committed
//     data; the writes become visible all at once when fn returns nil, and
//     not at all when fn returns an error (or panics).
//
// Update commits are atomic and visible to later Views at once, but not
// necessarily durable: a crash may lose the most recent commits. [Store.Sync]
// makes every Update that committed before it durable. The namespace calls it
// where POSIX promises durability (fsync), at every checkpoint, and before
// the exporter touches the bucket, so the common path pays no disk flush.
//
// # Backends
//
// Package [bucketfs/internal/kv/pebble] is the embedded default: one
// process, Updates serialized through one writer slot, durable at Sync.
// Package [bucketfs/internal/kv/postgres] keeps the store in PostgreSQL for
// several servers sharing one file system: SERIALIZABLE transactions that
// are retried on serialization failures, durable at commit. Package
// [bucketfs/internal/kv/kvtest] is the contract both keep, run by each
// backend's tests.
//
// # Rules for callers
//
//   - Values returned by Reader.Get are copies the caller owns. Keys and values
//     passed to a Scan callback are valid only during that call.
//   - fn may run more than once: a backend whose commit can fail for a
//     reason a new try cures (PostgreSQL's serialization failures) runs it
//     again on a fresh transaction, and only the last run's writes are
//     committed (Pebble runs it once). So fn's effects outside the store
//     must be safe to repeat: set results in variables that the last run
//     overwrites (reset them at the start of fn), and do side effects
//     after Update returns nil, or make them idempotent. Nothing outside
//     the store is rolled back on error. Package kvreplay runs every fn
//     twice, for tests that check this.
//   - An Update whose commit outcome cannot be known (the connection to the
//     database broke while the commit was under way) fails with an error
//     matching [ErrUnknownOutcome]: its writes may or may not have
//     committed, and the caller must read to find out before repeating a
//     write that is not idempotent.
//   - A Reader or Txn must not be used after its View or Update returns, nor
//     from more than one goroutine.
//   - Never call Update from inside another Update or View fn of the same
//     Store: Pebble's writer slot is not reentrant and the call deadlocks
//     (unless its context is cancelled); PostgreSQL's pool may run out of
//     connections the same way.
//
// The helpers [AppendUint64], [Uint64] and [PrefixEnd] build the ordered keys
// the namespace uses: big-endian integers sort numerically, and PrefixEnd
// turns a prefix into the exclusive upper bound of a Scan.
package kv
