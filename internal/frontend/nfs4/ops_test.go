package nfs4

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/meta"
)

func openArgs(c *tclient, seqid uint32, owner, name string, access uint32, how nfsv4.Createhow4) nfsv4.NfsArgop4 {
	var flag nfsv4.Openflag4 = &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE}
	if how != nil {
		flag = &nfsv4.Openflag4_OPEN4_CREATE{How: how}
	}
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: seqid, ShareAccess: access,
		ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE, Owner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)},
		Openhow: flag, Claim: &nfsv4.OpenClaim4_CLAIM_NULL{File: name}}}
}

func unchecked(mode uint32) nfsv4.Createhow4 {
	var b xdrBuf
	b.u32(mode)
	return &nfsv4.Createhow4_UNCHECKED4{Createattrs: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_MODE).words(), AttrVals: b}}
}

func openOK(t *testing.T, r nfsv4.NfsResop4) nfsv4.Open4resok {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4
}

func writeOp(sid nfsv4.Stateid4, off uint64, data []byte, stable nfsv4.StableHow4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: sid, Offset: off, Stable: stable, Data: data}}
}

func readOp(sid nfsv4.Stateid4, off uint64, n uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Stateid: sid, Offset: off, Count: n}}
}

func readOK(t *testing.T, r nfsv4.NfsResop4) nfsv4.Read4resok {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_READ).Opread.(*nfsv4.Read4res_NFS4_OK).Resok4
}

func closeOp(seqid uint32, sid nfsv4.Stateid4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{Seqid: seqid, OpenStateid: sid}}
}

// readdirAll lists a directory with READDIR pages of maxcount bytes.
func readdirAll(t *testing.T, c *tclient, dir []byte, maxcount uint32) (names []string, pages int) {
	t.Helper()
	var cookie uint64
	var verf [8]byte
	for {
		out := c.do(putfh(dir), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Cookie: cookie,
			Cookieverf: verf, Dircount: maxcount, Maxcount: maxcount,
			AttrRequest: maskFrom(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_FILEID).words()}})
		ok := out[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
		verf = ok.Cookieverf
		pages++
		for e := ok.Reply.Entries; e != nil; e = e.Nextentry {
			if !strings.HasPrefix(e.Name, meta.LostFoundPrefix) {
				names = append(names, e.Name)
			}
			cookie = e.Cookie
		}
		if ok.Reply.Eof {
			return names, pages
		}
	}
}

