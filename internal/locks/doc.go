// Package locks holds the advisory file locks of a bucketfs file system:
// POSIX record locks (fcntl F_SETLK, F_SETLKW, F_GETLK; NFSv4 LOCK, LOCKT,
// LOCKU) and whole-file flock locks, shared by every client that reaches the
// file system through the vfs layer.
//
// # What it owns
//
// A [Table] maps an inode number to the locks held on that inode and to the
// goroutines waiting for one. It knows nothing about files, handles or
// clients beyond the [Owner] value each lock carries: the vfs layer chooses
// owners (the FUSE lock owner with Client 0, an NFSv4 client id and
// lock-owner pair) and tells the table when an owner or a whole client goes
// away ([Table.ReleaseOwner], [Table.ReleaseClient]). Locks are advisory and
// live in memory only; they do not survive a restart, as on a local file
// system.
//
// # Record locks
//
// Record locks follow POSIX semantics per owner. A request by an owner is
// applied to that owner's own locks in the range: it replaces them, splits a
// lock it covers only part of, and merges with the owner's locks of the same
// kind that overlap or touch it, so an owner's locks on an inode never
// overlap and same-kind neighbours never touch. Locking a read sub-range of
// your own write lock leaves the write lock on either side; unlocking the
// middle of a lock leaves two. A request conflicts only with the locks of
// other owners: two read locks never conflict, a write lock conflicts with
// any lock it overlaps. Ranges are inclusive, and End == [ToEOF] means "to
// the end of the file, however far it grows".
//
// [Table.Set] never blocks; it fails with [ErrWouldBlock] (which wraps
// syscall.EAGAIN). [Table.Wait] sleeps until the request can be granted or
// its context is done. Before each sleep it walks the waits-for graph (owner
// W waits for the owners whose locks block its request, which may themselves
// be waiting, on any inode) and fails with [ErrDeadlock] (wrapping
// syscall.EDEADLK) if the walk leads back to W, as Linux does. Whoever closes
// a cycle is the one told; the others keep waiting.
//
// # flock locks
//
// flock locks are a separate namespace, as on Linux: they cover the whole
// file, their owner is the open file description, and they never conflict
// with record locks, even those of the same Owner value. Converting a held
// flock lock is allowed and, as on Linux, not atomic: the old lock is
// dropped first, so a failed or cancelled conversion leaves the owner with
// no flock lock. flock waits take no part in deadlock detection.
//
// # Several servers
//
// When several servers serve one file system, each has its own Table for
// its own clients' owners, and [Table.Peers] connects it to the others:
// a request no local lock blocks is granted only if [Peers.Grant] finds no
// lock of another live server that it conflicts with ([Excludes]), and
// every release is told to [Peers.Release]. The package itself stores
// nothing; package vfs keeps the servers' locks in the shared kv store. A
// waiter blocked by another server's lock asks again every [Peers.Retry],
// and sooner when the locks on its inode change here. Deadlock detection
// sees only this Table's owners: a cycle through another server's owners
// is not found, and its waits end with their contexts.
//
// # Invariants
//
//   - The table's mutex is never held while a goroutine blocks. A waiter
//     sleeps on a channel that is closed whenever the locks on its inode
//     change (the per-inode "changed" signal), then re-checks; nothing polls
//     or sleeps for a fixed time.
//   - An inode with no locks and no waiters has no entry in the table, so
//     memory follows the set of locked files, not the set of files ever
//     locked.
//   - Grants are not fair: a waiter woken by a release competes with every
//     other request on the inode, and the first to take the mutex wins.
//
// The package keeps no package-level mutable state.
package locks
