package nfs4

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// compoundHeader encodes a COMPOUND4args header for count operations.
func compoundHeader(minor, count uint32) xdrBuf {
	var b xdrBuf
	b.str("hdr")
	b.u32(minor)
	b.u32(count)
	return b
}

func TestUnknownOperationIsIllegalAndEndsTheCompound(t *testing.T) {
	e := newEnv(t, Options{})
	// Driven straight through the COMPOUND handler, without TCP.
	for _, minor := range []uint32{0, 1, 2} {
		b := compoundHeader(minor, 2)
		b.u32(99) // no such operation
		b.u32(uint32(nfsv4.OP_PUTROOTFH))
		out, ok := e.srv.compound(t.Context(), nil, caller{cred: rootVfsCred}, b, len(b))
		if !ok {
			t.Fatal("header did not decode")
		}
		res := decodeRes(t, out)
		if res.Status != nfsv4.NFS4ERR_OP_ILLEGAL || len(res.Resarray) != 1 || res.Resarray[0].GetResop() != nfsv4.OP_ILLEGAL {
			t.Errorf("minor %d: status %s, %d results", minor, nfsv4.Nfsstat4_name[res.Status], len(res.Resarray))
		}
	}
	// The same over TCP, plus the version and session rules.
	c := e.dial(1, userCred)
	b := compoundHeader(1, 1)
	b.u32(10099)
	if res := c.rawBytes(b); res.Status != nfsv4.NFS4ERR_OP_ILLEGAL {
		t.Errorf("over TCP: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	for _, tc := range []struct {
		minor uint32
		ops   []nfsv4.NfsArgop4
		want  nfsv4.Nfsstat4
	}{
		{3, []nfsv4.NfsArgop4{putroot()}, nfsv4.NFS4ERR_MINOR_VERS_MISMATCH},
		{7, nil, nfsv4.NFS4ERR_MINOR_VERS_MISMATCH},
		{1, []nfsv4.NfsArgop4{putroot()}, nfsv4.NFS4ERR_OP_NOT_IN_SESSION},
		{1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_SETCLIENTID{}}, nfsv4.NFS4ERR_NOTSUPP},
		{1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}}, putroot()}, nfsv4.NFS4ERR_NOT_ONLY_OP},
		{1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: [16]byte{1}}}}, nfsv4.NFS4ERR_BADSESSION},
		{0, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_LAYOUTGET{}}, nfsv4.NFS4ERR_OP_ILLEGAL},
		{1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_SEEK{}}, nfsv4.NFS4ERR_OP_ILLEGAL},
	} {
		c.minor = tc.minor
		res := c.raw(tc.ops...)
		if res.Status != tc.want {
			t.Errorf("minor %d %T: %s, want %s", tc.minor, tc.ops, nfsv4.Nfsstat4_name[res.Status], nfsv4.Nfsstat4_name[tc.want])
		}
		if tc.want == nfsv4.NFS4ERR_MINOR_VERS_MISMATCH && len(res.Resarray) != 0 {
			t.Errorf("MINOR_VERS_MISMATCH with %d results", len(res.Resarray))
		}
	}
}

func TestTruncatedArgumentsAreBadXDR(t *testing.T) {
	e := newEnv(t, Options{})
	full := encodeArgs("x", 0, []nfsv4.NfsArgop4{putroot(), lookup("some-name"), getattr(testAttrMask...)})
	for n := 0; n < len(full); n++ {
		out, ok := e.srv.compound(t.Context(), nil, caller{cred: rootVfsCred}, full[:n], n)
		if !ok {
			continue // the header itself is cut: GARBAGE_ARGS
		}
		res := decodeRes(t, out)
		if res.Status == nfsv4.NFS4_OK && n < len(full) && len(res.Resarray) == 3 {
			t.Errorf("cut at %d of %d bytes: all operations succeeded", n, len(full))
		}
	}
}

