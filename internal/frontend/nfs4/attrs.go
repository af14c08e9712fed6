package nfs4

import (
	"bytes"
	"math/bits"
	"strconv"
	"strings"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"golang.org/x/sys/unix"

	"bucketfs/internal/vfs"
)

// Attribute bitmaps are handled as three words: every attribute this
// server knows is below 96.
type attrMask [3]uint32

func maskOf(words []uint32) attrMask {
	var m attrMask
	copy(m[:], words)
	return m
}

// asksWriteOnly reports whether m, the attributes a GETATTR, READDIR or
// VERIFY asks for, includes one that can only be set (time_access_set,
// time_modify_set): such a request is NFS4ERR_INVAL (RFC 8881 5.5).
func (m attrMask) asksWriteOnly() bool {
	return m.has(nfsv4.FATTR4_TIME_ACCESS_SET) || m.has(nfsv4.FATTR4_TIME_MODIFY_SET)
}

func (m attrMask) has(a int) bool { return a < 96 && m[a/32]&(1<<(a%32)) != 0 }
func (m *attrMask) set(a int)     { m[a/32] |= 1 << (a % 32) }
func (m *attrMask) clear(a int)   { m[a/32] &^= 1 << (a % 32) }

// words returns the mask as a bitmap4 without trailing zero words.
func (m attrMask) words() []uint32 {
	n := len(m)
	for n > 0 && m[n-1] == 0 {
		n--
	}
	return append([]uint32(nil), m[:n]...)
}

// each calls fn for every set attribute in ascending order.
func (m attrMask) each(fn func(a int) bool) {
	for w := range m {
		for x := m[w]; x != 0; x &= x - 1 {
			if !fn(w*32 + bits.TrailingZeros32(x)) {
				return
			}
		}
	}
}

// extra reports whether words name an attribute beyond the three words.
func extra(words []uint32) bool {
	for _, w := range words[min(len(words), 3):] {
		if w != 0 {
			return true
		}
	}
	return false
}

var (
	// readAttrs are the attributes GETATTR and READDIR return.
	readAttrs = maskFrom(nfsv4.FATTR4_SUPPORTED_ATTRS, nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FH_EXPIRE_TYPE,
		nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_LINK_SUPPORT, nfsv4.FATTR4_SYMLINK_SUPPORT,
		nfsv4.FATTR4_NAMED_ATTR, nfsv4.FATTR4_FSID, nfsv4.FATTR4_UNIQUE_HANDLES, nfsv4.FATTR4_LEASE_TIME,
		nfsv4.FATTR4_RDATTR_ERROR, nfsv4.FATTR4_ACLSUPPORT, nfsv4.FATTR4_CANSETTIME,
		nfsv4.FATTR4_CASE_INSENSITIVE, nfsv4.FATTR4_CASE_PRESERVING, nfsv4.FATTR4_CHOWN_RESTRICTED,
		nfsv4.FATTR4_FILEHANDLE, nfsv4.FATTR4_FILEID, nfsv4.FATTR4_FILES_AVAIL, nfsv4.FATTR4_FILES_FREE,
		nfsv4.FATTR4_FILES_TOTAL, nfsv4.FATTR4_HOMOGENEOUS, nfsv4.FATTR4_MAXFILESIZE, nfsv4.FATTR4_MAXLINK,
		nfsv4.FATTR4_MAXNAME, nfsv4.FATTR4_MAXREAD, nfsv4.FATTR4_MAXWRITE, nfsv4.FATTR4_MODE,
		nfsv4.FATTR4_NO_TRUNC, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP,
		nfsv4.FATTR4_RAWDEV, nfsv4.FATTR4_SPACE_AVAIL, nfsv4.FATTR4_SPACE_FREE, nfsv4.FATTR4_SPACE_TOTAL,
		nfsv4.FATTR4_SPACE_USED, nfsv4.FATTR4_TIME_ACCESS, nfsv4.FATTR4_TIME_DELTA,
		nfsv4.FATTR4_TIME_METADATA, nfsv4.FATTR4_TIME_MODIFY, nfsv4.FATTR4_MOUNTED_ON_FILEID,
		nfsv4.FATTR4_SUPPATTR_EXCLCREAT, fattr4XattrSupport)
	// writeAttrs are the attributes SETATTR and the create operations set.
	writeAttrs = maskFrom(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_OWNER,
		nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET)
	// exclAttrs may accompany an EXCLUSIVE4_1 create (the times hold the
	// verifier).
	exclAttrs = maskFrom(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP)
)

