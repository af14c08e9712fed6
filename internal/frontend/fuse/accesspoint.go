package fuse

import (
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Access points (Options.AccessPoint, package accesspoint): the mount
// serves one access point instead of the whole file system. Its root,
// found or made when the mount starts, is the mount's root, and every
// request runs as the access point's uid, gid and groups, whoever makes it.
//
// The kernel's default_permissions is off on such a mount: with it, the
// kernel would first check the calling process's own identity against the
// attributes, so a local user other than the access point's would be
// refused what the access point allows. vfs checks the access point's
// identity on every request instead; a name the kernel resolves from its
// cache without asking was resolved by us for the same identity.
//
// The kernel keeps ".." at the mount's root, as at any mount point, and a
// lookup of ".." there (which only an NFS re-export would send) answers the
// root. A directory moved out of the root by someone else (another mount,
// the bucket) stays reachable through what the kernel already holds of it
// (a working directory, an open descriptor), as under a bind mount; a walk
// from the root no longer finds it.
//
// Node ids are inode numbers, the mount's root being node 1. On an access
// point's mount node 1 is the access point's root and the two numbers
// trade places: the access point root's own number, as a node id, names
// the file system's root. The kernel is never given that node (nothing
// below the root has the file system's root as a child), so the mapping is
// one to one, and a notice about an entry of the file system's root goes
// to a node the kernel does not know, which it ignores.

// ino is the inode a FUSE node id names.
func (s *server) ino(node uint64) vfs.Ino {
	switch vfs.Ino(node) {
	case meta.RootIno:
		return s.root
	case s.root:
		return meta.RootIno
	}
	return vfs.Ino(node)
}

// node is the FUSE node id of an inode: ino's inverse.
func (s *server) node(ino vfs.Ino) uint64 { return uint64(s.ino(uint64(ino))) }
