package nfs4

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"syscall"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// Access points through COMPOUNDs: the pseudo-root, the enforced
// identity, and every way out of a root a client might try.

const (
	teamA = "team-a=/teams/a,uid=2001,gid=3001,groups=4001,mode=0750"
	teamB = "team-b=/teams/b,uid=2002,gid=3002,mode=0700"
)

func apList(t *testing.T, specs ...string) []accesspoint.AccessPoint {
	t.Helper()
	var l accesspoint.List
	for _, s := range specs {
		if err := l.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// apEnv is a file system served with the access points specs.
func apEnv(t *testing.T, specs ...string) *env {
	t.Helper()
	return newEnv(t, Options{AccessPoints: apList(t, specs...)})
}

// apRoot is the root directory of the access point name.
func (e *env) apRoot(name string) vfs.Ino {
	e.t.Helper()
	ap := e.srv.aps.byName[name]
	if ap == nil {
		e.t.Fatalf("no access point %q", name)
	}
	return ap.root
}

// mountAP walks to the access point name as a client mounting
// SERVER:/name does, and returns its root's handle.
func (c *tclient) mountAP(t *testing.T, name string) []byte {
	t.Helper()
	out := c.do(putroot(), lookup(name), getfh())
	return fhOf(t, out[2])
}

// create makes a file in dir through NFS and returns its handle.
func (c *tclient) create(t *testing.T, dir []byte, name string) []byte {
	t.Helper()
	out := c.do(putfh(dir), openArgs(c, 0, "o", name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	sid := openOK(t, out[1]).Stateid
	c.do(putfh(fhOf(t, out[2])), closeOp(0, sid))
	return fhOf(t, out[2])
}

func mkdirOp(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: name}}
}

func renameOp(from, to string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: from, Newname: to}}
}

func linkOp(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LINK{Oplink: nfsv4.Link4args{Newname: name}}
}

