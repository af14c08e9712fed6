package meta

import "syscall"

// Defaults are the owner and the permission bits of what carries no
// attributes of its own: files imported from objects without bucketfs's
// metadata (x-amz-meta-mode, -uid, -gid), the directories of key
// prefixes, and the root and lost+found of a new file system.
//
// Rule: an imported inode that lacks an attribute keeps a flag for it
// (ModeDefaulted, UidDefaulted, GidDefaulted) rather than a value, and
// every read of the inode fills it in from the Defaults of this run: a
// restart with other defaults shows the new ones, and the change writes
// nothing, neither to the namespace nor to the bucket. Only a file-side
// change of the inode (a write, chmod, chown, utimens, a rename or a new
// link: markChanged) or an export that writes its attributes into an
// object fixes the values it shows then, which is what its export
// records. An unchanged imported file is never exported, whatever the
// defaults. The root and lost+found take the defaults once, when the file
// system is made; an existing file system's root keeps what it has.
type Defaults struct {
	Uid, Gid uint32
	// FileMode and DirMode are permission bits (at most 07777), for files
	// and directories.
	FileMode, DirMode uint32
}

// StandardDefaults are the defaults when none are given: root, 0644 for
// files, 0755 for directories.
func StandardDefaults() Defaults {
	return Defaults{FileMode: 0o644, DirMode: 0o755}
}

// apply fills in the attributes in takes from the file system's
// defaults.
func (d *Defaults) apply(in *Inode) {
	if in.Flags&Defaulted == 0 {
		return
	}
	if in.Has(ModeDefaulted) {
		perm := d.FileMode
		if in.IsDir() {
			perm = d.DirMode
		}
		in.Mode = in.Type() | perm&0o7777
	}
	if in.Has(UidDefaulted) {
		in.Uid = d.Uid
	}
	if in.Has(GidDefaulted) {
		in.Gid = d.Gid
	}
}

// newRoot is the root directory of a new file system made at ns.
func (d *Defaults) newRoot(ns int64) Inode {
	return Inode{Ino: RootIno, Mode: syscall.S_IFDIR | d.DirMode&0o7777, Uid: d.Uid, Gid: d.Gid,
		Nlink: 2, Atime: ns, Mtime: ns, Ctime: ns}
}
