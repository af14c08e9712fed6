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