// vfsFile makes a file with content, owner and mode in dir, as root.
func (e *env) vfsFile(dir vfs.Ino, name, content string, uid, gid, mode uint32) vfs.Attr {
	e.t.Helper()
	ctx := context.Background()
	fs := e.eng.FS
	a, h, err := fs.Create(ctx, vfs.Root, dir, name, mode, syscall.O_RDWR)
	if err != nil {
		e.t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, err := h.Write(ctx, []byte(content), 0); err != nil {
		e.t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, vfs.Root, a.Ino, vfsSetOwner(uid, gid)); err != nil {
		e.t.Fatal(err)
	}
	return a
}

func TestAnAccessPointRootIsMadeWithItsOwnerAndModeAndExported(t *testing.T) {
	e := apEnv(t, teamA)
	a, err := e.eng.FS.GetAttr(context.Background(), e.apRoot("team-a"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != syscall.S_IFDIR|0o750 || a.Uid != 2001 || a.Gid != 3001 {
		t.Errorf("root made with mode %o owner %d:%d, want %o 2001:3001", a.Mode, a.Uid, a.Gid, syscall.S_IFDIR|0o750)
	}
	e.flush()
	if _, ok := e.get("teams/a/"); !ok {
		t.Error("the root made for the access point was not exported to the bucket")
	}
}

// A root that only the bucket holds yet is imported, not made anew beside
// what the bucket has.
func TestAnAccessPointRootThatOnlyTheBucketHoldsIsFound(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("teams/a/from-the-bucket.txt", []byte("imported"))
	e.opts.AccessPoints = apList(t, teamA)
	e.startServer()
	c := e.dial(1, userCred)
	c.session("imported")
	out := c.do(putfh(c.mountAP(t, "team-a")), lookup("from-the-bucket.txt"), readOp(nfsv4.Stateid4{}, 0, 100))
	if r := readOK(t, out[2]); string(r.Data) != "imported" {
		t.Errorf("through the access point, the bucket's file reads %q", r.Data)
	}
}

func TestThePseudoRootListsOnlyTheAccessPointsAndIsReadOnly(t *testing.T) {
	e := apEnv(t, teamB, teamA)
	e.vfsFile(meta.RootIno, "secret", "not for clients", 0, 0, 0o644)
	c := e.dial(1, rootCred)
	c.session("pseudo")

	out := c.do(putroot(), getfh(), getattr(testAttrMask...))
	pseudo := fhOf(t, out[1])
	if a := attrsOf(t, out[2]); a.typ != nfsv4.NF4DIR || a.mode != 0o555 || a.owner != "0" || a.group != "0" {
		t.Errorf("pseudo-root attributes %+v, want a directory 0555 owned by 0:0", a)
	}
	names, pages := readdirAll(t, c, pseudo, 80) // one entry a page: resumes by cookie
	if !slices.Equal(names, []string{"team-a", "team-b"}) || pages != 2 {
		t.Errorf("READDIR of the pseudo-root = %q in %d pages, want [team-a team-b] in 2", names, pages)
	}
	for _, name := range []string{"secret", "teams", e.eng.Meta.LostFoundName()} {
		c.expect(nfsv4.NFS4ERR_NOENT, putroot(), lookup(name))
		c.expect(nfsv4.NFS4ERR_NOENT, putroot(), &nfsv4.NfsArgop4_OP_SECINFO{Opsecinfo: nfsv4.Secinfo4args{Name: name}})
	}
	c.expect(nfsv4.NFS4ERR_BADNAME, putroot(), lookup(".."))
	c.expect(nfsv4.NFS4ERR_NOENT, putroot(), lookupp())
	c.do(putroot(), &nfsv4.NfsArgop4_OP_SECINFO{Opsecinfo: nfsv4.Secinfo4args{Name: "team-a"}})

	// Looking and reading only.
	out = c.do(putfh(pseudo), &nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{
		Access: nfsv4.ACCESS4_READ | nfsv4.ACCESS4_LOOKUP | nfsv4.ACCESS4_MODIFY | nfsv4.ACCESS4_EXTEND | nfsv4.ACCESS4_DELETE}})
	acc := out[1].(*nfsv4.NfsResop4_OP_ACCESS).Opaccess.(*nfsv4.Access4res_NFS4_OK).Resok4
	if acc.Access != nfsv4.ACCESS4_READ|nfsv4.ACCESS4_LOOKUP {
		t.Errorf("ACCESS on the pseudo-root granted %#x, want READ|LOOKUP", acc.Access)
	}
	c.expect(nfsv4.NFS4ERR_ROFS, putroot(), mkdirOp("new"))
	c.expect(nfsv4.NFS4ERR_ROFS, putroot(), openArgs(c, 0, "o", "new", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
	c.expect(nfsv4.NFS4ERR_ROFS, putroot(), remove("team-a"))
	c.expect(nfsv4.NFS4ERR_ROFS, putroot(), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
		ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_MODE).words(), AttrVals: []byte{0, 0, 1, 0xff}}}})
	c.expect(nfsv4.NFS4ERR_ROFS, putroot(), savefh(), putroot(), renameOp("team-a", "x"))

	// Each entry's filehandle attribute carries its access point: a file
	// made through it belongs to the access point's identity.
	out = c.do(putfh(pseudo), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Maxcount: 4096, Dircount: 4096,
		AttrRequest: maskFrom(nfsv4.FATTR4_FILEHANDLE).words()}})
	ents := out[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4.Reply.Entries
	for ent := ents; ent != nil; ent = ent.Nextentry {
		x := xdrReader{b: ent.Attrs.AttrVals}
		fh := x.opaque(nfsv4.NFS4_FHSIZE)
		f := c.create(t, fh, "through-readdir")
		a := attrsOf(t, c.do(putfh(f), getattr(testAttrMask...))[1])
		want := map[string]string{"team-a": "2001", "team-b": "2002"}[ent.Name]
		if a.owner != want {
			t.Errorf("a file made through %s's handle from READDIR is owned by %s, want %s", ent.Name, a.owner, want)
		}
	}
}

