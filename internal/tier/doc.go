// Package tier is bucketfs's high-performance storage: file data on local
// disk, per inode.
//
// # Model
//
// For every inode it holds, the tier keeps a sparse data file, laid out like
// the file itself (byte i of the file is byte i of the data file), and an
// extent map: the sorted, coalesced list of byte ranges that are present,
// meaning they hold valid data. A range that is not present may hold anything
// (usually a hole); the caller must fetch it from the bucket. Alongside the
// map the tier keeps the inode's logical size as it knows it.
//
//   - Create starts a file made on the file side: all of [0, size) present.
//   - Init starts an object imported from the bucket: nothing present. Fill
//     stores fetched bucket data into the missing sub-ranges only, so it never
//     overwrites a newer local write; Reset discards everything when the
//     object changed in the bucket.
//   - WriteAt marks what it writes present, and, when it starts past the
//     logical size, the gap too (the gap is local zeros, not bucket data).
//     Truncate up makes the grown range present for the same reason; Punch
//     makes its range present as zeros.
//   - Missing tells the caller which ranges to fetch; ReadAt reads ranges the
//     caller knows are present.
//
// The tier does not know which inodes are dirty (not yet exported): the
// metadata layer does. Evict and EvictIdle ask the caller, through a pinned
// callback, and never evict a pinned inode.
//
// # Durability
//
// Extent maps live in memory and reach disk only on Sync and Close: Sync
// fsyncs the data file, then replaces the map file atomically (temporary
// file, fsync, rename, fsync of the directory). Hence the invariant: a map on
// disk never claims a range whose data was not durable before the map was
// written. Present ranges that were never synced are lost in a crash, as
// unsynced data may be. Operations that destroy claimed data (Create over old
// state, Reset, Remove, Truncate down) first durably remove or shrink the map,
// so no crash can revive a claim over data that is gone. On Open, an inode is
// kept only if both its data file and its map survive; stray data files, maps
// and temporary files are deleted, and data past the recorded size is cut off.
//
// # Layout
//
// dir/LOCK is flock'ed while a Tier is open. Data and maps live in
// dir/XX/YY/<16 hex digits of the inode>.data and .map, XX and YY being the
// two low bytes of the inode number, so 65536 leaf directories (created on
// demand) share the files and none grows to millions of entries.
//
// # Concurrency and performance
//
// No lock shared by all inodes is held across disk I/O. A sharded table maps
// inodes to their state; each inode has its own locks (see the inode type for
// which operation takes which). Reads and writes to different, and to the
// same, inode run in parallel, with pread and pwrite on a cached descriptor.
// Open descriptors are bounded (Options.MaxOpenFiles) by a clock sweep that
// costs the hot path one atomic load. Usage counts allocated blocks; writes
// only flag an inode and Usage re-measures flagged inodes.
//
// The package is Linux-only: it relies on fallocate, SEEK_DATA and SEEK_HOLE.
package tier
