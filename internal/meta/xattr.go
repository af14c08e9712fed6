package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"bucketfs/internal/kv"
)

// Extended attribute set flags, as in setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// Limits on extended attributes, as Linux applies to most file systems.
const (
	MaxXattrName  = 255
	MaxXattrValue = 64 << 10
)

func xattrKey(ino Ino, name string) []byte { return append(xattrPrefix(ino), name...) }

// GetXattr returns the value of the attribute name of ino, or ENODATA.
func (s *Store) GetXattr(ctx context.Context, ino Ino, name string) (v []byte, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		v, err = r.Get(xattrKey(ino, name))
		if errors.Is(err, kv.ErrNotFound) {
			return syscall.ENODATA
		}
		return err
	})
	return v, err
}

// ListXattr returns the attribute names of ino.
func (s *Store) ListXattr(ctx context.Context, ino Ino) (names []string, err error) {
	prefix := xattrPrefix(ino)
	err = s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			names = append(names, string(k[len(prefix):]))
			return true
		})
	})
	return names, err
}

// SetXattr sets (value != nil) or removes (value == nil) an attribute.
// check sees the inode before the change.
func (s *Store) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags int, check func(*Inode) error) error {
	if len(name) == 0 || len(name) > MaxXattrName {
		return fmt.Errorf("xattr %q: %w", name, syscall.ERANGE)
	}
	if len(value) > MaxXattrValue {
		return fmt.Errorf("xattr %q: %w", name, syscall.E2BIG)
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(&in); err != nil {
				return err
			}
		}
		key := xattrKey(ino, name)
		_, err = tx.Get(key)
		exists := err == nil
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		switch {
		case value == nil && !exists, flags&XattrReplace != 0 && !exists:
			return syscall.ENODATA
		case flags&XattrCreate != 0 && exists:
			return syscall.EEXIST
		}
		if value == nil {
			err = tx.Delete(key)
		} else {
			err = tx.Set(key, value)
		}
		if err != nil {
			return err
		}
		in.Ctime = s.now().UnixNano()
		return s.putInode(tx, &in)
	})
}