// Without access points the root is the file system's, as before.
func TestWithoutAccessPointsTheRootIsTheFileSystems(t *testing.T) {
	e := newEnv(t, Options{})
	e.vfsFile(meta.RootIno, "visible", "x", 0, 0, 0o644)
	c := e.dial(1, rootCred)
	c.session("plain")
	out := c.do(putroot(), getattr(testAttrMask...), lookup("visible"))
	if a := attrsOf(t, out[1]); a.fileid != uint64(meta.RootIno) {
		t.Errorf("PUTROOTFH without access points gave fileid %d", a.fileid)
	}
}

// Whatever the client claims (root included), it works as the access
// point's uid, gid and groups: what it makes is theirs, and it may read
// only what they may.
func TestAnAccessPointReplacesTheClientsIdentity(t *testing.T) {
	e := apEnv(t, teamA)
	root := e.apRoot("team-a")
	e.vfsFile(root, "private", "uid 5000 only", 5000, 5000, 0o600)
	e.vfsFile(root, "shared", "group 4001", 5000, 4001, 0o640)

	for _, who := range []struct {
		name     string
		uid, gid uint32
	}{{"root", 0, 0}, {"uid-1000", 1000, 1000}} {
		name := who.name
		c := e.dial(1, authSys(who.uid, who.gid))
		c.session("claims-" + name)
		ap := c.mountAP(t, "team-a")

		f := c.create(t, ap, "made-by-"+name)
		out := c.do(putfh(f), getattr(testAttrMask...), putfh(ap), mkdirOp("dir-by-"+name), getattr(testAttrMask...))
		for _, a := range []testAttrs{attrsOf(t, out[1]), attrsOf(t, out[4])} {
			if a.owner != "2001" || a.group != "3001" {
				t.Errorf("claiming %s, made an object owned by %s:%s, want 2001:3001", name, a.owner, a.group)
			}
		}
		// uid 5000's file is closed to the access point, even to a client
		// that claims root.
		c.expect(nfsv4.NFS4ERR_ACCESS, putfh(ap), lookup("private"), readOp(nfsv4.Stateid4{}, 0, 100))
		c.expect(nfsv4.NFS4ERR_ACCESS, putfh(ap),
			openArgs(c, 0, "o", "private", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
		// Its supplementary group opens the group's file.
		out = c.do(putfh(ap), lookup("shared"), readOp(nfsv4.Stateid4{}, 0, 100))
		if r := readOK(t, out[2]); string(r.Data) != "group 4001" {
			t.Errorf("claiming %s, read %q from the group's file", name, r.Data)
		}
		// Giving a file away needs the access point's rights, not the
		// claimed ones.
		c.expect(nfsv4.NFS4ERR_PERM, putfh(f), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
			ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_OWNER).words(), AttrVals: ownerVal("0")}}})
	}
}

func ownerVal(s string) []byte {
	var b xdrBuf
	b.str(s)
	return b
}

// An access point with uid 0 is root even where root is squashed: its
// identity is the configured one, not the client's.
func TestRootSquashDoesNotTouchAnAccessPointsIdentity(t *testing.T) {
	e := newEnv(t, Options{RootSquash: true, AccessPoints: apList(t, "admin=/admin,uid=0,gid=0,mode=0700")})
	c := e.dial(1, rootCred)
	c.session("admin")
	f := c.create(t, c.mountAP(t, "admin"), "f")
	if a := attrsOf(t, c.do(putfh(f), getattr(testAttrMask...))[1]); a.owner != "0" || a.group != "0" {
		t.Errorf("a file made through a uid 0 access point with root squash is owned by %s:%s, want 0:0", a.owner, a.group)
	}
}