func maskFrom(attrs ...int) attrMask {
	var m attrMask
	for _, a := range attrs {
		m.set(a)
	}
	return m
}

// supported is supported_attrs for a minor version: suppattr_exclcreat
// from 4.1 on, xattr_support (RFC 8276, an extension of 4.2) from 4.2 on.
func supported(minor uint32) attrMask {
	m := readAttrs
	for i := range m {
		m[i] |= writeAttrs[i]
	}
	if minor < 1 {
		m.clear(nfsv4.FATTR4_SUPPATTR_EXCLCREAT)
	}
	if minor < 2 {
		m.clear(fattr4XattrSupport)
	}
	return m
}

func ftype(a *vfs.Attr) nfsv4.NfsFtype4 {
	switch a.Type() {
	case syscall.S_IFDIR:
		return nfsv4.NF4DIR
	case syscall.S_IFLNK:
		return nfsv4.NF4LNK
	case syscall.S_IFCHR:
		return nfsv4.NF4CHR
	case syscall.S_IFBLK:
		return nfsv4.NF4BLK
	case syscall.S_IFIFO:
		return nfsv4.NF4FIFO
	case syscall.S_IFSOCK:
		return nfsv4.NF4SOCK
	}
	return nfsv4.NF4REG
}

func putTime(b *xdrBuf, ns int64) {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	b.u64(uint64(sec))
	b.u32(uint32(nsec))
}

// changeAttr is the change attribute: the inode's ctime, which every
// change of data, attributes or entries moves.
func changeAttr(a *vfs.Attr) uint64 { return uint64(a.Ctime) }

// encodeAttrs returns the requested attributes of a, reached through the
// current filehandle's access point, as a fattr4.
func (q *request) encodeAttrs(a *vfs.Attr, req attrMask) nfsv4.Fattr4 {
	return q.encodeAttrsOf(a, q.curAP, req)
}