func TestSessionSetupAndReadOnlyOperationsSeeImportedFiles(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("docs/readme.txt", []byte("hello from the bucket"))
	e.put("docs/sub/deep.txt", []byte("deep"))
	e.put("top.bin", bytes.Repeat([]byte{7}, 3000))

	c := e.dial(1, userCred)
	c.session("reader")
	out := c.do(putroot(), &nfsv4.NfsArgop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: nfsv4.SECINFO_STYLE4_CURRENT_FH},
		putroot(), getfh(), getattr(testAttrMask...), lookup("docs"), getfh(), getattr(testAttrMask...), savefh(),
		lookup("readme.txt"), getattr(testAttrMask...), &nfsv4.NfsArgop4_OP_RESTOREFH{}, lookupp(), getfh())
	root := fhOf(t, out[3])
	if a := attrsOf(t, out[4]); a.typ != nfsv4.NF4DIR || a.fileid != 1 {
		t.Errorf("root attributes %+v", a)
	}
	docs := fhOf(t, out[6])
	if a := attrsOf(t, out[7]); a.typ != nfsv4.NF4DIR {
		t.Errorf("docs attributes %+v", a)
	}
	if a := attrsOf(t, out[10]); a.typ != nfsv4.NF4REG || a.size != 21 || a.owner == "" {
		t.Errorf("readme attributes %+v", a)
	}
	if !bytes.Equal(fhOf(t, out[13]), root) {
		t.Errorf("LOOKUPP from docs did not return the root")
	}

	names, _ := readdirAll(t, c, root, 4096)
	if !slices.Equal(names, []string{"docs", "top.bin"}) {
		t.Errorf("READDIR / = %q", names)
	}
	names, _ = readdirAll(t, c, docs, 4096)
	if !slices.Equal(names, []string{"readme.txt", "sub"}) {
		t.Errorf("READDIR /docs = %q", names)
	}

	// Reading an imported file through the anonymous stateid.
	out = c.do(putfh(docs), lookup("readme.txt"), readOp(nfsv4.Stateid4{}, 6, 100))
	if r := readOK(t, out[2]); string(r.Data) != "from the bucket" || !r.Eof {
		t.Errorf("READ = %q eof %v", r.Data, r.Eof)
	}
	out = c.do(putfh(docs), lookup("readme.txt"),
		&nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{Access: nfsv4.ACCESS4_READ | nfsv4.ACCESS4_MODIFY | nfsv4.ACCESS4_EXECUTE}})
	acc := out[2].(*nfsv4.NfsResop4_OP_ACCESS).Opaccess.(*nfsv4.Access4res_NFS4_OK).Resok4
	if acc.Access&nfsv4.ACCESS4_READ == 0 {
		t.Errorf("ACCESS granted %#x of %#x", acc.Access, acc.Supported)
	}
	c.expect(nfsv4.NFS4ERR_NOENT, putfh(docs), lookup("missing"))
	c.expect(nfsv4.NFS4ERR_NOTDIR, putfh(docs), lookup("readme.txt"), lookup("x"))
	c.expect(nfsv4.NFS4ERR_NOFILEHANDLE, getfh())
	c.expect(nfsv4.NFS4ERR_BADHANDLE, putfh([]byte("nonsense")))

	// VERIFY and NVERIFY compare encoded attributes.
	out = c.do(putfh(docs), lookup("readme.txt"), getattr(nfsv4.FATTR4_SIZE))
	f := out[2].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
	c.do(putfh(docs), lookup("readme.txt"), &nfsv4.NfsArgop4_OP_VERIFY{Opverify: nfsv4.Verify4args{ObjAttributes: f}})
	c.expect(nfsv4.NFS4ERR_SAME, putfh(docs), lookup("readme.txt"), &nfsv4.NfsArgop4_OP_NVERIFY{Opnverify: nfsv4.Nverify4args{ObjAttributes: f}})

	c.do(&nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: c.sess}})
	res := c.raw(&nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: c.clientID}})
	if res.Status != nfsv4.NFS4_OK {
		t.Errorf("DESTROY_CLIENTID: %s", nfsv4.Nfsstat4_name[res.Status])
	}
}

