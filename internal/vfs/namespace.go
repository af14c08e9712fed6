package vfs

import (
	"context"
	"strings"
	"syscall"

	"bucketfs/internal/meta"
)

// maxNameLen is the longest name, in bytes (NAME_MAX).
const maxNameLen = 255

// validName rejects names no POSIX file system accepts.
func validName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return syscall.EINVAL
	case len(name) > maxNameLen:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	}
	return nil
}

// Mknod creates a non-directory, non-regular node or a regular file
// without opening it (mode carries the type bits).
func (fs *FS) Mknod(ctx context.Context, c Cred, parent Ino, name string, mode, rdev uint32) (Attr, error) {
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	switch mode & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		if c.Uid != 0 {
			return Attr{}, syscall.EPERM
		}
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFREG:
	case 0:
		mode |= syscall.S_IFREG
	default:
		return Attr{}, syscall.EINVAL
	}
	return fs.create(ctx, c, parent, name, meta.Inode{Mode: mode, Rdev: rdev})
}

// Mkdir creates a directory.
func (fs *FS) Mkdir(ctx context.Context, c Cred, parent Ino, name string, mode uint32) (Attr, error) {
	return fs.create(ctx, c, parent, name, meta.Inode{Mode: syscall.S_IFDIR | mode&0o7777})
}

// MkdirOwned creates a directory as root, owned by uid and gid from the
// start (one transaction, so no crash leaves it root's), with mode as
// given: no umask, and no group or set-group-id bit inherited from a
// set-group-id parent. It is for directories the server makes on its own
// behalf, such as an access point's root.
func (fs *FS) MkdirOwned(ctx context.Context, parent Ino, name string, mode, uid, gid uint32) (Attr, error) {
	fs.counters.metaOps.Add(1)
	if err := validName(name); err != nil {
		return Attr{}, err
	}
	if _, err := fs.dir(ctx, Root, parent, mayWrite|mayExec); err != nil {
		return Attr{}, err
	}
	in, err := fs.meta.Create(ctx, parent, name, meta.Inode{Mode: syscall.S_IFDIR | mode&0o7777, Uid: uid, Gid: gid}, nil)
	if err != nil {
		return Attr{}, err
	}
	if fs.lister != nil {
		fs.lister.Made(in.Ino)
	}
	return in, nil
}

// Symlink creates a symbolic link to target.
func (fs *FS) Symlink(ctx context.Context, c Cred, parent Ino, name, target string) (Attr, error) {
	if len(target) == 0 || len(target) > 4095 {
		return Attr{}, syscall.ENAMETOOLONG
	}
	return fs.create(ctx, c, parent, name, meta.Inode{Mode: syscall.S_IFLNK | 0o777, Target: target, Size: int64(len(target))})
}

func (fs *FS) create(ctx context.Context, c Cred, parent Ino, name string, tmpl meta.Inode) (Attr, error) {
	fs.counters.metaOps.Add(1)
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	if err := validName(name); err != nil {
		return Attr{}, err
	}
	if _, err := fs.dir(ctx, c, parent, mayWrite|mayExec); err != nil {
		return Attr{}, err
	}
	return fs.createListed(ctx, c, parent, name, tmpl)
}

// createListed is create in a directory that needs no listing first; the
// transaction checks the permissions.
func (fs *FS) createListed(ctx context.Context, c Cred, parent Ino, name string, tmpl meta.Inode) (Attr, error) {
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	tmpl.Uid, tmpl.Gid = c.Uid, c.Gid
	in, err := fs.meta.Create(ctx, parent, name, tmpl, mayCreate(c))
	if err != nil {
		return Attr{}, err
	}
	if in.IsDir() && fs.lister != nil {
		fs.lister.Made(in.Ino)
	}
	return in, nil
}

// Readlink returns a symlink's target.
func (fs *FS) Readlink(ctx context.Context, ino Ino) (string, error) {
	in, err := fs.meta.Get(ctx, ino)
	if err != nil {
		return "", err
	}
	if in.Type() != syscall.S_IFLNK {
		return "", syscall.EINVAL
	}
	return in.Target, nil
}

// Link gives ino the additional name newName in newParent.
func (fs *FS) Link(ctx context.Context, c Cred, ino, newParent Ino, newName string) (Attr, error) {
	fs.counters.metaOps.Add(1)
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	if err := validName(newName); err != nil {
		return Attr{}, err
	}
	if _, err := fs.dir(ctx, c, newParent, mayWrite|mayExec); err != nil {
		return Attr{}, err
	}
	return fs.meta.Link(ctx, ino, newParent, newName, mayCreate(c))
}