// encodeAttrsOf is encodeAttrs of an object reached through access point
// ap (its filehandle attribute carries ap).
func (q *request) encodeAttrsOf(a *vfs.Attr, ap *accessPoint, req attrMask) nfsv4.Fattr4 {
	s := q.s
	sup := supported(q.minor)
	var got attrMask
	var b xdrBuf
	var sfs *vfs.StatFS
	statfs := func() *vfs.StatFS {
		if sfs == nil {
			v := s.fs.StatFs(q.ctx)
			sfs = &v
		}
		return sfs
	}
	req.each(func(at int) bool {
		if !sup.has(at) || !readAttrs.has(at) {
			return true
		}
		got.set(at)
		switch at {
		case nfsv4.FATTR4_SUPPORTED_ATTRS:
			b.bitmap(sup.words())
		case nfsv4.FATTR4_TYPE:
			b.u32(uint32(ftype(a)))
		case nfsv4.FATTR4_FH_EXPIRE_TYPE:
			b.u32(nfsv4.FH4_PERSISTENT)
		case nfsv4.FATTR4_CHANGE:
			b.u64(changeAttr(a))
		case nfsv4.FATTR4_SIZE:
			b.u64(uint64(a.Size))
		case nfsv4.FATTR4_LINK_SUPPORT, nfsv4.FATTR4_SYMLINK_SUPPORT, nfsv4.FATTR4_UNIQUE_HANDLES,
			nfsv4.FATTR4_CANSETTIME, nfsv4.FATTR4_CASE_PRESERVING, nfsv4.FATTR4_CHOWN_RESTRICTED,
			nfsv4.FATTR4_HOMOGENEOUS, nfsv4.FATTR4_NO_TRUNC:
			b.bool(true)
		case nfsv4.FATTR4_NAMED_ATTR, nfsv4.FATTR4_CASE_INSENSITIVE:
			b.bool(false)
		case nfsv4.FATTR4_FSID:
			b.u64(s.fsidHash)
			b.u64(0)
		case nfsv4.FATTR4_LEASE_TIME:
			b.u32(uint32(max(1, (s.lease+999e6)/1e9)))
		case nfsv4.FATTR4_RDATTR_ERROR:
			b.u32(0) // NFS4_OK
		case nfsv4.FATTR4_ACLSUPPORT:
			b.u32(0)
		case nfsv4.FATTR4_FILEHANDLE:
			b.opaque(s.makeFH(a.Ino, ap))
		case nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MOUNTED_ON_FILEID:
			b.u64(uint64(a.Ino))
		case nfsv4.FATTR4_FILES_AVAIL, nfsv4.FATTR4_FILES_FREE:
			b.u64(statfs().Ffree)
		case nfsv4.FATTR4_FILES_TOTAL:
			b.u64(statfs().Files)
		case nfsv4.FATTR4_MAXFILESIZE:
			b.u64(5 << 40) // the largest S3 object
		case nfsv4.FATTR4_MAXLINK:
			b.u32(65000)
		case nfsv4.FATTR4_MAXNAME:
			b.u32(255)
		case nfsv4.FATTR4_MAXREAD, nfsv4.FATTR4_MAXWRITE:
			b.u64(maxIO)
		case nfsv4.FATTR4_MODE:
			b.u32(a.Mode & 0o7777)
		case nfsv4.FATTR4_NUMLINKS:
			b.u32(a.Nlink)
		case nfsv4.FATTR4_OWNER:
			b.str(strconv.FormatUint(uint64(a.Uid), 10))
		case nfsv4.FATTR4_OWNER_GROUP:
			b.str(strconv.FormatUint(uint64(a.Gid), 10))
		case nfsv4.FATTR4_RAWDEV:
			b.u32(unix.Major(uint64(a.Rdev)))
			b.u32(unix.Minor(uint64(a.Rdev)))
		case nfsv4.FATTR4_SPACE_AVAIL, nfsv4.FATTR4_SPACE_FREE:
			f := statfs()
			b.u64(f.Bfree * uint64(f.Bsize))
		case nfsv4.FATTR4_SPACE_TOTAL:
			f := statfs()
			b.u64(f.Blocks * uint64(f.Bsize))
		case nfsv4.FATTR4_SPACE_USED:
			b.u64(uint64(max(a.Size, 0)+4095) &^ 4095)
		case nfsv4.FATTR4_TIME_ACCESS:
			putTime(&b, a.Atime)
		case nfsv4.FATTR4_TIME_DELTA:
			b.u64(0)
			b.u32(1)
		case nfsv4.FATTR4_TIME_METADATA:
			putTime(&b, a.Ctime)
		case nfsv4.FATTR4_TIME_MODIFY:
			putTime(&b, a.Mtime)
		case nfsv4.FATTR4_SUPPATTR_EXCLCREAT:
			b.bitmap(exclAttrs.words())
		case fattr4XattrSupport:
			b.bool(true) // every object takes xattrs (xattr.go)
		}
		return true
	})
	return nfsv4.Fattr4{Attrmask: got.words(), AttrVals: b}
}

// setAttrs is a decoded fattr4 of settable attributes.
type setAttrs struct {
	in  vfs.SetAttrIn
	set attrMask
}