func TestOpenWriteCommitReadCloseReachesTheBucket(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("writer")
	out := c.do(putroot(), openArgs(c, 0, "o1", "new.txt", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	sid := openOK(t, out[1]).Stateid
	fh := fhOf(t, out[2])
	data := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 KB
	out = c.do(putfh(fh), writeOp(sid, 0, data[:100000], nfsv4.UNSTABLE4), writeOp(sid, 100000, data[100000:], nfsv4.FILE_SYNC4),
		&nfsv4.NfsArgop4_OP_COMMIT{Opcommit: nfsv4.Commit4args{}})
	w := out[1].(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4
	cm := out[3].(*nfsv4.NfsResop4_OP_COMMIT).Opcommit.(*nfsv4.Commit4res_NFS4_OK).Resok4
	if w.Count != 100000 || w.Committed != nfsv4.UNSTABLE4 || w.Writeverf != cm.Writeverf {
		t.Errorf("WRITE %+v, COMMIT verifier %x", w, cm.Writeverf)
	}
	out = c.do(putfh(fh), readOp(sid, 0, 1<<20), getattr(testAttrMask...))
	if r := readOK(t, out[1]); !bytes.Equal(r.Data, data) || !r.Eof {
		t.Errorf("READ back %d bytes, eof %v", len(r.Data), r.Eof)
	}
	if a := attrsOf(t, out[2]); a.size != uint64(len(data)) || a.owner != "1000" || a.mode != 0o644 {
		t.Errorf("attributes after write %+v", a)
	}
	c.do(putfh(fh), closeOp(0, sid))
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), readOp(sid, 0, 10))
	e.flush()
	if got, ok := e.get("new.txt"); !ok || !bytes.Equal(got, data) {
		t.Errorf("bucket has %d bytes (ok %v), want %d", len(got), ok, len(data))
	}

	// GUARDED fails on an existing name; EXCLUSIVE4_1 retried with the
	// same verifier opens the file it made.
	var b xdrBuf
	b.u32(0o600)
	attrs := nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_MODE).words(), AttrVals: b}
	c.expect(nfsv4.NFS4ERR_EXIST, putroot(), openArgs(c, 0, "o1", "new.txt", nfsv4.OPEN4_SHARE_ACCESS_READ,
		&nfsv4.Createhow4_GUARDED4{Createattrs: attrs}))
	excl := &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{CvaVerf: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, CvaAttrs: attrs}}
	s1 := openOK(t, c.do(putroot(), openArgs(c, 0, "o2", "excl", nfsv4.OPEN4_SHARE_ACCESS_WRITE, excl))[1]).Stateid
	s2 := openOK(t, c.do(putroot(), openArgs(c, 0, "o2", "excl", nfsv4.OPEN4_SHARE_ACCESS_WRITE, excl))[1]).Stateid
	if s1.Other != s2.Other {
		t.Errorf("a retried exclusive create made a second open state")
	}
	excl.ChCreateboth.CvaVerf[0] = 9
	c.expect(nfsv4.NFS4ERR_EXIST, putroot(), openArgs(c, 0, "o2", "excl", nfsv4.OPEN4_SHARE_ACCESS_WRITE, excl))

	// SETATTR truncates through the open stateid.
	var sz xdrBuf
	sz.u64(5)
	c.do(putroot(), lookup("excl"), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{Stateid: s2,
		ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_SIZE).words(), AttrVals: sz}}})
	out = c.do(putroot(), lookup("excl"), getattr(testAttrMask...))
	if a := attrsOf(t, out[2]); a.size != 5 || a.mode != 0o600 {
		t.Errorf("after SETATTR %+v", a)
	}
}

func TestNamespaceOperations(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("names")
	mkdir := func(name string) nfsv4.NfsArgop4 {
		return &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: name}}
	}
	out := c.do(putroot(), mkdir("a"), getfh(), putroot(), mkdir("b"), getfh())
	a, b := fhOf(t, out[2]), fhOf(t, out[5])
	out = c.do(putfh(a), openArgs(c, 0, "o", "f", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644)), getfh())
	sid, f := openOK(t, out[1]).Stateid, fhOf(t, out[2])
	c.do(putfh(f), writeOp(sid, 0, []byte("content"), nfsv4.FILE_SYNC4), closeOp(0, sid))

	// Symlink and READLINK.
	c.do(putfh(a), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_NF4LNK{Linkdata: []byte("f")}, Objname: "ln"}})
	out = c.do(putfh(a), lookup("ln"), readlink())
	if l := out[2].(*nfsv4.NfsResop4_OP_READLINK).Opreadlink.(*nfsv4.Readlink4res_NFS4_OK).Resok4.Link; string(l) != "f" {
		t.Errorf("READLINK = %q", l)
	}
	// LINK gives f a second name in b; RENAME moves it within b.
	c.do(putfh(f), savefh(), putfh(b), &nfsv4.NfsArgop4_OP_LINK{Oplink: nfsv4.Link4args{Newname: "hard"}})
	out = c.do(putfh(f), getattr(testAttrMask...))
	if at := attrsOf(t, out[1]); at.nlink != 2 {
		t.Errorf("nlink after LINK = %d", at.nlink)
	}
	c.do(putfh(b), savefh(), putfh(b), &nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: "hard", Newname: "moved"}})
	names, _ := readdirAll(t, c, b, 4096)
	if !slices.Equal(names, []string{"moved"}) {
		t.Errorf("b holds %q", names)
	}
	c.expect(nfsv4.NFS4ERR_NOTEMPTY, putroot(), remove("a"))
	c.do(putfh(a), remove("f"), remove("ln"))
	c.do(putfh(b), remove("moved"))
	// The file has no name and no open left: its handle is stale.
	c.expect(nfsv4.NFS4ERR_STALE, putfh(f))
	c.do(putroot(), remove("a"), remove("b"))
	c.expect(nfsv4.NFS4ERR_STALE, putfh(a))
	names, _ = readdirAll(t, c, fhOf(t, c.do(putroot(), getfh())[1]), 4096)
	if len(names) != 0 {
		t.Errorf("root holds %q", names)
	}
}

