// Package kv is the ordered, transactional key-value store under the
// bucketfs namespace.
//
// # What it owns
//
// The namespace (inodes, directory entries, symlink targets, xattrs, sync
// state and the export queue) lives in package meta and is written once,
// above the [Store] interface. A backend only stores bytes: it knows nothing
// about inodes, and the interface carries no backend types, so the embedded
// Pebble store ([OpenPebble]) and a later PostgreSQL store for several
// servers are interchangeable.
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
// # The Pebble backend
//
// Pebble has no optimistic transactions. Update therefore builds an indexed
// batch while holding the store's single writer slot: writers are serialized,
// which is what makes them serializable, and is cheap on one machine because
// an Update never waits on the network. A waiting Update gives up when its
// context is cancelled. Views take no writer lock; each one reads through a
// Pebble iterator created at its first read, which pins that state of the
// database (and its memtables and sstables) until the View returns, so keep
// Views short: never hold one across a network call; a [Store.Snapshot]
// (a pebble.Snapshot) is what may be held that long. Commits use
// pebble.NoSync; Sync writes an empty record to the write-ahead log with
// pebble.Sync, which fsyncs the log up to and including every earlier record
// (older log files are synced when they are rotated out). After any crash
// the store holds exactly the commits up to some point, every synced one
// among them: the log is replayed in order and stops at the first record
// that did not fully reach the disk. The directories the store creates are
// synced into their parents, so the store itself survives a power loss
// right after its first start.
//
// Pebble holds an exclusive lock on the LOCK file in its directory. Opening a
// directory that another process (or another Store in this process) has open
// fails with [ErrLocked].
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
//   - A Reader or Txn must not be used after its View or Update returns, nor
//     from more than one goroutine.
//   - Never call Update from inside another Update or View fn of the same
//     Store: the writer slot is not reentrant and the call deadlocks (unless
//     its context is cancelled).
//
// The helpers [AppendUint64], [Uint64] and [PrefixEnd] build the ordered keys
// the namespace uses: big-endian integers sort numerically, and PrefixEnd
// turns a prefix into the exclusive upper bound of a Scan.
package kv
