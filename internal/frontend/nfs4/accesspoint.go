package nfs4

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Access points (package accesspoint): named entry points, each with a
// root directory and an identity that replaces the caller's.
//
// With access points configured, PUTROOTFH gives a pseudo-root that is no
// directory of the file system: a read-only directory (mode 0555, owned by
// root) whose only entries are the access points' names. LOOKUP of a name
// there gives that access point's root; anything else is NFS4ERR_NOENT,
// and every operation but looking and reading (see pseudoRootMay) is
// NFS4ERR_ROFS. So mounting SERVER:/ reaches nothing but the access
// points, and the whole tree is reachable only through an access point
// whose PATH is /, with its identity. Without access points PUTROOTFH is
// the file system's root, as before.
//
// A filehandle carries the access point it was reached through inside its
// signed part (fh.go), and every handle made from it (LOOKUP, OPEN,
// CREATE, READDIR's filehandle attribute) carries the same one. An
// operation runs as the identity of the current filehandle's access point
// (uid, gid, groups, as configured: root squash does not apply), whatever
// AUTH_SYS says; RESTOREFH brings back the saved handle's access point and
// so its identity. RENAME, LINK and COPY between handles of different
// access points, or of one and the pseudo-root, are NFS4ERR_XDEV.
//
// A handle never leads out of its root: LOOKUPP at the root stays there,
// as ".." does at "/" (the client's view of ".." at its mount point is
// its own business). A handle is made only by walking down from the root,
// but a directory may be moved out of the root afterwards (through FUSE,
// the bucket, another access point), so PUTFH checks that the inode still
// lies under the root through one of its names and answers NFS4ERR_STALE
// otherwise; LOOKUPP checks the parent it reaches the same way. The check
// (vfs.Within) is one read transaction of one link scan per level: about
// 2 µs a level on the embedded store, 36 µs for a file 16 levels down
// (meta's BenchmarkWithin16), next to the 4 µs inode read every PUTFH
// makes anyway. Nothing is cached, so a move is seen by the very next
// PUTFH; if a slower kv makes the walk costly, cache positive answers
// under a counter of namespace removals rather than for a time. A file that lost its last name is
// accepted while an NFS open holds it, so that a client keeps writing a
// file another client removed. A directory moved out while a COMPOUND is
// in it is noticed by the next COMPOUND's PUTFH.
//
// A handle without an access point is refused as stale while access points
// are configured (it dates from a server without them and would bypass
// them), as is a handle of an access point no longer configured and, with
// none configured, a handle of any. An access point's id in its handles is
// a hash of its name: a restart with the access points in another order
// keeps every handle's meaning, and a PATH changed since makes the old
// handles of files outside the new root stale.
//
// The roots are found (and made, if missing) by New. An access point
// follows its root directory if it is renamed; if it is removed, the
// access point answers NFS4ERR_STALE until the server restarts.

// pseudoRoot is the inode number of the pseudo-root in filehandles and its
// fileid: a number meta never gives out (numbers count up from 1).
const pseudoRoot vfs.Ino = 1<<64 - 1

// accessPoint is an access point as the server serves it.
type accessPoint struct {
	accesspoint.AccessPoint
	id   uint64  // in its filehandles; never 0
	root vfs.Ino // its root directory
}

// accessPoints are the server's access points. They do not change while
// the server runs.
type accessPoints struct {
	byName map[string]*accessPoint
	byID   map[uint64]*accessPoint
	names  []string // sorted: the pseudo-root's listing
	pseudo vfs.Attr // the pseudo-root's attributes
}

// on reports whether any access point is configured.
func (a *accessPoints) on() bool { return len(a.byName) > 0 }

// accessPointID is the id of the access point named name in filehandles.
func accessPointID(name string) uint64 {
	h := sha256.Sum256([]byte("bucketfs access point\x00" + name))
	return max(binary.BigEndian.Uint64(h[:]), 1)
}

