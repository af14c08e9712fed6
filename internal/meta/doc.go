// Package meta keeps the namespace of one bucketfs file system in an ordered
// transactional key-value store (package kv): inodes with their POSIX
// attributes, directory entries, the reverse link records that give every
// inode its paths, extended attributes, per-directory import state, the
// per-inode sync state, the queue of inodes the exporter must reconcile
// with the bucket, and the journal of multipart uploads in flight.
//
// # Model
//
// Every file, directory, symlink and special file is an inode with a number
// that never changes and is never reused, so inode numbers (and the NFS
// filehandles built from them) are stable across restarts. A directory entry
// maps (parent, name) to a child; the child's record holds one of its
// names, and a link record maps (child, parent, name) back for each other
// one (store.go, addLink), so a hard-linked file knows each of its names
// and a directory knows its one parent.
//
// Sync state lives on the inode. Gen counts changes that must reach the
// bucket; ExportedGen is the Gen last uploaded, so an inode is dirty while
// they differ. Keys lists the objects in the bucket that currently represent
// the inode (one per name it was last exported or imported under), each with
// the ETag and version id the file side last saw. Base is the object version
// whose bytes back any range of the file that is not present in the tier.
//
// The export queue holds inodes whose bucket side may be out of date, each
// with the earliest time it may be reconciled. Every change pushes that time
// to now plus the export delay, which is what makes the delay a quiet period.
// Unlinked inodes stay in the queue (with no links) until the exporter has
// deleted their objects and nothing holds them open.
//
// # Invariants
//
// All changes happen in one kv transaction each, so a crash leaves either the
// whole operation or none of it. File data is part of that: a file's blocks
// (package tier) are written in the same transaction as its size,
// generation and queue entry (data.go), so no crash separates a file's
// bytes from its record. Before the exporter writes an object it records
// the key as an intent (intents.go), so no crash leaves an object of ours
// that nothing records. An import applies an observation of the bucket (a
// LIST, a HEAD) made before its transaction; it never adds back a name the
// file side removed after that observation, nor a name whose objects are
// the file side's own removals, whichever server sharing the store made
// the removal (fences.go: the records are in the store). No key is read
// and written by every operation, so that servers sharing one kv do not
// serialize on it: operations on different directories and files through
// different Stores touch disjoint keys (inode numbers come from ranges each
// Store claims, counters are sums of per-Store cells: counters.go). This
// package never talks to the bucket; it records what the bucket holds.
// Permission checks belong to package vfs: meta applies what it is told.
package meta
