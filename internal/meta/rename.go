package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"bucketfs/internal/kv"
)

// Rename flags, as in renameat2(2).
const (
	RenameNoReplace = 1 << 0
	RenameExchange  = 1 << 1
)

// RenameCheck sees the two parents and the source and (if any) the target
// inode inside the rename's transaction.
type RenameCheck func(oldParent, newParent, src, dst *Inode) error

// Rename moves oldName in oldParent to newName in newParent atomically. A
// target that exists is replaced (unless RenameNoReplace), or swapped with
// the source (RenameExchange). It returns the replaced inode, if any, as it
// is after losing that name.
func (s *Store) Rename(ctx context.Context, oldParent Ino, oldName string, newParent Ino, newName string, flags uint32, check RenameCheck) (replaced *Inode, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		replaced = nil
		op, err := s.getInode(tx, oldParent)
		if err != nil {
			return err
		}
		np := op
		if newParent != oldParent {
			if np, err = s.getInode(tx, newParent); err != nil {
				return err
			}
		}
		if !np.IsDir() {
			return syscall.ENOTDIR
		}
		if np.Nlink == 0 {
			return syscall.ENOENT // removed: what moved in would have no path
		}
		srcIno, err := getEntry(tx, oldParent, oldName)
		if err != nil {
			return err
		}
		src, err := s.getInode(tx, srcIno)
		if err != nil {
			return err
		}
		var dst *Inode
		if dstIno, err := getEntry(tx, newParent, newName); err == nil {
			d, err := s.getInode(tx, dstIno)
			if err != nil {
				return err
			}
			dst = &d
		} else if !errors.Is(err, syscall.ENOENT) {
			return err
		}
		if check != nil {
			if err := check(&op, &np, &src, dst); err != nil {
				return err
			}
		}
		if src.Has(NoExport) && oldParent == RootIno || dst != nil && dst.Has(NoExport) && newParent == RootIno {
			return syscall.EPERM // lost+found stays where it is
		}
		if dst != nil && flags&RenameNoReplace != 0 {
			return syscall.EEXIST
		}
		if dst != nil && dst.Ino == src.Ino {
			return nil // same inode: POSIX says do nothing
		}
		if src.IsDir() {
			inside, err := s.isAncestor(tx, src.Ino, newParent)
			if err != nil {
				return err
			}
			if inside {
				return syscall.EINVAL
			}
		}
		switch {
		case flags&RenameExchange != 0:
			if dst == nil {
				return syscall.ENOENT
			}
			if dst.IsDir() {
				inside, err := s.isAncestor(tx, dst.Ino, oldParent)
				if err != nil {
					return err
				}
				if inside {
					return syscall.EINVAL
				}
			}
			return s.exchange(tx, &op, oldName, &np, newName, &src, dst)
		}
		if dst != nil {
			np := &np
			if newParent == oldParent {
				np = &op
			}
			// unlink with the source's kind: a directory may only replace
			// an empty directory, a non-directory only a non-directory.
			if err := s.unlink(tx, np, newName, dst, src.IsDir()); err != nil {
				return err
			}
			replaced = dst
		}
		if err := s.move(tx, &op, oldName, &np, newName, &src); err != nil {
			return err
		}
		return nameRemoved(tx, oldParent, oldName)
	})
	if err != nil {
		return nil, fmt.Errorf("rename %q in %d to %q in %d: %w", oldName, oldParent, newName, newParent, err)
	}
	return replaced, nil
}

// move relinks src from op/oldName to np/newName and writes all three inodes.
// op and np may be the same directory (then np is ignored after its Ino).
func (s *Store) move(tx kv.Txn, op *Inode, oldName string, np *Inode, newName string, src *Inode) error {
	now := s.now()
	ns := now.UnixNano()
	// src is written below (markChanged).
	if _, err := dropLink(tx, op.Ino, oldName, src); err != nil {
		return err
	}
	if _, err := addLink(tx, np.Ino, newName, src); err != nil {
		return err
	}
	if op.Ino == np.Ino {
		np = op
	} else if src.IsDir() {
		op.Nlink--
		np.Nlink++
	}
	op.Mtime, op.Ctime, np.Mtime, np.Ctime, src.Ctime = ns, ns, ns, ns, ns
	if err := s.putInode(tx, op); err != nil {
		return err
	}
	if err := s.putInode(tx, np); err != nil {
		return err
	}
	return s.markChanged(tx, src, NoChange, now, nil)
}

// exchange swaps the inodes named op/a and np/b.
func (s *Store) exchange(tx kv.Txn, op *Inode, a string, np *Inode, b string, x, y *Inode) error {
	now := s.now()
	ns := now.UnixNano()
	for _, e := range []struct {
		parent *Inode
		name   string
		old    *Inode
		new    *Inode
	}{{op, a, x, y}, {np, b, y, x}} {
		// x and y are written below (markChanged).
		if _, err := dropLink(tx, e.parent.Ino, e.name, e.old); err != nil {
			return err
		}
	}
	// Both names are gone before either is added, so that each goes to
	// its inode's record if it held the one it lost there (a directory's
	// one name always does: addLink).
	for _, e := range []struct {
		parent *Inode
		name   string
		new    *Inode
	}{{op, a, y}, {np, b, x}} {
		if _, err := addLink(tx, e.parent.Ino, e.name, e.new); err != nil {
			return err
		}
	}
	if op.Ino != np.Ino && x.IsDir() != y.IsDir() {
		if x.IsDir() {
			op.Nlink--
			np.Nlink++
		} else {
			op.Nlink++
			np.Nlink--
		}
	}
	if op.Ino == np.Ino {
		np = op
	}
	op.Mtime, op.Ctime, np.Mtime, np.Ctime, x.Ctime, y.Ctime = ns, ns, ns, ns, ns, ns
	if err := s.putInode(tx, op); err != nil {
		return err
	}
	if err := s.putInode(tx, np); err != nil {
		return err
	}
	if err := s.markChanged(tx, x, NoChange, now, nil); err != nil {
		return err
	}
	return s.markChanged(tx, y, NoChange, now, nil)
}
