package nfs4

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/meta"
)

// Extended attributes (RFC 8276): GETXATTR, SETXATTR, LISTXATTRS and
// REMOVEXATTR, in minor version 2 only, over the vfs xattrs FUSE serves.
//
// Rules kept here:
//   - An NFS xattr name is a vfs name in the "user." namespace without the
//     prefix: GETXATTR "color" reads vfs "user.color", and LISTXATTRS lists
//     the vfs names that start with "user.", prefix removed, and that are
//     valid NFS names (below): exactly the names GETXATTR can read. No
//     other namespace can be named or seen over NFS.
//   - A name is non-empty valid UTF-8 without NUL bytes (NFS4ERR_INVAL
//     otherwise), and with the prefix at most meta.MaxXattrName bytes
//     (NFS4ERR_NAMETOOLONG otherwise).
//   - A missing name is NFS4ERR_NOXATTR (vfs says ENODATA); a value over
//     meta.MaxXattrValue, or one a GETXATTR reply cannot carry within the
//     session's maximum response size, is NFS4ERR_XATTR2BIG. Other errors
//     are vfs's, mapped by statusOfXattr.
//   - Permissions are vfs's: reading a value needs read permission,
//     setting or removing one needs write permission on a regular file or
//     directory, listing needs nothing beyond the filehandle. ACCESS
//     answers ACCESS4_XAREAD, ACCESS4_XAWRITE and ACCESS4_XALIST by the same
//     rules (ops_fh.go).
//   - LISTXATTRS cookies are the READDIR name hash (nameCookie) of the last
//     name a reply returned. Names are listed in byte order, so a listing
//     resumes after that name, whatever was added or removed meanwhile,
//     and across restarts. A cookie that names no current name (the name
//     was removed, or the cookie is made up) is NFS4ERR_BAD_COOKIE.
//
// go-xdr's NFSv4 types predate RFC 8276, so these operations' arguments
// are decoded (decodeXattrArgs) and their results encoded here by hand.

// RFC 8276's protocol numbers.
const (
	opGetxattr    nfsv4.NfsOpnum4 = 72
	opSetxattr    nfsv4.NfsOpnum4 = 73
	opListxattrs  nfsv4.NfsOpnum4 = 74
	opRemovexattr nfsv4.NfsOpnum4 = 75

	nfs4errNoxattr   nfsv4.Nfsstat4 = 10095
	nfs4errXattr2big nfsv4.Nfsstat4 = 10096

	// fattr4XattrSupport is the xattr_support attribute (a bool): whether
	// the object's file system supports extended attributes. Every object
	// here answers true.
	fattr4XattrSupport = 82

	access4XARead  = 0x40
	access4XAWrite = 0x80
	access4XAList  = 0x100

	setxattr4Either  = 0
	setxattr4Create  = 1
	setxattr4Replace = 2
)

// xattrNamespace is the vfs namespace NFS xattr names live in.
const xattrNamespace = "user."

// isXattrOp reports whether op is one of RFC 8276's operations.
func isXattrOp(op nfsv4.NfsOpnum4) bool { return op >= opGetxattr && op <= opRemovexattr }

// xattrArgs is the decoded argument of one RFC 8276 operation.
type xattrArgs struct {
	op       nfsv4.NfsOpnum4
	name     []byte // GETXATTR, SETXATTR (sxa_key), REMOVEXATTR
	option   uint32 // SETXATTR
	value    []byte // SETXATTR
	cookie   uint64 // LISTXATTRS
	maxcount uint32 // LISTXATTRS
}

func (a *xattrArgs) GetArgop() nfsv4.NfsOpnum4 { return a.op }

// decodeXattrArgs decodes the arguments of op (the operation number read
// already) from b and returns how many bytes they took. The name and
// value are copied out of b.
func decodeXattrArgs(op nfsv4.NfsOpnum4, b []byte) (*xattrArgs, int, error) {
	x := xdrReader{b: b}
	a := &xattrArgs{op: op}
	switch op {
	case opGetxattr, opRemovexattr:
		a.name = bytes.Clone(x.opaque(maxRecord))
	case opSetxattr:
		a.option = x.u32()
		a.name = bytes.Clone(x.opaque(maxRecord))
		a.value = bytes.Clone(x.opaque(maxRecord))
	case opListxattrs:
		a.cookie = x.u64()
		a.maxcount = x.u32()
	}
	if x.err != nil {
		return nil, 0, x.err
	}
	return a, len(b) - len(x.b), nil
}

// xattrOK starts the encoding of op's NFS4_OK result.
func xattrOK(op nfsv4.NfsOpnum4) xdrBuf {
	var b xdrBuf
	b.u32(uint32(op))
	b.u32(uint32(nfsv4.NFS4_OK))
	return b
}

func putChangeInfo(b *xdrBuf, ci nfsv4.ChangeInfo4) {
	b.bool(ci.Atomic)
	b.u64(ci.Before)
	b.u64(ci.After)
}

// vfsXattrName checks an NFS xattr name and returns the vfs name it
// stands for.
func vfsXattrName(name []byte) (string, nfsv4.Nfsstat4) {
	switch {
	case len(name) == 0, !utf8.Valid(name), bytes.IndexByte(name, 0) >= 0:
		return "", nfsv4.NFS4ERR_INVAL
	case len(xattrNamespace)+len(name) > meta.MaxXattrName:
		return "", nfsv4.NFS4ERR_NAMETOOLONG
	}
	return xattrNamespace + string(name), nfsv4.NFS4_OK
}

