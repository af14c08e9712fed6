// Package pebble is the embedded [kv.Store]: one Pebble database in a
// directory of the local disk, for one bucketfs process.
//
// Pebble has no optimistic transactions. Update therefore builds an indexed
// batch while holding the store's single writer slot: writers are serialized,
// which is what makes them serializable, and is cheap on one machine because
// an Update never waits on the network. A waiting Update gives up when its
// context is cancelled. Update never conflicts, so it runs fn exactly once.
// Views take no writer lock; each one reads through a
// Pebble iterator created at its first read, which pins that state of the
// database (and its memtables and sstables) until the View returns, so keep
// Views short: never hold one across a network call; a [kv.Store.Snapshot]
// (a pebble.Snapshot) is what may be held that long. Commits use
// pebble.NoSync; Sync writes an empty record to the write-ahead log with
// pebble.Sync, which fsyncs the log up to and including every earlier record
// (older log files are synced when they are rotated out). After any crash
// the store holds exactly the commits up to some point, every synced one
// among them: the log is replayed in order and stops at the first record
// that did not fully reach the disk. The directories the store creates are
// synced into their parents, so the store itself survives a power loss
// right after its first start. Provisional keys ([kv.ProvisionalTxn]) rely
// on that order: the next commit deletes them in its own batch, so one
// found after a crash was set by the last commit the log kept.
//
// Pebble holds an exclusive lock on the LOCK file in its directory. Opening a
// directory that another process (or another Store in this process) has open
// fails with [kv.ErrLocked].
package pebble