// LOOKUPP at an access point's root stays there, however often it is
// asked; ".." is no name in NFSv4.
func TestLookuppAtAnAccessPointRootStaysThere(t *testing.T) {
	e := apEnv(t, teamA)
	c := e.dial(1, userCred)
	c.session("up")
	ap := c.mountAP(t, "team-a")
	c.do(putfh(ap), mkdirOp("sub"))

	out := c.do(putfh(ap), lookup("sub"), lookupp(), getfh(), lookupp(), lookupp(), getfh(), getattr(testAttrMask...))
	if !bytes.Equal(fhOf(t, out[3]), ap) || !bytes.Equal(fhOf(t, out[6]), ap) {
		t.Error("LOOKUPP from the access point's root left it")
	}
	if a := attrsOf(t, out[7]); a.fileid != uint64(e.apRoot("team-a")) {
		t.Errorf("after LOOKUPP at the root, the current directory is %d, want the root %d", a.fileid, e.apRoot("team-a"))
	}
	c.expect(nfsv4.NFS4ERR_BADNAME, putfh(ap), lookup(".."))
	c.do(putfh(ap), &nfsv4.NfsArgop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: nfsv4.SECINFO_STYLE4_PARENT})
	// The directories above the root are not in its listing either.
	c.expect(nfsv4.NFS4ERR_NOENT, putfh(ap), lookup("teams"))
}

// A handle made inside the root stops working once its file is no longer
// under the root, however it got out, and works again when it is back.
func TestAHandleOfAFileNoLongerUnderTheRootIsStale(t *testing.T) {
	e := apEnv(t, teamA)
	ctx := context.Background()
	fs := e.eng.FS
	root := e.apRoot("team-a")
	c := e.dial(1, userCred)
	c.session("escape")
	ap := c.mountAP(t, "team-a")
	out := c.do(putfh(ap), mkdirOp("sub"), getfh())
	sub := fhOf(t, out[2])
	f := c.create(t, sub, "f")
	g := c.create(t, ap, "g")

	// Moved out of the root (by someone else: here vfs, as FUSE would).
	if err := fs.Rename(ctx, vfs.Root, root, "sub", meta.RootIno, "moved-out", 0); err != nil {
		t.Fatal(err)
	}
	c.expect(nfsv4.NFS4ERR_STALE, putfh(sub))
	c.expect(nfsv4.NFS4ERR_STALE, putfh(f))
	c.expect(nfsv4.NFS4ERR_NOENT, putfh(ap), lookup("sub"))
	// Back in: the same handles work again (nothing remembers the refusal).
	if err := fs.Rename(ctx, vfs.Root, meta.RootIno, "moved-out", root, "sub", 0); err != nil {
		t.Fatal(err)
	}
	c.do(putfh(sub), getattr(testAttrMask...), putfh(f), getattr(testAttrMask...))

	// A file with a name inside and one outside is inside; once its only
	// name is outside, it is not.
	ga := attrsOf(t, c.do(putfh(g), getattr(testAttrMask...))[1])
	if _, err := fs.Link(ctx, vfs.Root, vfs.Ino(ga.fileid), meta.RootIno, "g-outside"); err != nil {
		t.Fatal(err)
	}
	c.do(putfh(g), getattr(testAttrMask...))
	if err := fs.Unlink(ctx, vfs.Root, root, "g"); err != nil {
		t.Fatal(err)
	}
	c.expect(nfsv4.NFS4ERR_STALE, putfh(g))
	c.expect(nfsv4.NFS4ERR_STALE, putfh(g), readOp(nfsv4.Stateid4{}, 0, 10))
}

