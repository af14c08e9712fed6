package nfs4

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// RFC 8276's numbers, written out here independently of xattr.go's
// constants, so that a wrong constant there fails these tests.
const (
	rfcGetxattr    = 72
	rfcSetxattr    = 73
	rfcListxattrs  = 74
	rfcRemovexattr = 75

	rfcNoxattr   nfsv4.Nfsstat4 = 10095
	rfcXattr2big nfsv4.Nfsstat4 = 10096

	rfcXattrSupport = 82

	rfcAccessXARead  = 0x40
	rfcAccessXAWrite = 0x80
	rfcAccessXAList  = 0x100

	rfcEither  = 0
	rfcCreate  = 1
	rfcReplace = 2
)

// rawOp is an operation encoded by hand (nfs_argop4: the operation number,
// then its arguments).
type rawOp []byte

func (o rawOp) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(o)
	return int64(n), err
}

func getxattrOp(name string) rawOp {
	var b xdrBuf
	b.u32(rfcGetxattr)
	b.str(name) // gxa_name
	return rawOp(b)
}

func setxattrOp(option uint32, name string, value []byte) rawOp {
	var b xdrBuf
	b.u32(rfcSetxattr)
	b.u32(option)   // sxa_option
	b.str(name)     // sxa_key
	b.opaque(value) // sxa_value
	return rawOp(b)
}

func listxattrsOp(cookie uint64, maxcount uint32) rawOp {
	var b xdrBuf
	b.u32(rfcListxattrs)
	b.u64(cookie)   // lxa_cookie
	b.u32(maxcount) // lxa_maxcount
	return rawOp(b)
}

func removexattrOp(name string) rawOp {
	var b xdrBuf
	b.u32(rfcRemovexattr)
	b.str(name) // rxa_name
	return rawOp(b)
}

// xattrRes is a decoded result of an RFC 8276 operation.
type xattrRes struct {
	op     nfsv4.NfsOpnum4
	status nfsv4.Nfsstat4
	value  []byte            // GETXATTR
	cinfo  nfsv4.ChangeInfo4 // SETXATTR, REMOVEXATTR
	cookie uint64            // LISTXATTRS
	names  []string          // LISTXATTRS
	eof    bool              // LISTXATTRS
}

// decodeXattrRes decodes one result (nfs_resop4) of an RFC 8276 operation
// from x.
func decodeXattrRes(t testing.TB, x *xdrReader) *xattrRes {
	t.Helper()
	boolean := func() bool {
		v := x.u32()
		if v > 1 {
			t.Fatalf("bool encoded as %d", v)
		}
		return v == 1
	}
	r := &xattrRes{op: nfsv4.NfsOpnum4(x.u32())}
	r.status = nfsv4.Nfsstat4(x.u32())
	if r.status == nfsv4.NFS4_OK {
		switch r.op {
		case rfcGetxattr:
			r.value = x.opaque(1 << 20)
		case rfcSetxattr, rfcRemovexattr:
			r.cinfo.Atomic = boolean()
			r.cinfo.Before = x.u64()
			r.cinfo.After = x.u64()
		case rfcListxattrs:
			r.cookie = x.u64()
			n := x.u32()
			for i := uint32(0); i < n && x.err == nil; i++ {
				r.names = append(r.names, string(x.opaque(1024)))
			}
			r.eof = boolean()
		}
	}
	if x.err != nil {
		t.Fatalf("decode result of operation %d: %v", r.op, x.err)
	}
	return r
}

// xcall is call for COMPOUNDs that may hold RFC 8276 operations.
func (c *tclient) xcall(ops ...io.WriterTo) ([]result, nfsv4.Nfsstat4) {
	c.t.Helper()
	if c.minor >= 1 {
		ops = append([]io.WriterTo{c.seqOp()}, ops...)
	}
	st, out := decodeReply(c.t, c.compound(encodeRawArgs("t", c.minor, ops)))
	if c.minor >= 1 {
		if len(out) == 0 {
			c.t.Fatalf("empty reply, status %d", st)
		}
		out = out[1:]
	}
	return out, st
}

// xdo is xcall that fails the test unless every operation succeeds.
func (c *tclient) xdo(ops ...io.WriterTo) []result {
	c.t.Helper()
	out, st := c.xcall(ops...)
	if st != nfsv4.NFS4_OK {
		c.t.Fatalf("COMPOUND failed with %s at op %d", statusName(st), len(out)-1)
	}
	return out
}

