package vfs

import "sync"

// Invalidator drops what a front end's clients cache (the kernel's page,
// attribute and name caches for FUSE) when the bucket side changed a name
// or a file.
type Invalidator interface {
	// InvalidateEntry forgets the name in directory parent.
	InvalidateEntry(parent Ino, name string)
	// InvalidateInode forgets ino's attributes and cached data.
	InvalidateInode(ino Ino)
}

type invalidators struct {
	mu   sync.Mutex
	list []Invalidator
}

// AddInvalidator registers a front end's cache invalidation.
func (fs *FS) AddInvalidator(inv Invalidator) {
	fs.inv.mu.Lock()
	fs.inv.list = append(fs.inv.list, inv)
	fs.inv.mu.Unlock()
}

// LaterInvalidator is an Invalidator that can also queue an invalidation
// without waiting for it to be sent.
type LaterInvalidator interface {
	InvalidateLater(parent Ino, name string, ino Ino)
}

// ChangedElsewhere tells every front end that another server changed
// parent/name (if name is set) and ino (if non-zero), without waiting for
// the front ends' notifications to go out where they can queue them.
func (fs *FS) ChangedElsewhere(parent Ino, name string, ino Ino) {
	fs.inv.mu.Lock()
	list := fs.inv.list
	fs.inv.mu.Unlock()
	for _, inv := range list {
		if l, ok := inv.(LaterInvalidator); ok {
			l.InvalidateLater(parent, name, ino)
			continue
		}
		if name != "" {
			inv.InvalidateEntry(parent, name)
		}
		if ino != 0 {
			inv.InvalidateInode(ino)
		}
	}
}

// ChangedAllElsewhere drops the cached attributes and pages of every inode
// a front end holds a reference to: another server may have changed any
// of them, unseen. Names expire by the front ends' entry timeouts.
func (fs *FS) ChangedAllElsewhere() {
	fs.mu.Lock()
	inos := make([]Ino, 0, len(fs.refs))
	for ino := range fs.refs {
		inos = append(inos, ino)
	}
	fs.mu.Unlock()
	for _, ino := range inos {
		fs.ChangedElsewhere(0, "", ino)
	}
}

// Changed tells every front end that parent/name (if name is set) and ino
// (if non-zero) changed behind their backs.
func (fs *FS) Changed(parent Ino, name string, ino Ino) {
	fs.inv.mu.Lock()
	list := fs.inv.list
	fs.inv.mu.Unlock()
	for _, inv := range list {
		if name != "" {
			inv.InvalidateEntry(parent, name)
		}
		if ino != 0 {
			inv.InvalidateInode(ino)
		}
	}
}