func TestFilehandlesSurviveAServerRestartAndTheWriteVerifierChanges(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("restart")
	out := c.do(putroot(), openArgs(c, 0, "o", "keep", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644)), getfh())
	sid, fh := openOK(t, out[1]).Stateid, fhOf(t, out[2])
	out = c.do(putfh(fh), writeOp(sid, 0, []byte("x"), nfsv4.UNSTABLE4))
	v1 := out[1].(*nfsv4.NfsResop4_OP_WRITE).Opwrite.(*nfsv4.Write4res_NFS4_OK).Resok4.Writeverf

	e.startServer()
	c = e.dial(1, userCred)
	c.session("restart")
	out = c.do(putfh(fh), getattr(testAttrMask...), &nfsv4.NfsArgop4_OP_COMMIT{})
	if a := attrsOf(t, out[1]); a.size != 1 {
		t.Errorf("attributes through the old handle %+v", a)
	}
	if v2 := out[2].(*nfsv4.NfsResop4_OP_COMMIT).Opcommit.(*nfsv4.Commit4res_NFS4_OK).Resok4.Writeverf; v1 == v2 {
		t.Errorf("write verifier did not change across a restart")
	}
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), readOp(sid, 0, 1))
}

func TestReaddirOfALargeDirectoryResumesByCookie(t *testing.T) {
	e := newEnv(t, Options{}, noExport)
	fs := e.eng.FS
	dir, err := fs.Mkdir(t.Context(), rootVfsCred, 1, "big", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	want := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("entry-%05d-with-a-longer-name", i)
		if _, err := fs.Mknod(t.Context(), rootVfsCred, dir.Ino, name, 0o644, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	c := e.dial(1, userCred)
	c.session("lister")
	fh := e.srv.makeFH(dir.Ino, nil)
	got, pages := readdirAll(t, c, fh, 8192)
	if !slices.Equal(got, want) || pages < 10 {
		t.Fatalf("listed %d names in %d pages, want %d in many", len(got), pages, n)
	}
	// A restarted server has no cookie cache: resuming rescans once.
	e.startServer()
	c = e.dial(1, userCred)
	c.session("lister")
	mid := nameCookie(want[1500])
	out := c.do(putfh(fh), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Cookie: mid,
		Cookieverf: e.srv.cookieVerf(), Dircount: 512, Maxcount: 512}})
	ok := out[1].(*nfsv4.NfsResop4_OP_READDIR).Opreaddir.(*nfsv4.Readdir4res_NFS4_OK).Resok4
	if ok.Reply.Entries == nil || ok.Reply.Entries.Name != want[1501] {
		t.Errorf("resume after a restart did not continue after %q", want[1500])
	}
	c.expect(nfsv4.NFS4ERR_NOT_SAME, putfh(fh), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
		Cookie: mid, Cookieverf: [8]byte{9}, Maxcount: 512}})
}

