package nfs4

import (
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"golang.org/x/sys/unix"

	"bucketfs/internal/vfs"
)

// Operations on names: CREATE, REMOVE, RENAME, LINK, READLINK.

// cinfo is a directory's change_info4 around an operation. The vfs does
// not report both values atomically.
func (q *request) cinfo(dir vfs.Ino, before uint64) nfsv4.ChangeInfo4 {
	after := before
	if a, err := q.s.fs.GetAttr(q.ctx, dir); err == nil {
		after = changeAttr(&a)
	}
	return nfsv4.ChangeInfo4{Atomic: false, Before: before, After: after}
}

func (q *request) create(a *nfsv4.Create4args) nfsv4.Create4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Create4res { return &nfsv4.Create4res_default{Status: st} }
	dir, st := q.curDir()
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(a.Objname); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	sa, st := q.decodeSetAttrs(&a.Createattrs)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if sa.in.Valid&vfs.SetSize != 0 {
		return fail(nfsv4.NFS4ERR_INVAL)
	}
	mode := uint32(0o755)
	if sa.in.Valid&vfs.SetMode != 0 {
		mode = sa.in.Mode
	}
	before := changeAttr(&dir)
	fs := q.s.fs
	var (
		in  vfs.Attr
		err error
	)
	switch t := a.Objtype.(type) {
	case *nfsv4.Createtype4_NF4DIR:
		in, err = fs.Mkdir(q.ctx, q.cred, q.cur, a.Objname, mode)
	case *nfsv4.Createtype4_NF4LNK:
		in, err = fs.Symlink(q.ctx, q.cred, q.cur, a.Objname, string(t.Linkdata))
		sa.in.Valid &^= vfs.SetMode
	case *nfsv4.Createtype4_NF4FIFO:
		in, err = fs.Mknod(q.ctx, q.cred, q.cur, a.Objname, syscall.S_IFIFO|mode, 0)
	case *nfsv4.Createtype4_NF4SOCK:
		in, err = fs.Mknod(q.ctx, q.cred, q.cur, a.Objname, syscall.S_IFSOCK|mode, 0)
	case *nfsv4.Createtype4_NF4BLK:
		in, err = fs.Mknod(q.ctx, q.cred, q.cur, a.Objname, syscall.S_IFBLK|mode,
			uint32(unix.Mkdev(t.Devdata.Specdata1, t.Devdata.Specdata2)))
	case *nfsv4.Createtype4_NF4CHR:
		in, err = fs.Mknod(q.ctx, q.cred, q.cur, a.Objname, syscall.S_IFCHR|mode,
			uint32(unix.Mkdev(t.Devdata.Specdata1, t.Devdata.Specdata2)))
	default:
		return fail(nfsv4.NFS4ERR_BADTYPE) // regular files are made by OPEN
	}
	if err != nil {
		return fail(statusOf(err))
	}
	ci := q.cinfo(q.cur, before)
	if rest := sa.in.Valid &^ vfs.SetMode; rest != 0 {
		sa.in.Valid = rest
		if _, err := fs.SetAttr(q.ctx, q.cred, in.Ino, sa.in); err != nil {
			sa.set = attrMask{}
			sa.set.set(nfsv4.FATTR4_MODE)
		}
	}
	q.setCur(in.Ino)
	return &nfsv4.Create4res_NFS4_OK{Resok4: nfsv4.Create4resok{Cinfo: ci, Attrset: sa.set.words()}}
}

func (q *request) remove(name string) nfsv4.Remove4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Remove4res { return &nfsv4.Remove4res_default{Status: st} }
	dir, st := q.curDir()
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	child, err := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name)
	if err != nil {
		return fail(statusOf(err))
	}
	before := changeAttr(&dir)
	if child.IsDir() {
		err = q.s.fs.Rmdir(q.ctx, q.cred, q.cur, name)
	} else {
		err = q.s.fs.Unlink(q.ctx, q.cred, q.cur, name)
	}
	if err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Remove4res_NFS4_OK{Resok4: nfsv4.Remove4resok{Cinfo: q.cinfo(q.cur, before)}}
}

func (q *request) rename(a *nfsv4.Rename4args) nfsv4.Rename4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Rename4res { return &nfsv4.Rename4res_default{Status: st} }
	if q.saved == 0 {
		return fail(nfsv4.NFS4ERR_NOFILEHANDLE)
	}
	dst, st := q.curDir()
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := q.sameAccessPoint(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	src, st := q.s.attrOf(q.ctx, q.saved)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if !src.IsDir() {
		return fail(nfsv4.NFS4ERR_NOTDIR)
	}
	if st := checkName(a.Oldname); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := checkName(a.Newname); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	sb, db := changeAttr(&src), changeAttr(&dst)
	if err := q.s.fs.Rename(q.ctx, q.cred, q.saved, a.Oldname, q.cur, a.Newname, 0); err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Rename4res_NFS4_OK{Resok4: nfsv4.Rename4resok{
		SourceCinfo: q.cinfo(q.saved, sb), TargetCinfo: q.cinfo(q.cur, db)}}
}

func (q *request) link(name string) nfsv4.Link4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Link4res { return &nfsv4.Link4res_default{Status: st} }
	if q.saved == 0 {
		return fail(nfsv4.NFS4ERR_NOFILEHANDLE)
	}
	dir, st := q.curDir()
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if st := q.sameAccessPoint(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	src, st := q.s.attrOf(q.ctx, q.saved)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if src.IsDir() {
		return fail(nfsv4.NFS4ERR_ISDIR)
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	before := changeAttr(&dir)
	if _, err := q.s.fs.Link(q.ctx, q.cred, q.saved, q.cur, name); err != nil {
		return fail(statusOf(err))
	}
	return &nfsv4.Link4res_NFS4_OK{Resok4: nfsv4.Link4resok{Cinfo: q.cinfo(q.cur, before)}}
}

func (q *request) readlink() nfsv4.Readlink4res {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return &nfsv4.Readlink4res_default{Status: st}
	}
	if a.Type() != syscall.S_IFLNK {
		// RFC 8881 18.24.3: READLINK of anything but a symlink, a
		// directory too, is NFS4ERR_INVAL.
		return &nfsv4.Readlink4res_default{Status: nfsv4.NFS4ERR_INVAL}
	}
	target, err := q.s.fs.Readlink(q.ctx, q.cur)
	if err != nil {
		return &nfsv4.Readlink4res_default{Status: statusOf(err)}
	}
	return &nfsv4.Readlink4res_NFS4_OK{Resok4: nfsv4.Readlink4resok{Link: []byte(target)}}
}