// xexpect is xcall that wants status st from the last operation.
func (c *tclient) xexpect(st nfsv4.Nfsstat4, ops ...io.WriterTo) []result {
	c.t.Helper()
	out, got := c.xcall(ops...)
	if got != st {
		c.t.Fatalf("COMPOUND status %s, want %s", statusName(got), statusName(st))
	}
	return out
}

func statusName(st nfsv4.Nfsstat4) string {
	switch st {
	case rfcNoxattr:
		return "NFS4ERR_NOXATTR"
	case rfcXattr2big:
		return "NFS4ERR_XATTR2BIG"
	}
	if n, ok := nfsv4.Nfsstat4_name[st]; ok {
		return n
	}
	return fmt.Sprint(int32(st))
}

// xattrOf returns an RFC 8276 result, failing the test unless it is an
// NFS4_OK result of operation op.
func xattrOf(t *testing.T, r result, op nfsv4.NfsOpnum4) *xattrRes {
	t.Helper()
	if r.x == nil || r.x.op != op || r.x.status != nfsv4.NFS4_OK {
		t.Fatalf("want an NFS4_OK result of operation %d, got %+v", op, r)
	}
	return r.x
}

// listAll lists fh's xattrs with LISTXATTRS replies of maxcount bytes.
func listAll(t *testing.T, c *tclient, fh []byte, maxcount uint32) (names []string, pages int) {
	t.Helper()
	var cookie uint64
	for {
		l := xattrOf(t, c.xdo(putfh(fh), listxattrsOp(cookie, maxcount))[1], rfcListxattrs)
		names = append(names, l.names...)
		cookie = l.cookie
		pages++
		if l.eof {
			return names, pages
		}
		if len(l.names) == 0 {
			t.Fatalf("LISTXATTRS returned no name and no eof")
		}
	}
}

// xattrEnv is a 4.2 session as uid 1000 and a file it owns, mode 0644.
func xattrEnv(t *testing.T) (e *env, c *tclient, fh []byte, ino vfs.Ino) {
	t.Helper()
	e = newEnv(t, Options{}, noExport)
	a, err := e.eng.FS.Mknod(t.Context(), vfs.Cred{Uid: 1000, Gid: 1000}, 1, "f", 0o644, 0)
	if err != nil {
		t.Fatal(err)
	}
	c = e.dial(2, userCred)
	c.session("xattrs")
	return e, c, e.srv.makeFH(a.Ino, nil), a.Ino
}

func changeOf(t *testing.T, c *tclient, fh []byte) uint64 {
	t.Helper()
	out := c.do(putfh(fh), getattr(nfsv4.FATTR4_CHANGE))
	f := out[1].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
	x := xdrReader{b: f.AttrVals}
	v := x.u64()
	if !slices.Equal(f.Attrmask, maskFrom(nfsv4.FATTR4_CHANGE).words()) || x.err != nil || len(x.b) != 0 {
		t.Fatalf("GETATTR change returned %+v", f)
	}
	return v
}

func TestXattrsSetGetListAndRemoveRoundTrip(t *testing.T) {
	_, c, fh, _ := xattrEnv(t)
	change0 := changeOf(t, c, fh)
	out := c.xdo(putfh(fh), setxattrOp(rfcEither, "color", []byte("blue")),
		setxattrOp(rfcEither, "empty", nil), getxattrOp("color"), getxattrOp("empty"))
	ci := xattrOf(t, out[1], rfcSetxattr).cinfo
	change1 := changeOf(t, c, fh)
	if ci.Before != change0 || change1 == change0 {
		t.Errorf("SETXATTR change_info %+v; change before %d, after both sets %d", ci, change0, change1)
	}
	if v := xattrOf(t, out[3], rfcGetxattr).value; string(v) != "blue" {
		t.Errorf("GETXATTR color = %q", v)
	}
	if v := xattrOf(t, out[4], rfcGetxattr).value; len(v) != 0 {
		t.Errorf("GETXATTR of an empty value = %q", v)
	}
	// SETXATTR4_EITHER replaces a value that is set.
	out = c.xdo(putfh(fh), setxattrOp(rfcEither, "color", []byte("a longer value")), getxattrOp("color"))
	if v := xattrOf(t, out[2], rfcGetxattr).value; string(v) != "a longer value" {
		t.Errorf("GETXATTR after a replacing SETXATTR = %q", v)
	}
	if names, _ := listAll(t, c, fh, 4096); !slices.Equal(names, []string{"color", "empty"}) {
		t.Errorf("LISTXATTRS = %q", names)
	}

	change2 := changeOf(t, c, fh)
	out = c.xdo(putfh(fh), removexattrOp("color"))
	ci = xattrOf(t, out[1], rfcRemovexattr).cinfo
	if change3 := changeOf(t, c, fh); ci.Before != change2 || ci.After != change3 || change3 == change2 {
		t.Errorf("REMOVEXATTR change_info %+v; change before %d, after %d", ci, change2, change3)
	}
	c.xexpect(rfcNoxattr, putfh(fh), getxattrOp("color"))
	c.xexpect(rfcNoxattr, putfh(fh), removexattrOp("color"))
	if names, _ := listAll(t, c, fh, 4096); !slices.Equal(names, []string{"empty"}) {
		t.Errorf("LISTXATTRS after REMOVEXATTR = %q", names)
	}
}