// TestErrorCornersAnswerAsTheRFCsSay: issue 11's error corners. READLINK
// of anything but a symlink is NFS4ERR_INVAL (RFC 8881 18.24.3), a
// zero-length name NFS4ERR_INVAL (RFC 8881 15.1), and a GETATTR asking for
// a write-only attribute (time_access_set, time_modify_set), and so does
// a READDIR, NFS4ERR_INVAL (RFC 7530 5.5, RFC 8881 5.5); a READDIR too
// small for one entry NFS4ERR_TOOSMALL; an empty owner NFS4ERR_INVAL.
func TestErrorCornersAnswerAsTheRFCsSay(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("corners")
	out := c.do(putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "d"}}, getfh())
	d := fhOf(t, out[2])
	out = c.do(putfh(d), openArgs(c, 0, "o", "f", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644)), getfh())
	sid, f := openOK(t, out[1]).Stateid, fhOf(t, out[2])
	c.do(putfh(f), closeOp(0, sid))

	c.expect(nfsv4.NFS4ERR_INVAL, putfh(d), readlink())
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), readlink())
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(d), lookup(""))
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(d), remove(""))
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(d), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: ""}})
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), getattr(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_TIME_MODIFY_SET))
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), getattr(nfsv4.FATTR4_TIME_ACCESS_SET))
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(d), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
		Dircount: 4096, Maxcount: 4096, AttrRequest: maskFrom(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_TIME_MODIFY_SET).words()}})
	// The readable attributes still answer.
	c.do(putfh(f), getattr(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_TIME_MODIFY))
	// A READDIR whose reply cannot hold one entry is NFS4ERR_TOOSMALL.
	c.expect(nfsv4.NFS4ERR_TOOSMALL, putfh(d), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
		Dircount: 4096, Maxcount: 20, AttrRequest: maskFrom(nfsv4.FATTR4_TYPE).words()}})
	// An empty owner or group is NFS4ERR_INVAL, not a name to map.
	for _, at := range []int{nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP} {
		var empty xdrBuf
		empty.str("")
		c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
			ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(at).words(), AttrVals: empty}}})
	}
}

// An OPEN that creates a file with createattrs setting its size makes it
// that size (issue 11; RFC 7530 16.16.5), in 4.1 and in 4.0.
func TestOpenCreateWithASizeMakesTheFileThatSize(t *testing.T) {
	e := newEnv(t, Options{})
	for _, minor := range []uint32{1, 0} {
		c := e.dial(minor, userCred)
		if minor == 0 {
			c.setclientid40(fmt.Sprint("size", minor))
		} else {
			c.session(fmt.Sprint("size", minor))
		}
		var vals xdrBuf
		vals.u64(4321)
		vals.u32(0o640)
		how := &nfsv4.Createhow4_UNCHECKED4{Createattrs: nfsv4.Fattr4{
			Attrmask: maskFrom(nfsv4.FATTR4_SIZE, nfsv4.FATTR4_MODE).words(), AttrVals: vals}}
		name := fmt.Sprint("sized", minor)
		out := c.do(putroot(), openArgs(c, 0, "o", name, nfsv4.OPEN4_SHARE_ACCESS_WRITE, how), getfh())
		sid, f := openOK(t, out[1]).Stateid, fhOf(t, out[2])
		seqid := uint32(1)
		if minor == 0 {
			out = c.do(putfh(f), openConfirm(sid, seqid))
			sid = openConfirmed(t, out[1])
			seqid++
		}
		out = c.do(putfh(f), getattr(testAttrMask...))
		if a := attrsOf(t, out[1]); a.size != 4321 || a.mode != 0o640 {
			t.Errorf("v4.%d: a file created with size 4321 and mode 0640 has %+v", minor, a)
		}
		c.do(putfh(f), closeOp(seqid, sid))
	}
}
