package sync

import (
	"bucketfs/internal/keylock"
	"bucketfs/internal/meta"
)

// InodeLocks serialises the exporter and the importer on one inode, so that
// an upload and the import of a bucket-side change to the same file never
// interleave: the importer then always compares the bucket against what the
// exporter recorded last. The lock is held across bucket requests, but only
// for that one inode.
type InodeLocks struct{ keylock.Table[meta.Ino] }

// NewInodeLocks returns an empty lock table.
func NewInodeLocks() *InodeLocks { return &InodeLocks{} }
