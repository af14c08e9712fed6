package vfs

// HoldsLocks reports whether owner holds a byte-range (record) lock on
// ino. NFSv4 asks it before it forgets a lock-owner or a lock stateid,
// which it must refuse while locks remain (NFS4ERR_LOCKS_HELD).
func (fs *FS) HoldsLocks(ino Ino, owner LockOwner) bool {
	for _, l := range fs.locks.Held(uint64(ino)) {
		if l.Owner == owner {
			return true
		}
	}
	return false
}
