package nfs4

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"bucketfs/internal/engine"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// TestMain stops the shared S3 store and the PostgreSQL server the tests'
// stores run on with BUCKETFS_TEST_KV=postgres (package testkv) when they
// have run.
func TestMain(m *testing.M) { os.Exit(s3test.Main(pgtest.M(m))) }

// env is one test's file system: a fresh bucket in the shared embedded
// store, an engine, and an NFS server on a loopback port.
type env struct {
	t      testing.TB
	bucket string
	cfg    engine.Config
	eng    *engine.Engine
	srv    *Server
	addr   string
	s3     *s3.Client
	opts   Options
}

func newEnv(t testing.TB, opts Options, cfgOpts ...func(*engine.Config)) *env {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	st, name := s3test.NewBucket(t)
	e := &env{t: t, bucket: name, opts: opts}
	e.cfg = engine.Config{StateDir: t.TempDir(), Bucket: name, Endpoint: st.Endpoint,
		AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: st.Region,
		ExportDelay: 50 * time.Millisecond, OpTimeout: 10 * time.Second, Logger: quietLogger,
		WrapKV: func(db kv.Store) kv.Store { return kvreplay.FromEnv(t, db) }}
	for _, o := range cfgOpts {
		o(&e.cfg)
	}
	if e.cfg.KV == nil {
		e.cfg.KV = testkv.ForEngine(t, e.cfg.StateDir) // PostgreSQL if BUCKETFS_TEST_KV says so
	}
	e.s3 = s3.New(s3.Options{Region: st.Region, BaseEndpoint: aws.String(st.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(st.AccessKey, st.SecretKey, "")})
	eng, err := engine.Open(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	e.eng = eng
	// Let the test users create in the root (it is 0755 root on a new file
	// system), where they may.
	if _, err := eng.FS.SetAttr(context.Background(), vfs.Root, 1, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o777}); err != nil && !e.cfg.ReadOnly {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.eng.Close(); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	e.startServer()
	return e
}

// restart stops the NFS server and the engine and starts both again on the
// same state directory, as a restart of the bucketfs process does (what
// the server keeps in memory is gone; what it put in the kv is not).
func (e *env) restart() {
	e.t.Helper()
	e.srv.Close()
	if err := e.eng.Close(); err != nil {
		e.t.Fatalf("close engine: %v", err)
	}
	eng, err := engine.Open(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatalf("reopen engine: %v", err)
	}
	eng.Start()
	e.eng = eng
	e.startServer()
}

// startServer starts (or restarts) the NFS server on the engine.
func (e *env) startServer() {
	e.t.Helper()
	if e.srv != nil {
		e.srv.Close()
	}
	srv, err := New(context.Background(), e.eng.FS, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			e.t.Errorf("serve: %v", err)
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	e.srv, e.addr = srv, ln.Addr().String()
}

func (e *env) put(key string, body []byte) {
	e.t.Helper()
	if _, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &e.bucket, Key: &key,
		Body: bytes.NewReader(body)}); err != nil {
		e.t.Fatalf("put %q: %v", key, err)
	}
}

func (e *env) get(key string) ([]byte, bool) {
	e.t.Helper()
	out, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &e.bucket, Key: &key})
	if err != nil {
		return nil, false
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return b, true
}

func (e *env) flush() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.eng.Exporter.Flush(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// tclient is a minimal NFSv4 client over the go-xdr types, written for
// these tests: it sends one COMPOUND at a time and decodes the reply.
type tclient struct {
	t     testing.TB
	nc    net.Conn
	br    *bufio.Reader
	xid   uint32
	cred  rpcv2.OpaqueAuth
	minor uint32

	clientID uint64
	sess     [16]byte
	seq      uint32 // slot 0's last sequence id

	// maxResponse is the fore channel's ca_maxresponsesize session asks
	// for (0: 1 MiB).
	maxResponse uint32
	// fore, if set, is the whole fore channel session asks for.
	fore *nfsv4.ChannelAttrs4
	// cacheThis is sa_cachethis of the SEQUENCEs seqOp makes.
	cacheThis bool
}

func authSys(uid, gid uint32, groups ...uint32) rpcv2.OpaqueAuth {
	return authSysOn("test", uid, gid, groups...)
}

// authSysOn is authSys from another machine name.
func authSysOn(machine string, uid, gid uint32, groups ...uint32) rpcv2.OpaqueAuth {
	p := rpcv2.AuthsysParms{Machinename: machine, Uid: uid, Gid: gid, Gids: groups}
	var b bytes.Buffer
	p.WriteTo(&b)
	return rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: b.Bytes()}
}

