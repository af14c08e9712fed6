package nfs4

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Filehandle and attribute operations.

func (q *request) setCur(ino vfs.Ino) {
	q.cur = ino
	q.hasCurSid = false
}

// putrootfh makes the root current: the pseudo-root when access points
// are configured (accesspoint.go), else the file system's root.
func (q *request) putrootfh() nfsv4.Nfsstat4 {
	if q.s.aps.on() {
		q.setFH(pseudoRoot, nil)
	} else {
		q.setFH(meta.RootIno, nil)
	}
	return nfsv4.NFS4_OK
}

// putfh makes a filehandle current, with its access point: a handle of an
// access point must still lie under its root.
func (q *request) putfh(fh []byte) nfsv4.Nfsstat4 {
	ino, ap, st := q.s.parseFH(fh)
	if st != nfsv4.NFS4_OK {
		return st
	}
	a, st := q.s.attrOf(q.ctx, ino)
	if st != nfsv4.NFS4_OK {
		return st
	}
	if ap != nil {
		if st := q.s.inside(q.ctx, ap, ino, &a); st != nfsv4.NFS4_OK {
			return st
		}
	}
	q.setFH(ino, ap)
	return nfsv4.NFS4_OK
}

func (q *request) getfh() nfsv4.Getfh4res {
	if _, st := q.curAttr(); st != nfsv4.NFS4_OK {
		return &nfsv4.Getfh4res_default{Status: st}
	}
	return &nfsv4.Getfh4res_NFS4_OK{Resok4: nfsv4.Getfh4resok{Object: q.s.makeFH(q.cur, q.curAP)}}
}

func (q *request) savefh() nfsv4.Nfsstat4 {
	if st := q.needFH(); st != nfsv4.NFS4_OK {
		return st
	}
	q.saved, q.savedAP, q.savedSid, q.hasSavedSid = q.cur, q.curAP, q.curSid, q.hasCurSid
	return nfsv4.NFS4_OK
}

// restorefh brings back the saved filehandle with its access point, and
// so the identity operations run as.
func (q *request) restorefh() nfsv4.Nfsstat4 {
	if q.saved == 0 {
		return nfsv4.NFS4ERR_RESTOREFH
	}
	q.cur, q.curAP, q.curSid, q.hasCurSid = q.saved, q.savedAP, q.savedSid, q.hasSavedSid
	q.cred = q.credFor(q.curAP)
	return nfsv4.NFS4_OK
}

// curDir loads the current filehandle and checks it is a directory.
func (q *request) curDir() (vfs.Attr, nfsv4.Nfsstat4) {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return a, st
	}
	switch {
	case a.IsDir():
		return a, nfsv4.NFS4_OK
	case ftype(&a) == nfsv4.NF4LNK:
		return a, nfsv4.NFS4ERR_SYMLINK
	}
	return a, nfsv4.NFS4ERR_NOTDIR
}

// checkName validates a component name argument.
func checkName(name string) nfsv4.Nfsstat4 {
	switch {
	case name == "":
		return nfsv4.NFS4ERR_INVAL
	case len(name) > 255:
		return nfsv4.NFS4ERR_NAMETOOLONG
	case name == "." || name == "..":
		return nfsv4.NFS4ERR_BADNAME
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return nfsv4.NFS4ERR_BADCHAR
		}
	}
	return nfsv4.NFS4_OK
}

func (q *request) lookup(name string) nfsv4.Nfsstat4 {
	if _, st := q.curDir(); st != nfsv4.NFS4_OK {
		return st
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return st
	}
	if q.cur == pseudoRoot {
		return q.lookupAccessPoint(name)
	}
	a, err := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name)
	if err != nil {
		return statusOf(err)
	}
	q.setCur(a.Ino)
	return nfsv4.NFS4_OK
}

// lookupp goes up one directory. At an access point's root it stays
// there, as ".." does at "/"; at the file system's root or the
// pseudo-root there is nothing above (NFS4ERR_NOENT).
func (q *request) lookupp() nfsv4.Nfsstat4 {
	if _, st := q.curDir(); st != nfsv4.NFS4_OK {
		return st
	}
	ap := q.curAP
	switch {
	case ap != nil && q.cur == ap.root:
		return nfsv4.NFS4_OK
	case q.cur == meta.RootIno || q.cur == pseudoRoot:
		return nfsv4.NFS4ERR_NOENT
	}
	a, err := q.s.fs.Lookup(q.ctx, q.cred, q.cur, "..")
	if err != nil {
		return statusOf(err)
	}
	if ap != nil {
		// The current directory was moved out of the root since PUTFH.
		if st := q.s.inside(q.ctx, ap, a.Ino, &a); st != nfsv4.NFS4_OK {
			return st
		}
	}
	q.setCur(a.Ino)
	return nfsv4.NFS4_OK
}

