// Package tier is bucketfs's high-performance storage: the bytes of files
// kept on local disk, in the same key-value store as the namespace, written
// in the same transaction as the inode they belong to.
//
// # Model
//
// A file's local bytes are blocks of BlockSize bytes under the key
// b<ino><block index>. A block records which of its bytes are present (hold
// the file's current content) and what they are. A byte of the file that no
// block holds is either the byte of the file's base object in the bucket
// (when it lies below the inode's Backed offset, kept by package meta) or a
// zero (at or past Backed: a hole or a local extension). Hence a file made on
// the file side (Backed 0) needs no block for its holes, an object imported
// from the bucket (Backed = its size) needs none until it is read or written,
// and a write into a large imported file stores only what it writes. Each
// block is stamped with the generation of its last file-side change
// (Stamp), which tells the blocks the bucket does not hold yet (what the
// tier's capacity for unexported data counts) from those it does (which
// eviction may drop).
//
// The functions here work inside a caller's kv transaction (kv.Txn) or view
// (kv.Reader); package meta calls them in the same transaction that changes
// the inode's size, generation and sync state. This package knows nothing of
// inodes beyond their number and Backed, and keeps no state of its own except
// the in-memory recency of use that eviction orders by.
//
// # Why the bytes live beside the inode
//
// Crash safety follows from the store's own guarantees instead of an order
// of fsyncs between two stores: a transaction is atomic, and after any crash
// (a kill -9, or a power loss that drops every write not synced) the store
// holds exactly the transactions up to some point, including every one that
// was synced. So a file's size, generation and bytes always agree; an fsync
// is one sync of the store's log; a truncate or an O_TRUNC never destroys
// bytes that a durable older state still refers to, since the older state
// is either wholly there or wholly replaced; and the exporter uploads from a
// snapshot of the store, which fixes a file's bytes, size and generation at
// one instant without copying anything.
//
// # Invariants (kept by the callers in package meta)
//
//   - No block holds a present byte at or past the file's size.
//   - Backed <= size, and the bytes of the base object below Backed that no
//     block holds are the file's content: every local change below Backed
//     writes blocks (Write, Punch) or lowers Backed (Cut).
//   - A block is never stored empty: a block with no present byte is deleted.
//   - A block stamped at or below the inode's exported generation holds only
//     bytes of the base object, all below Backed: only Write and Punch
//     change bytes, and they stamp the blocks they change above it; Fill
//     and Cut keep stamps; an export raises the exported generation only
//     when its object holds every block as it is (package meta, Synced).
package tier