func (e *env) dial(minor uint32, cred rpcv2.OpaqueAuth) *tclient {
	e.t.Helper()
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	return &tclient{t: e.t, nc: nc, br: bufio.NewReader(nc), cred: cred, minor: minor}
}

// rpc sends one call and returns the accepted reply's status and results.
func (c *tclient) rpc(prog, vers, proc uint32, args []byte) (rpcv2.ReplyBody, []byte) {
	c.t.Helper()
	c.xid++
	msg := rpcv2.RpcMsg{Xid: c.xid, Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc, Cred: c.cred, Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}}}}
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	msg.WriteTo(&b)
	b.Write(args)
	rec := b.Bytes()
	binary.BigEndian.PutUint32(rec, uint32(len(rec)-4)|0x80000000)
	c.nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.nc.Write(rec); err != nil {
		c.t.Fatal(err)
	}
	reply, err := readRecord(c.br, 4<<20)
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	r := bytes.NewReader(reply)
	var rm rpcv2.RpcMsg
	if _, err := rm.ReadFrom(r); err != nil {
		c.t.Fatalf("decode reply: %v", err)
	}
	if rm.Xid != c.xid {
		c.t.Fatalf("reply xid %d, want %d", rm.Xid, c.xid)
	}
	rest, _ := io.ReadAll(r)
	return rm.Body.(*rpcv2.RpcMsgBody_REPLY).Rbody, rest
}

func encodeArgs(tag string, minor uint32, ops []nfsv4.NfsArgop4) []byte {
	var b bytes.Buffer
	a := nfsv4.Compound4args{Tag: tag, Minorversion: minor, Argarray: ops}
	a.WriteTo(&b)
	return b.Bytes()
}

// encodeRawArgs encodes a COMPOUND4args of go-xdr operations and of
// operations encoded by hand (rawOp, for RFC 8276's, which go-xdr does
// not know).
func encodeRawArgs(tag string, minor uint32, ops []io.WriterTo) []byte {
	var b xdrBuf
	b.str(tag)
	b.u32(minor)
	b.u32(uint32(len(ops)))
	buf := bytes.NewBuffer(b)
	for _, op := range ops {
		op.WriteTo(buf)
	}
	return buf.Bytes()
}

func decodeRes(t testing.TB, b []byte) *nfsv4.Compound4res {
	t.Helper()
	var res nfsv4.Compound4res
	if _, err := res.ReadFrom(bytes.NewReader(b)); err != nil {
		t.Fatalf("decode COMPOUND reply: %v", err)
	}
	return &res
}

// result is one operation result of a reply decodeReply decoded: res for
// the operations go-xdr knows, x for RFC 8276's (xattr_test.go).
type result struct {
	res nfsv4.NfsResop4
	x   *xattrRes
}

// decodeReply decodes a COMPOUND4res that may hold results of RFC 8276
// operations, which go-xdr's decoder refuses.
func decodeReply(t testing.TB, b []byte) (nfsv4.Nfsstat4, []result) {
	t.Helper()
	x := xdrReader{b: b}
	status := nfsv4.Nfsstat4(x.u32())
	x.opaque(nfsv4.NFS4_OPAQUE_LIMIT) // tag
	n := x.u32()
	if x.err != nil {
		t.Fatalf("decode COMPOUND reply header: %v", x.err)
	}
	var out []result
	for range n {
		if len(x.b) < 4 {
			t.Fatalf("COMPOUND reply ends after %d of %d results", len(out), n)
		}
		if isXattrOp(nfsv4.NfsOpnum4(binary.BigEndian.Uint32(x.b))) {
			out = append(out, result{x: decodeXattrRes(t, &x)})
			continue
		}
		r := bytes.NewReader(x.b)
		res, _, err := nfsv4.ReadNfsResop4(r)
		if err != nil {
			t.Fatalf("decode result %d: %v", len(out), err)
		}
		x.b = x.b[len(x.b)-r.Len():]
		out = append(out, result{res: res})
	}
	if len(x.b) != 0 {
		t.Fatalf("%d bytes after the last result", len(x.b))
	}
	return status, out
}