// RENAME, LINK and COPY between handles of two access points, or of one
// and the pseudo-root, are NFS4ERR_XDEV; within one access point they
// work. RESTOREFH brings back the saved handle's identity.
func TestRenameLinkAndCopyBetweenAccessPointsAreXDEV(t *testing.T) {
	e := apEnv(t, teamA, teamB)
	c := e.dial(2, userCred)
	c.session("xdev")
	a, b := c.mountAP(t, "team-a"), c.mountAP(t, "team-b")
	fa, fb := c.create(t, a, "fa"), c.create(t, b, "fb")
	pseudo := fhOf(t, c.do(putroot(), getfh())[1])

	c.expect(nfsv4.NFS4ERR_XDEV, putfh(a), savefh(), putfh(b), renameOp("fa", "fa"))
	c.expect(nfsv4.NFS4ERR_XDEV, putfh(b), savefh(), putfh(a), renameOp("fb", "fb"))
	c.expect(nfsv4.NFS4ERR_XDEV, putfh(pseudo), savefh(), putfh(a), renameOp("team-b", "x"))
	c.expect(nfsv4.NFS4ERR_XDEV, putfh(fa), savefh(), putfh(b), linkOp("fa"))
	copyOp := &nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{CaSynchronous: true}}
	c.expect(nfsv4.NFS4ERR_XDEV, putfh(fa), savefh(), putfh(fb), copyOp)

	// team-b's file is untouched and team-a's still in place.
	c.do(putfh(a), lookup("fa"), putfh(b), lookup("fb"))
	c.expect(nfsv4.NFS4ERR_NOENT, putfh(b), lookup("fa"))
	// Within one access point they work.
	c.do(putfh(a), mkdirOp("d"), putfh(a), savefh(), lookup("d"), renameOp("fa", "fa2"))
	c.do(putfh(a), lookup("d"), lookup("fa2"))
	c.do(putfh(fb), savefh(), putfh(b), linkOp("fb2"))

	// RESTOREFH: back in team-a after a visit to team-b, a new file is
	// team-a's.
	out := c.do(putfh(a), savefh(), putfh(b), &nfsv4.NfsArgop4_OP_RESTOREFH{},
		openArgs(c, 0, "o", "after-restore", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getattr(testAttrMask...))
	if at := attrsOf(t, out[5]); at.owner != "2001" {
		t.Errorf("after RESTOREFH of team-a's handle, a new file is owned by %s, want 2001", at.owner)
	}
}

// A handle is bound to its access point: relabelled, it is no handle; one
// without an access point (from before they were configured), of an old
// format, or of an access point since removed is stale. Handles keep
// working across a restart that lists the access points in another order.
func TestAHandleIsBoundToItsAccessPoint(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, rootCred)
	c.session("before")
	plainRoot := fhOf(t, c.do(putroot(), getfh())[1])

	e.opts.AccessPoints = apList(t, teamA, teamB)
	e.startServer()
	c = e.dial(1, userCred)
	c.session("bound")
	a, b := c.mountAP(t, "team-a"), c.mountAP(t, "team-b")
	f := c.create(t, a, "f")
	c.expect(nfsv4.NFS4ERR_STALE, putfh(plainRoot))
	c.expect(nfsv4.NFS4ERR_STALE, putfh(e.srv.makeFH(e.apRoot("team-a"), nil)))

	relabelled := append([]byte(nil), f...)
	binary.BigEndian.PutUint64(relabelled[17:], accessPointID("team-b"))
	c.expect(nfsv4.NFS4ERR_BADHANDLE, putfh(relabelled))
	v2 := append([]byte{2}, f[1:17]...)
	v2 = append(v2, f[25:]...)
	c.expect(nfsv4.NFS4ERR_STALE, putfh(v2))

	// The restarted server runs a grace period for the client that opened
	// files: it comes back and says it has nothing to reclaim.
	e.opts.AccessPoints = apList(t, teamB, teamA)
	e.startServer()
	c = e.dial(1, userCred)
	c.sessionOnly("bound")
	c.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	out := c.do(putfh(f), getattr(testAttrMask...))
	if at := attrsOf(t, out[1]); at.owner != "2001" {
		t.Errorf("after a restart, team-a's file is owned by %s", at.owner)
	}
	g := c.create(t, a, "g")
	if at := attrsOf(t, c.do(putfh(g), getattr(testAttrMask...))[1]); at.owner != "2001" {
		t.Errorf("after a restart with the access points reordered, team-a's handle makes files for %s", at.owner)
	}

	e.opts.AccessPoints = apList(t, teamB)
	e.startServer()
	c = e.dial(1, rootCred)
	c.session("removed")
	c.expect(nfsv4.NFS4ERR_STALE, putfh(f))
	c.expect(nfsv4.NFS4ERR_NOENT, putroot(), lookup("team-a"))

	e.opts.AccessPoints = nil
	e.startServer()
	c = e.dial(1, rootCred)
	c.session("none")
	c.expect(nfsv4.NFS4ERR_STALE, putfh(b))
	c.do(putfh(plainRoot), getattr(testAttrMask...))
}