// SETXATTR's options (RFC 8276 8.4.2): CREATE fails on a name that is set,
// REPLACE on one that is not; a failed SETXATTR changes nothing.
func TestSetxattrCreateAndReplaceOptions(t *testing.T) {
	_, c, fh, _ := xattrEnv(t)
	c.xdo(putfh(fh), setxattrOp(rfcCreate, "k", []byte("first")))
	c.xexpect(nfsv4.NFS4ERR_EXIST, putfh(fh), setxattrOp(rfcCreate, "k", []byte("second")))
	c.xexpect(rfcNoxattr, putfh(fh), setxattrOp(rfcReplace, "missing", []byte("x")))
	c.xexpect(rfcNoxattr, putfh(fh), getxattrOp("missing"))
	out := c.xdo(putfh(fh), getxattrOp("k"))
	if v := xattrOf(t, out[1], rfcGetxattr).value; string(v) != "first" {
		t.Errorf("after a refused CREATE, k = %q", v)
	}
	out = c.xdo(putfh(fh), setxattrOp(rfcReplace, "k", []byte("third")), getxattrOp("k"))
	if v := xattrOf(t, out[2], rfcGetxattr).value; string(v) != "third" {
		t.Errorf("after REPLACE, k = %q", v)
	}
	c.xexpect(nfsv4.NFS4ERR_INVAL, putfh(fh), setxattrOp(3, "k", []byte("x")))
}

// The error corners of names, sizes and filehandles.
func TestXattrErrorCorners(t *testing.T) {
	e, c, fh, _ := xattrEnv(t)
	ln, err := e.eng.FS.Symlink(t.Context(), vfs.Cred{Uid: 1000, Gid: 1000}, 1, "ln", "f")
	if err != nil {
		t.Fatal(err)
	}
	longest := strings.Repeat("n", 255-len("user."))
	c.xdo(putfh(fh), setxattrOp(rfcEither, longest, []byte("v")), getxattrOp(longest))
	c.xdo(putfh(fh), setxattrOp(rfcEither, "big", make([]byte, 64<<10)))
	for _, tc := range []struct {
		name string
		op   io.WriterTo
		want nfsv4.Nfsstat4
	}{
		{"an empty name", getxattrOp(""), nfsv4.NFS4ERR_INVAL},
		{"an empty name to set", setxattrOp(rfcEither, "", []byte("v")), nfsv4.NFS4ERR_INVAL},
		{"an empty name to remove", removexattrOp(""), nfsv4.NFS4ERR_INVAL},
		{"a name that is not UTF-8", setxattrOp(rfcEither, "bad\xff", []byte("v")), nfsv4.NFS4ERR_INVAL},
		{"a name with a NUL", setxattrOp(rfcEither, "a\x00b", []byte("v")), nfsv4.NFS4ERR_INVAL},
		{"a name one byte too long", setxattrOp(rfcEither, longest+"n", []byte("v")), nfsv4.NFS4ERR_NAMETOOLONG},
		{"a name one byte too long to read", getxattrOp(longest + "n"), nfsv4.NFS4ERR_NAMETOOLONG},
		{"a value one byte over 64 KiB", setxattrOp(rfcEither, "big", make([]byte, 64<<10+1)), rfcXattr2big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.xexpect(tc.want, putfh(fh), tc.op)
		})
	}
	// No current filehandle.
	c.xexpect(nfsv4.NFS4ERR_NOFILEHANDLE, getxattrOp("k"))
	c.xexpect(nfsv4.NFS4ERR_NOFILEHANDLE, listxattrsOp(0, 4096))
	// User xattrs live on regular files and directories only (as Linux).
	c.xexpect(nfsv4.NFS4ERR_PERM, putfh(e.srv.makeFH(ln.Ino, nil)), setxattrOp(rfcEither, "k", []byte("v")))
	c.xdo(putroot(), setxattrOp(rfcEither, "on-a-dir", []byte("v")))
}