// raw sends a COMPOUND as given (no SEQUENCE added).
func (c *tclient) raw(ops ...nfsv4.NfsArgop4) *nfsv4.Compound4res {
	c.t.Helper()
	return c.rawBytes(encodeArgs("t", c.minor, ops))
}

func (c *tclient) rawBytes(args []byte) *nfsv4.Compound4res {
	c.t.Helper()
	return decodeRes(c.t, c.compound(args))
}

// compound sends an encoded COMPOUND and returns the encoded reply.
func (c *tclient) compound(args []byte) []byte {
	c.t.Helper()
	body, res := c.rpc(nfsProgram, 4, 1, args)
	acc, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok {
		c.t.Fatalf("RPC denied: %#v", body)
	}
	if st := acc.Areply.ReplyData.GetStat(); st != rpcv2.SUCCESS {
		c.t.Fatalf("RPC accept status %d", st)
	}
	return res
}

// seqOp is the next SEQUENCE on slot 0.
func (c *tclient) seqOp() nfsv4.NfsArgop4 {
	c.seq++
	return &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: c.sess,
		SaSequenceid: c.seq, SaSlotid: 0, SaHighestSlotid: 0, SaCachethis: c.cacheThis}}
}

// call sends ops (after a SEQUENCE in 4.1) and returns the results after
// the SEQUENCE and the compound status.
func (c *tclient) call(ops ...nfsv4.NfsArgop4) ([]nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	c.t.Helper()
	if c.minor >= 1 {
		ops = append([]nfsv4.NfsArgop4{c.seqOp()}, ops...)
	}
	res := c.raw(ops...)
	out := res.Resarray
	if c.minor >= 1 {
		if len(out) == 0 {
			c.t.Fatalf("empty reply, status %d", res.Status)
		}
		out = out[1:]
	}
	return out, res.Status
}

// do is call that fails the test unless every operation succeeds.
func (c *tclient) do(ops ...nfsv4.NfsArgop4) []nfsv4.NfsResop4 {
	c.t.Helper()
	out, st := c.call(ops...)
	if st != nfsv4.NFS4_OK {
		c.t.Fatalf("COMPOUND failed with %s at op %d", nfsv4.Nfsstat4_name[st], len(out)-1)
	}
	return out
}

// expect is call that wants status st from the last operation.
func (c *tclient) expect(st nfsv4.Nfsstat4, ops ...nfsv4.NfsArgop4) []nfsv4.NfsResop4 {
	c.t.Helper()
	out, got := c.call(ops...)
	if got != st {
		c.t.Fatalf("COMPOUND status %s, want %s", nfsv4.Nfsstat4_name[got], nfsv4.Nfsstat4_name[st])
	}
	return out
}

// session sets up a 4.1 client: EXCHANGE_ID, CREATE_SESSION and, for a
// new client id, RECLAIM_COMPLETE.
func (c *tclient) session(owner string) {
	c.t.Helper()
	if !c.sessionOnly(owner) {
		c.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	}
}

// sessionOnly is EXCHANGE_ID and CREATE_SESSION; it reports whether the
// client id was confirmed already (the server knew the client).
func (c *tclient) sessionOnly(owner string) (known bool) {
	c.t.Helper()
	res := c.raw(&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: [8]byte{1}, CoOwnerid: []byte(owner)},
		EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}})
	if res.Status != nfsv4.NFS4_OK {
		c.t.Fatalf("EXCHANGE_ID: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	eid := res.Resarray[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4
	if eid.EirFlags&nfsv4.EXCHGID4_FLAG_MASK_PNFS != nfsv4.EXCHGID4_FLAG_USE_NON_PNFS {
		c.t.Fatalf("EXCHANGE_ID flags %#x", eid.EirFlags)
	}
	c.clientID = eid.EirClientid
	maxResp := uint32(1 << 20)
	if c.maxResponse != 0 {
		maxResp = c.maxResponse
	}
	attrs := nfsv4.ChannelAttrs4{CaMaxrequestsize: 1 << 20, CaMaxresponsesize: maxResp,
		CaMaxresponsesizeCached: 8 << 10, CaMaxoperations: 16, CaMaxrequests: 8}
	back := attrs
	if c.fore != nil {
		attrs = *c.fore
	}
	res = c.raw(&nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
		CsaClientid: c.clientID, CsaSequence: eid.EirSequenceid, CsaForeChanAttrs: attrs, CsaBackChanAttrs: back}})
	if res.Status != nfsv4.NFS4_OK {
		c.t.Fatalf("CREATE_SESSION: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	cs := res.Resarray[0].(*nfsv4.NfsResop4_OP_CREATE_SESSION).OpcreateSession.(*nfsv4.CreateSession4res_NFS4_OK).CsrResok4
	if cs.CsrForeChanAttrs.CaMaxresponsesize > attrs.CaMaxresponsesize || cs.CsrFlags&nfsv4.CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
		c.t.Fatalf("CREATE_SESSION returned %+v", cs)
	}
	c.sess, c.seq = cs.CsrSessionid, 0
	return eid.EirFlags&nfsv4.EXCHGID4_FLAG_CONFIRMED_R != 0
}

