// Package vfs gives POSIX semantics to the namespace in package meta, the
// data in package tier and the objects in the bucket. The FUSE and NFS front
// ends are thin adapters onto this API: every permission check, every
// decision about where a read is served from, and every lock lives here.
// When several servers share one store (Config.Liveness), each publishes
// its locks, opens and NFS share reservations there for the others
// (shared.go).
//
// # Reads
//
// A regular file's bytes are either present in the tier or backed by one
// pinned object version (the inode's Base). Files created on the file side
// are wholly in the tier. A file imported from the bucket that is smaller
// than the import threshold is fetched whole into the tier when it is first
// opened, and served from the tier afterwards. A file at or above the direct
// read size is streamed from the bucket with parallel ranged GETs
// (package readahead), pinned to the version seen at open, so a concurrent
// overwrite in the bucket never mixes two versions in one read stream;
// ranges written locally are served from the tier. Sizes in between fetch
// the ranges a read needs into the tier.
//
// # Writes
//
// Every write lands in the tier in the same transaction as its record in
// meta (size, times, a data change that (re)starts the export quiet
// period), so a crash never separates a file's bytes from its record.
// Writing into a large imported file never downloads the rest of it:
// untouched ranges stay in the bucket and the exporter copies them server
// side. fsync is one sync of the store that holds both.
//
// # Permissions
//
// Checks follow POSIX on mode, uid and gid with the caller's credentials
// (Cred); uid 0 passes read and write checks and needs one execute bit for
// execute. A caller is in the groups its Cred names, primary and
// supplementary; the front ends supply them (NFS from AUTH_SYS, FUSE from
// /proc, as FUSE requests carry only the primary group).
package vfs
