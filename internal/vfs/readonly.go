package vfs

import (
	"context"
	"errors"
	"syscall"
)

// ReadOnly reports whether the file system refuses every change
// (Config.ReadOnly).
func (fs *FS) ReadOnly() bool { return fs.cfg.ReadOnly }

// writable fails with EROFS on a read-only file system. Every method that
// would change a name, an inode's attributes (times too), an extended
// attribute or a file's bytes asks it first, so that no front end can
// change anything and nothing is ever queued for export; imports change
// the namespace as ever, and reads keep their bookkeeping (the tier's
// copies of small files), which is never exported.
func (fs *FS) writable() error {
	if fs.cfg.ReadOnly {
		return syscall.EROFS
	}
	return nil
}

// createReadOnly is Create on a read-only file system: as open(2) with
// O_CREAT there, it opens a file that exists (Open refuses write access)
// and fails with EROFS where it would make one.
func (fs *FS) createReadOnly(ctx context.Context, c Cred, parent Ino, name string, flags uint32) (Attr, *Handle, error) {
	in, err := fs.Lookup(ctx, c, parent, name)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return Attr{}, nil, syscall.EROFS
	case err != nil:
		return Attr{}, nil, err
	case flags&syscall.O_EXCL != 0:
		return Attr{}, nil, syscall.EEXIST
	case in.IsDir():
		return Attr{}, nil, syscall.EISDIR
	}
	h, err := fs.Open(ctx, c, in.Ino, flags)
	if err != nil {
		return Attr{}, nil, err
	}
	if in, err = fs.meta.Get(ctx, in.Ino); err != nil {
		h.Release(ctx)
		return Attr{}, nil, err
	}
	return in, h, nil
}