// Argument builders.

func putroot() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_PUTROOTFH{} }
func putfh(fh []byte) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fh}}
}
func getfh() nfsv4.NfsArgop4    { return &nfsv4.NfsArgop4_OP_GETFH{} }
func savefh() nfsv4.NfsArgop4   { return &nfsv4.NfsArgop4_OP_SAVEFH{} }
func lookupp() nfsv4.NfsArgop4  { return &nfsv4.NfsArgop4_OP_LOOKUPP{} }
func readlink() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_READLINK{} }
func lookup(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}}
}
func getattr(attrs ...int) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: maskFrom(attrs...).words()}}
}
func remove(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_REMOVE{Opremove: nfsv4.Remove4args{Target: name}}
}

func fhOf(t *testing.T, r nfsv4.NfsResop4) []byte {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_GETFH).Opgetfh.(*nfsv4.Getfh4res_NFS4_OK).Resok4.Object
}

// attrsOf decodes a GETATTR result into the few attributes tests check.
type testAttrs struct {
	typ          nfsv4.NfsFtype4
	size, fileid uint64
	mode, nlink  uint32
	owner, group string
}

func attrsOf(t *testing.T, r nfsv4.NfsResop4) testAttrs {
	t.Helper()
	f := r.(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
	return decodeTestAttrs(t, f)
}

func decodeTestAttrs(t *testing.T, f nfsv4.Fattr4) testAttrs {
	t.Helper()
	var out testAttrs
	x := xdrReader{b: f.AttrVals}
	maskOf(f.Attrmask).each(func(a int) bool {
		switch a {
		case nfsv4.FATTR4_TYPE:
			out.typ = nfsv4.NfsFtype4(x.u32())
		case nfsv4.FATTR4_SIZE:
			out.size = x.u64()
		case nfsv4.FATTR4_FILEID:
			out.fileid = x.u64()
		case nfsv4.FATTR4_MODE:
			out.mode = x.u32()
		case nfsv4.FATTR4_NUMLINKS:
			out.nlink = x.u32()
		case nfsv4.FATTR4_OWNER:
			out.owner = string(x.opaque(1024))
		case nfsv4.FATTR4_OWNER_GROUP:
			out.group = string(x.opaque(1024))
		default:
			t.Fatalf("test decoder does not know attribute %d", a)
		}
		return true
	})
	if x.err != nil || len(x.b) != 0 {
		t.Fatalf("bad attribute values")
	}
	return out
}

var testAttrMask = []int{nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MODE,
	nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER, nfsv4.FATTR4_OWNER_GROUP}

// rootCred and userCred are the AUTH_SYS identities tests use.
var (
	rootCred = authSys(0, 0)
	userCred = authSys(1000, 1000, 1000, 2000)
)

var _ = vfs.Root

var rootVfsCred = vfs.Cred{}

// quietLogger keeps the engine's and server's logs out of test output.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))

func noExport(c *engine.Config) { c.ExportDelay = time.Hour }

func vfsSetOwner(uid, gid uint32) vfs.SetAttrIn {
	return vfs.SetAttrIn{Valid: vfs.SetUid | vfs.SetGid, Uid: uid, Gid: gid}
}
