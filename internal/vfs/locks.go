package vfs

import (
	"context"

	"bucketfs/internal/locks"
)

// LockOwner identifies who holds a lock: a FUSE lock owner (client 0) or
// an NFS client's lock owner.
type LockOwner = locks.Owner

// Lock is a byte-range lock request or a held lock.
type Lock = locks.Lock

// Lock kinds.
const (
	LockRead   = locks.Read
	LockWrite  = locks.Write
	LockUnlock = locks.Unlock
)

// TestLock returns a lock that conflicts with l, if any (F_GETLK): the
// lowest of this server's owners', else, with Config.Liveness, the lowest
// of another live server's.
func (fs *FS) TestLock(ctx context.Context, ino Ino, l Lock) (Lock, bool, error) {
	if c, ok := fs.locks.Test(uint64(ino), l); ok || fs.shared == nil || l.Kind == locks.Unlock || l.Start > l.End {
		return c, ok, nil
	}
	return fs.shared.testOthers(ctx, ino, l)
}

// SetLock sets or releases a byte-range lock, waiting for conflicting
// locks to go when wait is set (F_SETLKW).
func (fs *FS) SetLock(ctx context.Context, ino Ino, l Lock, wait bool) error {
	if wait && l.Kind != locks.Unlock {
		return fs.locks.Wait(ctx, uint64(ino), l)
	}
	return fs.locks.Set(uint64(ino), l)
}

// Flock takes, converts or releases a whole-file flock(2) lock.
func (fs *FS) Flock(ctx context.Context, ino Ino, owner LockOwner, kind locks.Kind, wait bool) error {
	return fs.locks.Flock(ctx, uint64(ino), owner, kind, wait)
}

// ReleaseLocks drops every lock owner holds on ino (the owner closed the
// file).
func (fs *FS) ReleaseLocks(ino Ino, owner LockOwner) {
	fs.locks.ReleaseOwner(uint64(ino), owner)
}

// ReleaseClientLocks drops every lock of a client (NFS lease expiry).
func (fs *FS) ReleaseClientLocks(client uint64) {
	fs.locks.ReleaseClient(client)
}