// Unlink removes a non-directory name.
func (fs *FS) Unlink(ctx context.Context, c Cred, parent Ino, name string) error {
	return fs.remove(ctx, c, parent, name, false)
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(ctx context.Context, c Cred, parent Ino, name string) error {
	return fs.remove(ctx, c, parent, name, true)
}

func (fs *FS) remove(ctx context.Context, c Cred, parent Ino, name string, dir bool) error {
	fs.counters.metaOps.Add(1)
	if err := fs.writable(); err != nil {
		return err
	}
	if name == "." {
		return syscall.EINVAL
	}
	if name == ".." {
		return syscall.ENOTEMPTY
	}
	if _, err := fs.dir(ctx, c, parent, mayWrite|mayExec); err != nil {
		return err
	}
	if dir {
		// A directory only imported by name may still hold objects in the
		// bucket: list it before deciding it is empty.
		child, err := fs.meta.Lookup(ctx, parent, name)
		if err != nil {
			return err
		}
		if child.IsDir() && fs.needsListing(&child) {
			if err := fs.lister.EnsureListed(ctx, &child); err != nil {
				return err
			}
		}
	}
	in, err := fs.meta.Remove(ctx, parent, name, dir, func(p, child *meta.Inode) error {
		return mayDelete(c, p, child)
	})
	if err != nil {
		return err
	}
	fs.reclaim(&in)
	return nil
}

// Rename moves oldName in oldParent to newName in newParent (flags as in
// renameat2: meta.RenameNoReplace, meta.RenameExchange).
func (fs *FS) Rename(ctx context.Context, c Cred, oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) error {
	fs.counters.metaOps.Add(1)
	if err := fs.writable(); err != nil {
		return err
	}
	if err := validName(newName); err != nil {
		return err
	}
	if oldName == "." || oldName == ".." {
		return syscall.EINVAL
	}
	if flags&^(meta.RenameNoReplace|meta.RenameExchange) != 0 ||
		flags&meta.RenameNoReplace != 0 && flags&meta.RenameExchange != 0 {
		return syscall.EINVAL
	}
	if _, err := fs.dir(ctx, c, oldParent, mayWrite|mayExec); err != nil {
		return err
	}
	if _, err := fs.dir(ctx, c, newParent, mayWrite|mayExec); err != nil {
		return err
	}
	// A directory that replaces or is replaced must be known to be empty.
	for _, side := range []struct {
		p    Ino
		name string
	}{{oldParent, oldName}, {newParent, newName}} {
		if in, err := fs.meta.Lookup(ctx, side.p, side.name); err == nil && in.IsDir() && fs.needsListing(&in) {
			if err := fs.lister.EnsureListed(ctx, &in); err != nil {
				return err
			}
		}
	}
	replaced, err := fs.meta.Rename(ctx, oldParent, oldName, newParent, newName, flags,
		func(op, np, src, dst *meta.Inode) error {
			if err := mayDelete(c, op, src); err != nil {
				return err
			}
			if dst != nil {
				if err := mayDelete(c, np, dst); err != nil {
					return err
				}
			}
			// Moving a directory to a new parent rewrites its "..": it
			// needs write permission on the directory itself.
			if src.IsDir() && op.Ino != np.Ino {
				if err := access(c, src, mayWrite); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return err
	}
	fs.reclaim(replaced)
	return nil
}

// DirEntry is one entry a directory listing returns.
type DirEntry = meta.Entry

// ReadDir lists up to limit entries of dir after the name after. It does not
// include "." and "..": front ends add them as their protocol wants.
func (fs *FS) ReadDir(ctx context.Context, c Cred, dir Ino, after string, limit int) ([]DirEntry, error) {
	fs.counters.metaOps.Add(1)
	if _, err := fs.dir(ctx, c, dir, mayRead); err != nil {
		return nil, err
	}
	return fs.meta.ReadDir(ctx, dir, after, limit)
}

// OpenDir checks that c may read directory ino and imports its listing.
func (fs *FS) OpenDir(ctx context.Context, c Cred, ino Ino) (Attr, error) {
	return fs.dir(ctx, c, ino, mayRead)
}

// Xattr names in the "system." and "security." namespaces are refused, so
// tools fall back to mode bits instead of ACLs we would not enforce.
func xattrAllowed(name string) error {
	if strings.HasPrefix(name, "system.") || strings.HasPrefix(name, "security.") {
		return syscall.EOPNOTSUPP
	}
	return nil
}

// GetXattr reads an extended attribute.
func (fs *FS) GetXattr(ctx context.Context, c Cred, ino Ino, name string) ([]byte, error) {
	if err := xattrAllowed(name); err != nil {
		return nil, syscall.ENODATA
	}
	if err := fs.Access(ctx, c, ino, mayRead); err != nil {
		return nil, err
	}
	return fs.meta.GetXattr(ctx, ino, name)
}

// ListXattr lists extended attribute names.
func (fs *FS) ListXattr(ctx context.Context, c Cred, ino Ino) ([]string, error) {
	return fs.meta.ListXattr(ctx, ino)
}

// SetXattr sets an extended attribute (flags meta.XattrCreate/Replace).
func (fs *FS) SetXattr(ctx context.Context, c Cred, ino Ino, name string, value []byte, flags int) error {
	if err := fs.writable(); err != nil {
		return err
	}
	if err := xattrAllowed(name); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	return fs.meta.SetXattr(ctx, ino, name, value, flags, fs.xattrCheck(c))
}

// RemoveXattr removes an extended attribute.
func (fs *FS) RemoveXattr(ctx context.Context, c Cred, ino Ino, name string) error {
	if err := fs.writable(); err != nil {
		return err
	}
	if err := xattrAllowed(name); err != nil {
		return syscall.ENODATA
	}
	return fs.meta.SetXattr(ctx, ino, name, nil, 0, fs.xattrCheck(c))
}

func (fs *FS) xattrCheck(c Cred) func(*meta.Inode) error {
	return func(in *meta.Inode) error {
		if in.Type() != syscall.S_IFREG && !in.IsDir() {
			return syscall.EPERM // user.* only on files and directories, as Linux
		}
		return access(c, in, mayWrite)
	}
}