func (q *request) access(want uint32) nfsv4.Access4res {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return &nfsv4.Access4res_default{Status: st}
	}
	may := func(mask uint32) bool { return q.s.fs.Access(q.ctx, q.cred, q.cur, mask) == nil }
	if q.cur == pseudoRoot {
		may = func(mask uint32) bool { return mask&2 == 0 } // read-only for everyone
	}
	var bits, allowed uint32
	add := func(b uint32, ok func() bool) {
		if want&b == 0 {
			return
		}
		bits |= b
		if ok() {
			allowed |= b
		}
	}
	var r, w, x *bool
	cached := func(p **bool, mask uint32) func() bool {
		return func() bool {
			if *p == nil {
				v := may(mask)
				*p = &v
			}
			return **p
		}
	}
	add(nfsv4.ACCESS4_READ, cached(&r, 4))
	add(nfsv4.ACCESS4_MODIFY, cached(&w, 2))
	add(nfsv4.ACCESS4_EXTEND, cached(&w, 2))
	if a.IsDir() {
		add(nfsv4.ACCESS4_LOOKUP, cached(&x, 1))
		add(nfsv4.ACCESS4_DELETE, cached(&w, 2))
	} else {
		add(nfsv4.ACCESS4_EXECUTE, cached(&x, 1))
	}
	if q.minor >= 2 {
		// RFC 8276, by the rules of the xattr operations (xattr.go):
		// reading a value needs read permission, setting or removing one
		// write permission on a regular file or directory, listing
		// nothing.
		takesXattrs := a.IsDir() || ftype(&a) == nfsv4.NF4REG
		add(access4XARead, cached(&r, 4))
		add(access4XAWrite, func() bool { return takesXattrs && cached(&w, 2)() })
		add(access4XAList, func() bool { return true })
	}
	return &nfsv4.Access4res_NFS4_OK{Resok4: nfsv4.Access4resok{Supported: bits, Access: allowed}}
}

func (q *request) getattr(req []uint32) nfsv4.Getattr4res {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return &nfsv4.Getattr4res_default{Status: st}
	}
	m := maskOf(req)
	if m.asksWriteOnly() {
		return &nfsv4.Getattr4res_default{Status: nfsv4.NFS4ERR_INVAL}
	}
	return &nfsv4.Getattr4res_NFS4_OK{Resok4: nfsv4.Getattr4resok{ObjAttributes: q.encodeAttrs(&a, m)}}
}

func (q *request) setattr(a *nfsv4.Setattr4args) nfsv4.Setattr4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Setattr4res { return nfsv4.Setattr4res{Status: st} }
	if _, st := q.curAttr(); st != nfsv4.NFS4_OK {
		return fail(st)
	}
	sa, st := q.decodeSetAttrs(&a.ObjAttributes)
	if st != nfsv4.NFS4_OK {
		return fail(st)
	}
	if sa.in.Valid == 0 {
		return nfsv4.Setattr4res{Status: nfsv4.NFS4_OK, Attrsset: []uint32{}}
	}
	if sa.in.Valid&vfs.SetSize != 0 {
		sid, st := q.resolveSid(a.Stateid)
		if st != nfsv4.NFS4_OK {
			return fail(st)
		}
		if isSpecial(sid) {
			if st := q.s.specialIO(q.cur, sid, true); st != nfsv4.NFS4_OK {
				return fail(st)
			}
		} else {
			io, st := q.handleFor(sid, true)
			if st != nfsv4.NFS4_OK {
				return fail(st)
			}
			defer io.done()
			sa.in.Handle = io.h
		}
		if !q.fsetid() {
			sa.in.Valid |= vfs.DropSetID
		}
	}
	if _, err := q.s.fs.SetAttr(q.ctx, q.cred, q.cur, sa.in); err != nil {
		return fail(statusOf(err))
	}
	return nfsv4.Setattr4res{Status: nfsv4.NFS4_OK, Attrsset: sa.set.words()}
}

// flavors are the security flavors this server accepts.
func (q *request) flavors() []nfsv4.Secinfo4 {
	out := []nfsv4.Secinfo4{&nfsv4.Secinfo4_default{Flavor: rpcv2.AUTH_SYS}}
	if q.s.opts.AllowAuthNone {
		out = append(out, &nfsv4.Secinfo4_default{Flavor: rpcv2.AUTH_NONE})
	}
	return out
}

func (q *request) secinfo(name string) nfsv4.Secinfo4res {
	if _, st := q.curDir(); st != nfsv4.NFS4_OK {
		return &nfsv4.Secinfo4res_default{Status: st}
	}
	if st := checkName(name); st != nfsv4.NFS4_OK {
		return &nfsv4.Secinfo4res_default{Status: st}
	}
	if q.cur == pseudoRoot {
		if q.s.aps.byName[name] == nil {
			return &nfsv4.Secinfo4res_default{Status: nfsv4.NFS4ERR_NOENT}
		}
	} else if _, err := q.s.fs.Lookup(q.ctx, q.cred, q.cur, name); err != nil {
		return &nfsv4.Secinfo4res_default{Status: statusOf(err)}
	}
	if q.minor >= 1 {
		q.setCur(0) // SECINFO consumes the current filehandle in 4.1
	}
	return &nfsv4.Secinfo4res_NFS4_OK{Resok4: q.flavors()}
}

func (q *request) secinfoNoName(style nfsv4.SecinfoStyle4) nfsv4.Secinfo4res {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return &nfsv4.Secinfo4res_default{Status: st}
	}
	if style == nfsv4.SECINFO_STYLE4_PARENT {
		if !a.IsDir() {
			return &nfsv4.Secinfo4res_default{Status: nfsv4.NFS4ERR_NOTDIR}
		}
		// The parent of an access point's root is itself (lookupp).
		if (q.cur == meta.RootIno && q.curAP == nil) || q.cur == pseudoRoot {
			return &nfsv4.Secinfo4res_default{Status: nfsv4.NFS4ERR_NOENT}
		}
	}
	q.setCur(0)
	return &nfsv4.Secinfo4res_NFS4_OK{Resok4: q.flavors()}
}