func TestMalformedRecordsCloseTheConnectionAndTheServerLivesOn(t *testing.T) {
	e := newEnv(t, Options{})
	send := func(name string, raw []byte, closeWrite bool) {
		t.Helper()
		nc, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(raw)
		if closeWrite {
			// A record cut short by the end of the stream.
			nc.(*net.TCPConn).CloseWrite()
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(nc)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: connection neither answered nor closed", name)
		}
		_ = got
	}
	marker := func(n uint32, last bool) []byte {
		if last {
			n |= 0x80000000
		}
		return binary.BigEndian.AppendUint32(nil, n)
	}
	send("absurd record size", marker(0x7fffffff, true), false)
	send("absurd fragments", append(append(marker(1<<20, false), make([]byte, 1<<20)...), marker(1<<20, false)...), false)
	send("empty record", marker(0, true), false)
	send("reply instead of call", append(marker(24, true), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2), false)
	send("garbage", append(marker(16, true), bytes.Repeat([]byte{0xff}, 16)...), false)
	send("truncated", append(marker(100, true), 1, 2, 3), true)

	// Bad credentials and programs get RPC-level errors.
	c := e.dial(1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE})
	body, _ := c.rpc(nfsProgram, 4, 1, nil)
	if d, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok || d.Rreply.(*rpcv2.RejectedReply_AUTH_ERROR).Stat != rpcv2.AUTH_TOOWEAK {
		t.Errorf("AUTH_NONE COMPOUND without AllowAuthNone: %#v", body)
	}
	c.cred = userCred
	body, _ = c.rpc(100005, 3, 0, nil)
	if a, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED); !ok || a.Areply.ReplyData.GetStat() != rpcv2.PROG_UNAVAIL {
		t.Errorf("MOUNT program: %#v", body)
	}
	body, _ = c.rpc(nfsProgram, 3, 0, nil)
	if a, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED); !ok || a.Areply.ReplyData.GetStat() != rpcv2.PROG_MISMATCH {
		t.Errorf("NFSv3: %#v", body)
	}
	body, _ = c.rpc(nfsProgram, 4, 1, []byte{0, 0, 0})
	if a, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED); !ok || a.Areply.ReplyData.GetStat() != rpcv2.GARBAGE_ARGS {
		t.Errorf("cut COMPOUND header: %#v", body)
	}
	// And the server still works.
	c.minor = 1
	c.session("survivor")
	c.do(putroot(), getfh())
}

func TestAuthNoneAndRootSquash(t *testing.T) {
	e := newEnv(t, Options{AllowAuthNone: true, RootSquash: true})
	c := e.dial(1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE})
	c.session("anon")
	out := c.do(putroot(), openArgs(c, 0, "o", "by-anon", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644)), getattr(testAttrMask...))
	if a := attrsOf(t, out[2]); a.owner != "65534" || a.group != "65534" {
		t.Errorf("AUTH_NONE created a file owned by %s:%s", a.owner, a.group)
	}
	r := e.dial(1, rootCred)
	r.session("root")
	out = r.do(putroot(), openArgs(r, 0, "o", "by-root", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o600)), getattr(testAttrMask...))
	if a := attrsOf(t, out[2]); a.owner != "65534" {
		t.Errorf("squashed root created a file owned by %s", a.owner)
	}
	// A file only root may read stays closed to squashed root.
	if _, err := e.eng.FS.SetAttr(t.Context(), rootVfsCred, e.srvIno(fhOf(t, r.do(putroot(), lookup("by-root"), getfh())[2])),
		vfsSetOwner(0, 0)); err != nil {
		t.Fatal(err)
	}
	r.expect(nfsv4.NFS4ERR_ACCESS, putroot(), openArgs(r, 0, "o", "by-root", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
}

func TestSeekAllocateDeallocateAndCopy(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(2, userCred)
	c.session("v42")
	fh, sid := openFile(t, c, "o", "src")
	data := bytes.Repeat([]byte("copy me "), 1000)
	c.do(putfh(fh), writeOp(sid, 0, data, nfsv4.FILE_SYNC4))
	out := c.do(putfh(fh), &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaStateid: sid, SaOffset: 10, SaWhat: nfsv4.NFS4_CONTENT_DATA}},
		&nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaStateid: sid, SaOffset: 10, SaWhat: nfsv4.NFS4_CONTENT_HOLE}})
	d := out[1].(*nfsv4.NfsResop4_OP_SEEK).Opseek.(*nfsv4.Seek4res_NFS4_OK).Resok4
	h := out[2].(*nfsv4.NfsResop4_OP_SEEK).Opseek.(*nfsv4.Seek4res_NFS4_OK).Resok4
	if d.SrOffset != 10 || h.SrOffset != uint64(len(data)) || !h.SrEof {
		t.Errorf("SEEK data %+v hole %+v", d, h)
	}
	c.expect(nfsv4.NFS4ERR_NXIO, putfh(fh), &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{SaStateid: sid, SaOffset: 1 << 20}})

	c.do(putfh(fh), &nfsv4.NfsArgop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4args{AaStateid: sid, AaOffset: 0, AaLength: 10000}})
	out = c.do(putfh(fh), getattr(testAttrMask...))
	if a := attrsOf(t, out[1]); a.size != 10000 {
		t.Errorf("size after ALLOCATE to 10000: %d", a.size)
	}
	c.do(putfh(fh), &nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{DaStateid: sid, DaOffset: 0, DaLength: 4096}})
	out = c.do(putfh(fh), readOp(sid, 0, 8))
	if r := readOK(t, out[1]); !bytes.Equal(r.Data, make([]byte, 8)) {
		t.Errorf("after DEALLOCATE the start reads %q", r.Data)
	}

	dfh, dsid := openFile(t, c, "o", "dst")
	out = c.do(putfh(fh), savefh(), putfh(dfh), &nfsv4.NfsArgop4_OP_COPY{Opcopy: nfsv4.Copy4args{
		CaSrcStateid: sid, CaDstStateid: dsid, CaSrcOffset: 4096, CaDstOffset: 0, CaCount: 0, CaSynchronous: true}})
	cp := out[3].(*nfsv4.NfsResop4_OP_COPY).Opcopy.(*nfsv4.Copy4res_NFS4_OK).CrResok4
	if cp.CrResponse.WrCount != 10000-4096 {
		t.Errorf("COPY copied %d bytes", cp.CrResponse.WrCount)
	}
	out = c.do(putfh(dfh), readOp(dsid, 0, 1<<20))
	if r := readOK(t, out[1]); !bytes.Equal(r.Data, append(data[4096:], make([]byte, 10000-len(data))...)) {
		t.Errorf("COPY destination holds %d bytes", len(r.Data))
	}
}