// A GETXATTR whose value the session's replies cannot carry is
// NFS4ERR_XATTR2BIG; a smaller value in the same session reads.
func TestGetxattrOfAValueLargerThanTheReplyIsXattr2big(t *testing.T) {
	e, c, fh, _ := xattrEnv(t)
	c.xdo(putfh(fh), setxattrOp(rfcEither, "big", bytes.Repeat([]byte("x"), 3000)),
		setxattrOp(rfcEither, "small", []byte("fits")))
	small := e.dial(2, userCred)
	small.maxResponse = 2048
	small.session("small replies")
	small.xexpect(rfcXattr2big, putfh(fh), getxattrOp("big"))
	out := small.xdo(putfh(fh), getxattrOp("small"))
	if v := xattrOf(t, out[1], rfcGetxattr).value; string(v) != "fits" {
		t.Errorf("GETXATTR small = %q", v)
	}
	out = c.xdo(putfh(fh), getxattrOp("big"))
	if v := xattrOf(t, out[1], rfcGetxattr).value; len(v) != 3000 {
		t.Errorf("GETXATTR big in a 1 MiB session returned %d bytes", len(v))
	}
}

// LISTXATTRS returns what fits in maxcount and a cookie to continue after
// the last name; the listing resumes after that name even when others
// were removed meanwhile, and the last reply says eof.
func TestListxattrsResumesByCookieUntilEOF(t *testing.T) {
	e, c, fh, ino := xattrEnv(t)
	var want []string
	var sets []io.WriterTo
	sets = append(sets, putfh(fh))
	for i := range 20 {
		name := fmt.Sprintf("name-%02d", i)
		want = append(want, name)
		sets = append(sets, setxattrOp(rfcCreate, name, []byte{byte(i)}))
	}
	// Two COMPOUNDs: the session allows 16 operations in one.
	c.xdo(sets[:11]...)
	c.xdo(append([]io.WriterTo{putfh(fh)}, sets[11:]...)...)
	// Each name takes 12 bytes (length and 7 bytes padded to 8), the
	// cookie, array length and eof 16: 52 bytes hold three names.
	const threeNames = 16 + 3*12
	got, pages := listAll(t, c, fh, threeNames)
	if !slices.Equal(got, want) || pages != 7 {
		t.Errorf("listed %q in %d pages, want %q in 7", got, pages, want)
	}
	c.xexpect(nfsv4.NFS4ERR_TOOSMALL, putfh(fh), listxattrsOp(0, 16+11))
	c.xexpect(nfsv4.NFS4ERR_BAD_COOKIE, putfh(fh), listxattrsOp(12345, 4096))

	// Resuming after a removal elsewhere continues where the page ended.
	first := xattrOf(t, c.xdo(putfh(fh), listxattrsOp(0, threeNames))[1], rfcListxattrs)
	if !slices.Equal(first.names, want[:3]) || first.eof {
		t.Fatalf("first page %q eof %v", first.names, first.eof)
	}
	if err := e.eng.FS.RemoveXattr(t.Context(), rootVfsCred, ino, "user.name-05"); err != nil {
		t.Fatal(err)
	}
	next := xattrOf(t, c.xdo(putfh(fh), listxattrsOp(first.cookie, threeNames))[1], rfcListxattrs)
	if !slices.Equal(next.names, []string{"name-03", "name-04", "name-06"}) {
		t.Errorf("after removing name-05, the second page is %q", next.names)
	}
	// A cookie whose name is gone is NFS4ERR_BAD_COOKIE: the client starts over.
	c.xdo(putfh(fh), removexattrOp("name-02"))
	c.xexpect(nfsv4.NFS4ERR_BAD_COOKIE, putfh(fh), listxattrsOp(first.cookie, threeNames))

	// A file without xattrs lists nothing, at eof.
	a, err := e.eng.FS.Mknod(t.Context(), rootVfsCred, 1, "bare", 0o644, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := xattrOf(t, c.xdo(putfh(e.srv.makeFH(a.Ino, nil)), listxattrsOp(0, 16))[1], rfcListxattrs)
	if len(l.names) != 0 || !l.eof {
		t.Errorf("LISTXATTRS of a bare file: %q eof %v", l.names, l.eof)
	}
}

// An xattr set over NFS is the vfs xattr user.NAME, which FUSE serves, and
// the other way round; names outside the user namespace are not listed.
func TestXattrsOverNFSAreTheVfsUserNamespace(t *testing.T) {
	e, c, fh, ino := xattrEnv(t)
	fs := e.eng.FS
	c.xdo(putfh(fh), setxattrOp(rfcEither, "color", []byte("blue")))
	if v, err := fs.GetXattr(t.Context(), rootVfsCred, ino, "user.color"); err != nil || string(v) != "blue" {
		t.Errorf("vfs user.color = %q, %v", v, err)
	}
	for name, value := range map[string]string{"user.shape": "round", "trusted.hidden": "t",
		"user.bad\xff": "not UTF-8", "user.": "no name"} {
		if err := fs.SetXattr(t.Context(), rootVfsCred, ino, name, []byte(value), 0); err != nil {
			t.Fatalf("vfs set %q: %v", name, err)
		}
	}
	out := c.xdo(putfh(fh), getxattrOp("shape"))
	if v := xattrOf(t, out[1], rfcGetxattr).value; string(v) != "round" {
		t.Errorf("GETXATTR shape = %q", v)
	}
	c.xexpect(rfcNoxattr, putfh(fh), getxattrOp("trusted.hidden"))
	if names, _ := listAll(t, c, fh, 4096); !slices.Equal(names, []string{"color", "shape"}) {
		t.Errorf("LISTXATTRS = %q, want only the user namespace's valid names", names)
	}
	c.xdo(putfh(fh), removexattrOp("shape"))
	if _, err := fs.GetXattr(t.Context(), rootVfsCred, ino, "user.shape"); vfs.Errno(err) == 0 {
		t.Errorf("user.shape survived REMOVEXATTR over NFS")
	}
	if v, err := fs.GetXattr(t.Context(), rootVfsCred, ino, "trusted.hidden"); err != nil || string(v) != "t" {
		t.Errorf("trusted.hidden = %q, %v", v, err)
	}
}

// Permissions are vfs's: another user may read and list the xattrs of a
// file it may read, but not set or remove them; ACCESS says the same.
func TestXattrPermissionsFollowTheFileMode(t *testing.T) {
	e, owner, fh, ino := xattrEnv(t)
	owner.xdo(putfh(fh), setxattrOp(rfcEither, "k", []byte("v")))
	other := e.dial(2, authSys(2000, 2000))
	other.session("other")
	other.xexpect(nfsv4.NFS4ERR_ACCESS, putfh(fh), setxattrOp(rfcEither, "k", []byte("mine")))
	other.xexpect(nfsv4.NFS4ERR_ACCESS, putfh(fh), setxattrOp(rfcCreate, "new", []byte("mine")))
	other.xexpect(nfsv4.NFS4ERR_ACCESS, putfh(fh), removexattrOp("k"))
	out := other.xdo(putfh(fh), getxattrOp("k"), listxattrsOp(0, 4096))
	if v := xattrOf(t, out[1], rfcGetxattr).value; string(v) != "v" {
		t.Errorf("other user reads k = %q", v)
	}
	if l := xattrOf(t, out[2], rfcListxattrs); !slices.Equal(l.names, []string{"k"}) {
		t.Errorf("other user lists %q", l.names)
	}

	const all = rfcAccessXARead | rfcAccessXAWrite | rfcAccessXAList
	access := func(c *tclient, fh []byte) (supported, granted uint32) {
		t.Helper()
		out := c.do(putfh(fh), &nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{Access: all}})
		ok := out[1].(*nfsv4.NfsResop4_OP_ACCESS).Opaccess.(*nfsv4.Access4res_NFS4_OK).Resok4
		return ok.Supported, ok.Access
	}
	if s, g := access(owner, fh); s != all || g != all {
		t.Errorf("owner's ACCESS: supported %#x granted %#x, want %#x both", s, g, all)
	}
	if s, g := access(other, fh); s != all || g != rfcAccessXARead|rfcAccessXAList {
		t.Errorf("other's ACCESS: supported %#x granted %#x, want %#x and XAREAD|XALIST", s, g, all)
	}

	// Mode 0600 closes reading to the other user too; listing stays open,
	// as vfs (and Linux) apply no check to it.
	if _, err := e.eng.FS.SetAttr(t.Context(), rootVfsCred, ino, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	other.xexpect(nfsv4.NFS4ERR_ACCESS, putfh(fh), getxattrOp("k"))
	other.xdo(putfh(fh), listxattrsOp(0, 4096))
	if _, g := access(other, fh); g != rfcAccessXAList {
		t.Errorf("other's ACCESS to a 0600 file granted %#x, want XALIST alone", g)
	}

	// A symlink takes no user xattrs: ACCESS does not grant XAWRITE.
	ln, err := e.eng.FS.Symlink(t.Context(), vfs.Cred{Uid: 1000, Gid: 1000}, 1, "ln", "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, g := access(owner, e.srv.makeFH(ln.Ino, nil)); g&rfcAccessXAWrite != 0 {
		t.Errorf("owner's ACCESS to a symlink granted XAWRITE (%#x)", g)
	}
}

// The xattr operations exist in minor version 2 only: in 4.0 and 4.1 they
// are NFS4ERR_OP_ILLEGAL, and neither the ACCESS bits nor xattr_support
// are offered there.
func TestXattrOperationsAreIllegalBeforeMinorVersion2(t *testing.T) {
	e, _, fh, _ := xattrEnv(t)
	v40 := e.dial(0, userCred)
	v41 := e.dial(1, userCred)
	v41.session("v41")
	ops := []rawOp{getxattrOp("k"), setxattrOp(rfcEither, "k", []byte("v")), listxattrsOp(0, 4096), removexattrOp("k")}
	for _, c := range []*tclient{v40, v41} {
		for _, op := range ops {
			out := c.xexpect(nfsv4.NFS4ERR_OP_ILLEGAL, putfh(fh), op)
			if len(out) != 2 || out[1].res == nil || out[1].res.GetResop() != nfsv4.OP_ILLEGAL {
				t.Errorf("v4.%d: operation %d answered %+v, want an OP_ILLEGAL result", c.minor, op[3], out)
			}
		}
	}
	out := v41.do(putfh(fh), &nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{
		Access: nfsv4.ACCESS4_READ | rfcAccessXARead | rfcAccessXAWrite | rfcAccessXAList}},
		getattr(nfsv4.FATTR4_SUPPORTED_ATTRS, rfcXattrSupport))
	if ok := out[1].(*nfsv4.NfsResop4_OP_ACCESS).Opaccess.(*nfsv4.Access4res_NFS4_OK).Resok4; ok.Supported != nfsv4.ACCESS4_READ {
		t.Errorf("v4.1 ACCESS supported %#x, want ACCESS4_READ alone", ok.Supported)
	}
	f := out[2].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
	if maskOf(f.Attrmask).has(rfcXattrSupport) {
		t.Errorf("v4.1 GETATTR returned xattr_support")
	}
	x := xdrReader{b: f.AttrVals}
	if sup := maskOf(readBitmap(t, &x)); sup.has(rfcXattrSupport) {
		t.Errorf("v4.1 supported_attrs includes xattr_support")
	}
}