// setupAccessPoints finds or makes the roots of the configured access
// points.
func (s *Server) setupAccessPoints(ctx context.Context, aps []accesspoint.AccessPoint) error {
	s.aps = accessPoints{byName: map[string]*accessPoint{}, byID: map[uint64]*accessPoint{}}
	for _, ap := range aps {
		if _, dup := s.aps.byName[ap.Name]; dup {
			return fmt.Errorf("access point %q defined twice", ap.Name)
		}
		root, err := ap.Root(ctx, s.fs)
		if err != nil {
			return err
		}
		x := &accessPoint{AccessPoint: ap, id: accessPointID(ap.Name), root: root.Ino}
		if other := s.aps.byID[x.id]; other != nil {
			return fmt.Errorf("access points %q and %q have the same id: rename one", other.Name, ap.Name)
		}
		s.aps.byName[ap.Name], s.aps.byID[x.id] = x, x
		s.aps.names = append(s.aps.names, ap.Name)
		s.log.Info("access point", "name", ap.Name, "path", ap.Path, "root", root.Ino,
			"uid", ap.Cred.Uid, "gid", ap.Cred.Gid, "groups", ap.Cred.Groups)
	}
	slices.Sort(s.aps.names)
	now := time.Now().UnixNano()
	s.aps.pseudo = vfs.Attr{Ino: pseudoRoot, Mode: syscall.S_IFDIR | 0o555, Nlink: uint32(2 + len(aps)),
		Atime: now, Mtime: now, Ctime: now}
	return nil
}

// credFor is the identity operations through a handle of ap run as.
func (q *request) credFor(ap *accessPoint) vfs.Cred {
	if ap == nil {
		return q.caller
	}
	return ap.Cred
}

// setFH makes ino, reached through ap (nil: none), the current filehandle;
// operations run as ap's identity from now on.
func (q *request) setFH(ino vfs.Ino, ap *accessPoint) {
	q.setCur(ino)
	q.curAP = ap
	q.cred = q.credFor(ap)
}

// inside checks that ino, whose attributes are a, still lies under ap's
// root: NFS4ERR_STALE if it does not.
func (s *Server) inside(ctx context.Context, ap *accessPoint, ino vfs.Ino, a *vfs.Attr) nfsv4.Nfsstat4 {
	if ap.root == meta.RootIno || ino == ap.root {
		return nfsv4.NFS4_OK
	}
	if a.Nlink == 0 && s.nfsOpen(ino) {
		return nfsv4.NFS4_OK // removed by someone else while a client has it open
	}
	ok, err := s.fs.Within(ctx, ino, ap.root)
	if err != nil {
		return statusOf(err)
	}
	if !ok {
		return nfsv4.NFS4ERR_STALE
	}
	return nfsv4.NFS4_OK
}

// nfsOpen reports whether an open state of this server holds ino.
func (s *Server) nfsOpen(ino vfs.Ino) bool {
	t := s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.opensByIno[ino]) > 0
}

// sameAccessPoint checks that the saved and the current filehandle were
// reached through the same access point (RENAME, LINK, COPY).
func (q *request) sameAccessPoint() nfsv4.Nfsstat4 {
	if q.savedAP != q.curAP || (q.saved == pseudoRoot) != (q.cur == pseudoRoot) {
		return nfsv4.NFS4ERR_XDEV
	}
	return nfsv4.NFS4_OK
}

// pseudoRootMay reports whether op may run while the pseudo-root is the
// current filehandle: the operations that only look, and those that do not
// use the current filehandle. Every other is NFS4ERR_ROFS there.
func pseudoRootMay(op nfsv4.NfsOpnum4) bool {
	switch op {
	case nfsv4.OP_PUTFH, nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_GETFH,
		nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP,
		nfsv4.OP_ACCESS, nfsv4.OP_GETATTR, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY,
		nfsv4.OP_SECINFO, nfsv4.OP_SECINFO_NO_NAME, nfsv4.OP_READDIR, nfsv4.OP_READLINK,
		// No current filehandle involved:
		nfsv4.OP_SEQUENCE, nfsv4.OP_EXCHANGE_ID, nfsv4.OP_CREATE_SESSION,
		nfsv4.OP_DESTROY_SESSION, nfsv4.OP_BIND_CONN_TO_SESSION, nfsv4.OP_DESTROY_CLIENTID,
		nfsv4.OP_RECLAIM_COMPLETE, nfsv4.OP_TEST_STATEID, nfsv4.OP_FREE_STATEID,
		nfsv4.OP_BACKCHANNEL_CTL, nfsv4.OP_SETCLIENTID, nfsv4.OP_SETCLIENTID_CONFIRM,
		nfsv4.OP_RENEW, nfsv4.OP_RELEASE_LOCKOWNER, nfsv4.OP_DELEGRETURN, nfsv4.OP_ILLEGAL:
		return true
	}
	return false
}

