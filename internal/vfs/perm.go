package vfs

import (
	"syscall"

	"bucketfs/internal/meta"
)

// Access masks, as in access(2).
const (
	mayRead  = 4
	mayWrite = 2
	mayExec  = 1
)

func (c Cred) inGroup(gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// access checks that c may do mask on in, by the owner/group/other bits.
func access(c Cred, in *meta.Inode, mask uint32) error {
	if c.Uid == 0 {
		// root reads and writes anything; it executes a file only if some
		// execute bit is set (directories are always searchable).
		if mask&mayExec != 0 && !in.IsDir() && in.Mode&0o111 == 0 {
			return syscall.EACCES
		}
		return nil
	}
	var bits uint32
	switch {
	case c.Uid == in.Uid:
		bits = in.Mode >> 6
	case c.inGroup(in.Gid):
		bits = in.Mode >> 3
	default:
		bits = in.Mode
	}
	if bits&7&mask != mask {
		return syscall.EACCES
	}
	return nil
}

// mayDelete checks that c may remove or rename child out of dir: write and
// search on dir, and with the sticky bit, ownership of dir or child.
func mayDelete(c Cred, dir, child *meta.Inode) error {
	if err := access(c, dir, mayWrite|mayExec); err != nil {
		return err
	}
	if dir.Mode&syscall.S_ISVTX != 0 && c.Uid != 0 && c.Uid != dir.Uid && c.Uid != child.Uid {
		return syscall.EPERM
	}
	return nil
}

// mayCreate is the Check for adding an entry: write and search on the
// parent. The new inode inherits the parent's group when the parent has the
// set-group-id bit (and a new directory inherits the bit).
func mayCreate(c Cred) meta.Check {
	return func(parent, child *meta.Inode) error {
		if err := access(c, parent, mayWrite|mayExec); err != nil {
			return err
		}
		if parent.Mode&syscall.S_ISGID != 0 && child.Ino == 0 {
			child.Gid = parent.Gid
			if child.IsDir() {
				child.Mode |= syscall.S_ISGID
			}
		}
		return nil
	}
}

// openMask is the access an open with flags needs.
func openMask(flags uint32) uint32 {
	var m uint32
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		m = mayRead
	case syscall.O_WRONLY:
		m = mayWrite
	case syscall.O_RDWR:
		m = mayRead | mayWrite
	}
	if flags&syscall.O_TRUNC != 0 {
		m |= mayWrite
	}
	return m
}