// xattr_support (RFC 8276 8.2) is in supported_attrs from 4.2 on and reads
// true on every object.
func TestXattrSupportAttributeReadsTrue(t *testing.T) {
	e, c, fh, _ := xattrEnv(t)
	for _, obj := range [][]byte{fh, e.srv.makeFH(1, nil)} {
		out := c.do(putfh(obj), getattr(nfsv4.FATTR4_SUPPORTED_ATTRS, rfcXattrSupport))
		f := out[1].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
		if !slices.Equal(f.Attrmask, maskFrom(nfsv4.FATTR4_SUPPORTED_ATTRS, rfcXattrSupport).words()) {
			t.Fatalf("GETATTR returned attributes %v", f.Attrmask)
		}
		x := xdrReader{b: f.AttrVals}
		sup := maskOf(readBitmap(t, &x))
		v := x.u32()
		if !sup.has(rfcXattrSupport) || v != 1 || x.err != nil || len(x.b) != 0 {
			t.Errorf("supported_attrs has xattr_support: %v; xattr_support encoded %d (%d bytes left, %v)",
				sup.has(rfcXattrSupport), v, len(x.b), x.err)
		}
	}
}

// readBitmap reads a bitmap4 from x.
func readBitmap(t *testing.T, x *xdrReader) []uint32 {
	t.Helper()
	n := x.u32()
	if n > 8 {
		t.Fatalf("bitmap of %d words", n)
	}
	words := make([]uint32, n)
	for i := range words {
		words[i] = x.u32()
	}
	if x.err != nil {
		t.Fatal(x.err)
	}
	return words
}