// The Linux client pings a server with the NULL procedure under AUTH_NONE
// before it mounts (sunrpc's rpc_ping), and refuses to mount one that
// answers AUTH_TOOWEAK ("access denied by server"). NULL carries no data and
// reaches nothing, so it is answered whatever the credential's flavor;
// AUTH_NONE stays refused for everything else unless allowed.
func TestTheNullPingIsAnsweredWhateverTheFlavorAndAuthNoneStaysRefusedForTheRest(t *testing.T) {
	e := newEnv(t, Options{})
	for _, cred := range []rpcv2.OpaqueAuth{
		{Flavor: rpcv2.AUTH_NONE},
		authSys(1000, 1000),
		authSys(0, 0),
		{Flavor: rpcv2.AUTH_SYS, Body: []byte{1, 2, 3}}, // a credential that does not decode
		{Flavor: 4242}, // a flavor the server does not know
	} {
		c := e.dial(1, cred)
		body, rest := c.rpc(nfsProgram, 4, 0, nil)
		a, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED)
		if !ok || a.Areply.ReplyData.GetStat() != rpcv2.SUCCESS || len(rest) != 0 {
			t.Errorf("NULL with flavor %d: %#v, %d bytes of results", cred.Flavor, body, len(rest))
		}
		// The connection stays usable after the ping.
		body, _ = c.rpc(nfsProgram, 4, 0, nil)
		if _, ok := body.(*rpcv2.ReplyBody_MSG_ACCEPTED); !ok {
			t.Errorf("second NULL with flavor %d: %#v", cred.Flavor, body)
		}
	}
	// Under RPCSEC_GSS a NULL call asks for a security context, which this
	// server does not offer.
	c := e.dial(1, rpcv2.OpaqueAuth{Flavor: 6})
	body, _ := c.rpc(nfsProgram, 4, 0, nil)
	if _, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok {
		t.Errorf("NULL under RPCSEC_GSS: %#v", body)
	}
	c = e.dial(1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE})
	body, _ = c.rpc(nfsProgram, 4, 1, encodeArgs("anon", 1, []nfsv4.NfsArgop4{putroot(), getfh()}))
	if d, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok || d.Rreply.(*rpcv2.RejectedReply_AUTH_ERROR).Stat != rpcv2.AUTH_TOOWEAK {
		t.Errorf("COMPOUND under AUTH_NONE without AllowAuthNone: %#v", body)
	}
	// With TLS required, a client that has not started TLS gets nothing but
	// the probe's answer: its plain NULL ping is refused too.
	req := newEnv(t, Options{TLSRequired: true})
	c = req.dial(1, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE})
	body, _ = c.rpc(nfsProgram, 4, 0, nil)
	if d, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok || d.Rreply.(*rpcv2.RejectedReply_AUTH_ERROR).Stat != rpcv2.AUTH_TOOWEAK {
		t.Errorf("plain NULL with TLS required: %#v", body)
	}
}