// decodeSetAttrs decodes the attributes of SETATTR, CREATE and OPEN. An
// attribute the server does not support is NFS4ERR_ATTRNOTSUPP, one it
// cannot set NFS4ERR_INVAL.
func (q *request) decodeSetAttrs(f *nfsv4.Fattr4) (setAttrs, nfsv4.Nfsstat4) {
	var out setAttrs
	if extra(f.Attrmask) {
		return out, nfsv4.NFS4ERR_ATTRNOTSUPP
	}
	m := maskOf(f.Attrmask)
	sup := supported(q.minor)
	r := xdrReader{b: f.AttrVals}
	st := nfsv4.Nfsstat4(nfsv4.NFS4_OK)
	m.each(func(at int) bool {
		switch {
		case !sup.has(at):
			st = nfsv4.NFS4ERR_ATTRNOTSUPP
			return false
		case !writeAttrs.has(at):
			st = nfsv4.NFS4ERR_INVAL
			return false
		}
		switch at {
		case nfsv4.FATTR4_SIZE:
			size := r.u64()
			if size > 1<<62 {
				st = nfsv4.NFS4ERR_FBIG
				return false
			}
			out.in.Valid |= vfs.SetSize
			out.in.Size = int64(size)
		case nfsv4.FATTR4_MODE:
			out.in.Valid |= vfs.SetMode
			out.in.Mode = r.u32() & 0o7777
		case nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP:
			name := string(r.opaque(nfsv4.NFS4_OPAQUE_LIMIT))
			if r.err != nil {
				return false
			}
			if name == "" {
				st = nfsv4.NFS4ERR_INVAL // no name at all, not one we cannot map
				return false
			}
			id, ok := parseID(name)
			if !ok {
				st = nfsv4.NFS4ERR_BADOWNER
				return false
			}
			if at == nfsv4.FATTR4_OWNER {
				out.in.Valid |= vfs.SetUid
				out.in.Uid = id
			} else {
				out.in.Valid |= vfs.SetGid
				out.in.Gid = id
			}
		case nfsv4.FATTR4_TIME_ACCESS_SET, nfsv4.FATTR4_TIME_MODIFY_SET:
			how := nfsv4.TimeHow4(r.u32())
			var ns int64
			if how == nfsv4.SET_TO_CLIENT_TIME4 {
				sec := int64(r.u64())
				nsec := r.u32()
				if nsec >= 1e9 {
					st = nfsv4.NFS4ERR_INVAL
					return false
				}
				ns = sec*1e9 + int64(nsec)
			} else if how != nfsv4.SET_TO_SERVER_TIME4 {
				st = nfsv4.NFS4ERR_INVAL
				return false
			}
			now := how == nfsv4.SET_TO_SERVER_TIME4
			if at == nfsv4.FATTR4_TIME_ACCESS_SET {
				if now {
					out.in.Valid |= vfs.SetAtimeNow
				} else {
					out.in.Valid |= vfs.SetAtime
					out.in.Atime = ns
				}
			} else {
				if now {
					out.in.Valid |= vfs.SetMtimeNow
				} else {
					out.in.Valid |= vfs.SetMtime
					out.in.Mtime = ns
				}
			}
		}
		out.set.set(at)
		return r.err == nil
	})
	if st != nfsv4.NFS4_OK {
		return setAttrs{}, st
	}
	if r.err != nil || len(r.b) != 0 {
		return setAttrs{}, nfsv4.NFS4ERR_BADXDR
	}
	return out, nfsv4.NFS4_OK
}

// parseID reads an owner or group: a number, optionally "@domain", or the
// names root and nobody.
func parseID(s string) (uint32, bool) {
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	switch s {
	case "root":
		return 0, true
	case "nobody", "nogroup":
		return nobody, true
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// verify implements VERIFY (want true) and NVERIFY: the given attributes
// are compared with the current object's, encoded the same way.
func (q *request) verify(f *nfsv4.Fattr4, want bool) nfsv4.Nfsstat4 {
	a, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return st
	}
	if extra(f.Attrmask) {
		return nfsv4.NFS4ERR_ATTRNOTSUPP
	}
	m := maskOf(f.Attrmask)
	sup := supported(q.minor)
	st = nfsv4.NFS4_OK
	m.each(func(at int) bool {
		switch {
		case !sup.has(at):
			st = nfsv4.NFS4ERR_ATTRNOTSUPP
		case !readAttrs.has(at) || at == nfsv4.FATTR4_RDATTR_ERROR:
			st = nfsv4.NFS4ERR_INVAL
		}
		return st == nfsv4.NFS4_OK
	})
	if st != nfsv4.NFS4_OK {
		return st
	}
	mine := q.encodeAttrs(&a, m)
	same := bytes.Equal(mine.AttrVals, f.AttrVals)
	switch {
	case want && !same:
		return nfsv4.NFS4ERR_NOT_SAME
	case !want && same:
		return nfsv4.NFS4ERR_SAME
	}
	return nfsv4.NFS4_OK
}