// pseudoRootGuard refuses op when the current filehandle is the
// pseudo-root and op may not run there.
func (q *request) pseudoRootGuard(op nfsv4.NfsOpnum4) (opResult, nfsv4.Nfsstat4, bool) {
	if q.cur != pseudoRoot || pseudoRootMay(op) {
		return nil, nfsv4.NFS4_OK, false
	}
	return rawResult{op, nfsv4.NFS4ERR_ROFS}, nfsv4.NFS4ERR_ROFS, true
}

// lookupAccessPoint is LOOKUP in the pseudo-root.
func (q *request) lookupAccessPoint(name string) nfsv4.Nfsstat4 {
	ap := q.s.aps.byName[name]
	if ap == nil {
		return nfsv4.NFS4ERR_NOENT
	}
	if _, st := q.s.attrOf(q.ctx, ap.root); st != nfsv4.NFS4_OK {
		return st
	}
	q.setFH(ap.root, ap)
	return nfsv4.NFS4_OK
}

// readdirPseudoRoot is READDIR of the pseudo-root: the access points'
// names, in name order, each with its root's attributes (and filehandle).
// Cookies are name hashes as everywhere (readdir.go).
func (q *request) readdirPseudoRoot(a *nfsv4.Readdir4args, req attrMask) nfsv4.Readdir4res {
	fail := func(st nfsv4.Nfsstat4) nfsv4.Readdir4res { return &nfsv4.Readdir4res_default{Status: st} }
	names := q.s.aps.names
	if a.Cookie != 0 {
		i := slices.IndexFunc(names, func(n string) bool { return nameCookie(n) == a.Cookie })
		if i < 0 {
			return fail(nfsv4.NFS4ERR_BAD_COOKIE)
		}
		names = names[i+1:]
	}
	limit := int(min(a.Maxcount, maxReply-1024))
	if q.sess != nil {
		limit = min(limit, int(q.sess.fore.CaMaxresponsesize)-512)
	}
	size := 8 + 4 + 4 // verifier, end of list, eof
	var head, tail *nfsv4.Entry4
	eof := true
	for _, name := range names {
		ap := q.s.aps.byName[name]
		var attrs nfsv4.Fattr4
		if at, st := q.s.attrOf(q.ctx, ap.root); st == nfsv4.NFS4_OK {
			attrs = q.encodeAttrsOf(&at, ap, req)
		} else if req.has(nfsv4.FATTR4_RDATTR_ERROR) {
			var b xdrBuf
			b.u32(uint32(st))
			var m attrMask
			m.set(nfsv4.FATTR4_RDATTR_ERROR)
			attrs = nfsv4.Fattr4{Attrmask: m.words(), AttrVals: b}
		} else {
			continue // its root is gone
		}
		ent := &nfsv4.Entry4{Cookie: nameCookie(name), Name: name, Attrs: attrs}
		esize := 4 + 8 + 4 + (len(name)+3)&^3 + 4 + 4*len(attrs.Attrmask) + 4 + (len(attrs.AttrVals)+3)&^3
		if size+esize > limit {
			if tail == nil {
				return fail(nfsv4.NFS4ERR_TOOSMALL)
			}
			eof = false
			break
		}
		size += esize
		if tail == nil {
			head = ent
		} else {
			tail.Nextentry = ent
		}
		tail = ent
	}
	return &nfsv4.Readdir4res_NFS4_OK{Resok4: nfsv4.Readdir4resok{Cookieverf: q.s.cookieVerf(),
		Reply: nfsv4.Dirlist4{Entries: head, Eof: eof}}}
}
