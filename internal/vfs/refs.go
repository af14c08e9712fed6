package vfs

import "context"

// A front end whose clients keep inodes by number reports those references
// here. The FUSE kernel module keeps every inode it looked up until it
// forgets it, and opens it by number: a lookup that raced with an unlink,
// or with a rename over the name, opens the file afterwards. As on a local
// disk, that open must find the file as it was, so a file whose last name
// went keeps its data until it is neither open nor referenced.
//
// A lookup that reads the namespace just before such an unlink and is
// remembered just after it still loses the race; the window is the time
// between the two.

// frontRefs is what FS.refs keeps per inode, in one word: a mount that has
// listed a million files holds a million of them. The low 63 bits count the
// references the front ends hold; the top bit says the inode lost its last
// name meanwhile, to be reclaimed at the last Forget.
type frontRefs uint64

const reclaimBit = frontRefs(1) << 63

func (r frontRefs) count() uint64 { return uint64(r &^ reclaimBit) }
func (r frontRefs) reclaim() bool { return r&reclaimBit != 0 }

// Remember records one more front-end reference to ino (a FUSE entry
// reply: lookup, create, mknod, mkdir, symlink, link, readdirplus).
func (fs *FS) Remember(ino Ino) {
	fs.mu.Lock()
	if fs.refs == nil {
		fs.refs = map[Ino]frontRefs{}
	}
	fs.refs[ino]++
	fs.mu.Unlock()
}

// Forget drops n front-end references to ino (a FUSE forget). When the last
// goes, a file that lost its last name while referenced is reclaimed, unless
// it is still open (then its last Release does it).
func (fs *FS) Forget(ctx context.Context, ino Ino, n uint64) {
	fs.mu.Lock()
	r := fs.refs[ino]
	left := r.count() - min(n, r.count())
	if left > 0 {
		fs.refs[ino] = r&reclaimBit | frontRefs(left)
	} else {
		delete(fs.refs, ino)
	}
	fs.mu.Unlock()
	if left > 0 || !r.reclaim() {
		return
	}
	if in, err := fs.meta.Get(ctx, ino); err == nil {
		fs.reclaim(&in)
	}
}

// reclaimLater reports whether ino is open or referenced by a front end; if
// it is referenced, its reclaim is left to the last Forget.
// Open on another live server (Config.Liveness) counts too: the data is
// in the shared store, and that server reclaims it at its last close.
func (fs *FS) reclaimLater(ino Ino) bool {
	fs.mu.Lock()
	r, ok := fs.refs[ino]
	if ok {
		fs.refs[ino] = r | reclaimBit
	}
	later := ok || fs.opens[ino] > 0
	fs.mu.Unlock()
	return later || fs.openElsewhere(ino)
}

// InUse reports whether ino is open or still referenced by a front end,
// which may open it by number: the exporter keeps such an unlinked inode.
// With Config.Liveness, an open on another live server counts; another
// server's front-end references do not (they are not recorded).
func (fs *FS) InUse(ino Ino) bool {
	fs.mu.Lock()
	_, ref := fs.refs[ino]
	used := ref || fs.opens[ino] > 0
	fs.mu.Unlock()
	return used || fs.openElsewhere(ino)
}