// replyRoom is how many bytes one operation's variable part may take: the
// server's reply limit or, in a session, the client's maximum response
// size, less room for the rest of the COMPOUND.
func (q *request) replyRoom() int {
	room := maxReply - 1024
	if q.sess != nil {
		room = min(room, int(max(q.sess.fore.CaMaxresponsesize, 1024))-512)
	}
	return room
}

// xattr runs one RFC 8276 operation.
func (q *request) xattr(a *xattrArgs) (opResult, nfsv4.Nfsstat4) {
	var (
		b  xdrBuf
		st nfsv4.Nfsstat4
	)
	switch a.op {
	case opGetxattr:
		b, st = q.getxattr(a.name)
	case opSetxattr:
		b, st = q.setxattr(a)
	case opListxattrs:
		b, st = q.listxattrs(a.cookie, a.maxcount)
	case opRemovexattr:
		b, st = q.removexattr(a.name)
	}
	if st != nfsv4.NFS4_OK {
		return rawResult{a.op, st}, st
	}
	return encodedResult(b), st
}

// getxattr reads one value: NFS4ERR_NOXATTR if the name is not set,
// NFS4ERR_XATTR2BIG if the value does not fit the reply.
func (q *request) getxattr(key []byte) (xdrBuf, nfsv4.Nfsstat4) {
	if _, st := q.curAttr(); st != nfsv4.NFS4_OK {
		return nil, st
	}
	name, st := vfsXattrName(key)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	v, err := q.s.fs.GetXattr(q.ctx, q.cred, q.cur, name)
	if err != nil {
		return nil, statusOfXattr(err)
	}
	if len(v) > q.replyRoom() {
		return nil, nfs4errXattr2big
	}
	b := xattrOK(opGetxattr)
	b.opaque(v)
	return b, nfsv4.NFS4_OK
}

// setxattr sets one value. SETXATTR4_CREATE of a name that is set is
// NFS4ERR_EXIST, SETXATTR4_REPLACE of one that is not NFS4ERR_NOXATTR, an
// option beyond the three NFS4ERR_INVAL.
func (q *request) setxattr(a *xattrArgs) (xdrBuf, nfsv4.Nfsstat4) {
	at, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	var flags int
	switch a.option {
	case setxattr4Either:
	case setxattr4Create:
		flags = meta.XattrCreate
	case setxattr4Replace:
		flags = meta.XattrReplace
	default:
		return nil, nfsv4.NFS4ERR_INVAL
	}
	name, st := vfsXattrName(a.name)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	if len(a.value) > meta.MaxXattrValue {
		return nil, nfs4errXattr2big
	}
	before := changeAttr(&at)
	if err := q.s.fs.SetXattr(q.ctx, q.cred, q.cur, name, a.value, flags); err != nil {
		return nil, statusOfXattr(err)
	}
	b := xattrOK(opSetxattr)
	putChangeInfo(&b, q.cinfo(q.cur, before))
	return b, nfsv4.NFS4_OK
}

// removexattr removes one name: NFS4ERR_NOXATTR if it is not set.
func (q *request) removexattr(key []byte) (xdrBuf, nfsv4.Nfsstat4) {
	at, st := q.curAttr()
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	name, st := vfsXattrName(key)
	if st != nfsv4.NFS4_OK {
		return nil, st
	}
	before := changeAttr(&at)
	if err := q.s.fs.RemoveXattr(q.ctx, q.cred, q.cur, name); err != nil {
		return nil, statusOfXattr(err)
	}
	b := xattrOK(opRemovexattr)
	putChangeInfo(&b, q.cinfo(q.cur, before))
	return b, nfsv4.NFS4_OK
}

// listxattrs lists the names after cookie that fit in maxcount bytes of
// LISTXATTRS4resok (the cookie, the names array, eof), and in the reply.
// It is NFS4ERR_TOOSMALL if not even the next name fits, and
// NFS4ERR_BAD_COOKIE if cookie names no current name.
func (q *request) listxattrs(cookie uint64, maxcount uint32) (xdrBuf, nfsv4.Nfsstat4) {
	if _, st := q.curAttr(); st != nfsv4.NFS4_OK {
		return nil, st
	}
	all, err := q.s.fs.ListXattr(q.ctx, q.cred, q.cur)
	if err != nil {
		return nil, statusOfXattr(err)
	}
	var names []string
	for _, n := range all {
		rest, ok := strings.CutPrefix(n, xattrNamespace)
		if _, st := vfsXattrName([]byte(rest)); ok && st == nfsv4.NFS4_OK {
			names = append(names, rest)
		}
	}
	slices.Sort(names)
	if cookie != 0 {
		i := slices.IndexFunc(names, func(n string) bool { return nameCookie(n) == cookie })
		if i < 0 {
			return nil, nfsv4.NFS4ERR_BAD_COOKIE
		}
		names = names[i+1:]
	}
	limit := min(int64(maxcount), int64(q.replyRoom()))
	size := int64(8 + 4 + 4) // cookie, array length, eof
	n := 0
	for _, name := range names {
		esize := int64(4 + (len(name)+3)&^3)
		if size+esize > limit {
			break
		}
		size += esize
		n++
	}
	if size > limit || (n == 0 && len(names) > 0) {
		return nil, nfsv4.NFS4ERR_TOOSMALL
	}
	if n > 0 {
		cookie = nameCookie(names[n-1])
	}
	b := xattrOK(opListxattrs)
	b.u64(cookie)
	b.u32(uint32(n))
	for _, name := range names[:n] {
		b.str(name)
	}
	b.bool(n == len(names))
	return b, nfsv4.NFS4_OK
}
