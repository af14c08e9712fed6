package meta

import (
	"syscall"

	"bucketfs/internal/tier"
)

// Ino is an inode number. Numbers are allocated once and never reused.
type Ino uint64

// RootIno is the inode number of the root directory (FUSE's root node id).
const RootIno Ino = 1

// Object names one version of one object in the bucket.
type Object struct {
	Key       string // relative to the file system's prefix
	ETag      string
	VersionID string
	Size      int64
}

// Flags are per-inode booleans.
type Flags uint32

const (
	// flagRetired was "every byte is in the tier"; Backed says that now
	// (Backed 0). The bit stays reserved so the others keep their values.
	flagRetired Flags = 1 << iota
	// Listed: a directory whose children have all been imported from the
	// bucket (or that never had a bucket side).
	Listed
	// NoExport: this inode and everything below it never reach the bucket
	// (the lost+found directory).
	NoExport
	// DeletedInBucket: the inode lost its last name because the bucket
	// deleted its object (an import), not by a file-side unlink or rename.
	// A front end that still holds a cached name for it knows that name is
	// stale. A new link clears it.
	DeletedInBucket
	// ModeDefaulted, UidDefaulted and GidDefaulted: the inode came from
	// the bucket without that attribute (an object without bucketfs's
	// metadata, the directory of a key prefix), and shows the file
	// system's default for it as this run sets it (Defaults), whatever
	// is stored. A file-side change of the inode, or an export that
	// writes its attributes into an object, clears them (defaults.go).
	ModeDefaulted
	UidDefaulted
	GidDefaulted
)

// Defaulted is every flag that marks an attribute as the file system's
// default.
const Defaulted = ModeDefaulted | UidDefaulted | GidDefaulted

// Inode is the stored form of one file system object.
type Inode struct {
	Ino                 Ino
	Mode                uint32 // file type and permission bits, as in st_mode
	Uid, Gid            uint32
	Nlink               uint32
	Rdev                uint32
	Size                int64
	Atime, Mtime, Ctime int64 // nanoseconds since the epoch
	Flags               Flags
	Target              string // symlink target

	// Gen counts changes that must reach the bucket; ExportedGen is the Gen
	// of the last complete export (or import). The inode is dirty while they
	// differ.
	Gen, ExportedGen uint64
	// Base is the object version whose bytes the file shows wherever the
	// tier holds nothing below Backed.
	Base Object
	// Backed bounds what Base provides: a byte below it that no tier block
	// holds is Base's byte, one at or past it that no block holds is zero.
	// Backed <= Size. A file made on the file side has Backed 0; an import
	// sets it to the object's size, and a truncate lowers it.
	Backed int64
	// Cached is how many bytes of file data the tier's blocks store.
	Cached int64
	// Unexported is how many of Cached are in unexported blocks, those
	// with a file-side change newer than ExportedGen (see tier.Stamp):
	// what the tier's capacity for unexported data counts of this file.
	// The rest are copies of Base's bytes, which eviction may drop.
	Unexported int64
	// Replaced counts the times an import replaced the file's content
	// with another object version: a handle opened before keeps reading
	// the version it opened (vfs), as an open of a file replaced by a
	// rename keeps the old file.
	Replaced uint64
	// Keys are the objects that represent this inode in the bucket, one per
	// name as last synced.
	Keys []Object
	// Source is, for a directory, the bucket prefix (with a trailing "/",
	// "" for the root) its children are listed from; for a file the bucket
	// deleted (DeletedInBucket), the key it had, which names its copy in
	// lost+found should the file side change it through a handle it still
	// holds.
	Source string
	// UnfinishedWrite is when (unix ns) the file's last write was a piece
	// that announced more of its write to come (see Continues and
	// WriteDataMore), while no write has ended that write since and no
	// close or fsync of the handle that wrote it (EndWrite) has: 0 when
	// the file's writes are finished. A flush does not export the file
	// from a state with one, for up to PieceGrace (sync.Exporter.Flush).
	UnfinishedWrite int64

	// link is one name of the inode kept in its own record instead of a
	// link record (l<ino><parent><name>) of its own; Parent 0 when the
	// record holds none. See addLink for the invariant.
	link Link
}

// Type returns the file type bits of the mode.
func (in *Inode) Type() uint32 { return in.Mode & syscall.S_IFMT }

// IsDir reports whether the inode is a directory.
func (in *Inode) IsDir() bool { return in.Type() == syscall.S_IFDIR }

// IsRegular reports whether the inode is a regular file.
func (in *Inode) IsRegular() bool { return in.Type() == syscall.S_IFREG }

// Dirty reports whether the inode has changes not yet exported.
func (in *Inode) Dirty() bool { return in.Gen != in.ExportedGen }

// AllLocal reports whether every byte of a regular file is in the tier, so
// that no read needs the bucket.
func (in *Inode) AllLocal() bool { return in.Backed == 0 }

// unstamped marks a dirty file whose record predates Unexported: its
// blocks carry no stamps, so all of them count as unexported (as every
// byte of a dirty file did then), and none is evicted, until the export
// that makes the file clean.
const unstamped Flags = 1 << 9

// stamp is what the tier needs to know of the inode for an edit: its
// Exported generation, and the generation the change being made will
// have (markChanged counts one more for it).
func (in *Inode) stamp() tier.Stamp { return tier.Stamp{Exported: in.ExportedGen, Gen: in.Gen + 1} }

// hold adds to Cached and Unexported what a tier edit changed.
func (in *Inode) hold(d tier.Bytes) {
	in.Cached += d.Cached
	in.Unexported += d.Dirty
	if in.Has(unstamped) {
		in.Unexported = in.Cached
	}
}

// held is what the tier holds of the inode.
func (in *Inode) held() tier.Bytes { return tier.Bytes{Cached: in.Cached, Dirty: in.Unexported} }

// dropHeld records that the tier holds nothing of the inode any more:
// every block it stores from now on is stamped.
func (in *Inode) dropHeld() {
	in.Cached, in.Unexported = 0, 0
	in.Flags &^= unstamped
}

// Has reports whether every flag in f is set.
func (in *Inode) Has(f Flags) bool { return in.Flags&f == f }
