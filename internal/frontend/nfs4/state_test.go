package nfs4

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

func lockNew(c *tclient, openSid nfsv4.Stateid4, owner string, typ nfsv4.NfsLockType4, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: typ, Offset: off, Length: n,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: openSid,
			LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)}}}}}
}

// openFile creates (or opens) name in the root for reading and writing.
func openFile(t *testing.T, c *tclient, owner, name string) ([]byte, nfsv4.Stateid4) {
	t.Helper()
	out := c.do(putroot(), openArgs(c, 0, owner, name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o666)), getfh())
	return fhOf(t, out[2]), openOK(t, out[1]).Stateid
}

func TestLocksConflictBetweenClients(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.dial(1, userCred), e.dial(1, authSys(1001, 1001))
	a.session("client-a")
	b.session("client-b")
	fh, sa := openFile(t, a, "oa", "locked")
	_, sb := openFile(t, b, "ob", "locked")

	out := a.do(putfh(fh), lockNew(a, sa, "la", nfsv4.WRITE_LT, 0, 100))
	lsa := out[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid

	out = b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(b, sb, "lb", nfsv4.READ_LT, 50, 10))
	d := out[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4ERR_DENIED).Denied
	if d.Offset != 0 || d.Length != 100 || d.Locktype != nfsv4.WRITE_LT || d.Owner.Clientid != a.clientID || string(d.Owner.Owner) != "la" {
		t.Errorf("LOCK denied with %+v", d)
	}
	b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT,
		Offset: 99, Length: math.MaxUint64, Owner: nfsv4.StateOwner4{Clientid: b.clientID, Owner: []byte("lb")}}})
	// A range that does not overlap is free.
	b.do(putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 100, 10))

	out = a.do(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
		LockStateid: lsa, Offset: 0, Length: 100}})
	if u := out[1].(*nfsv4.NfsResop4_OP_LOCKU).Oplocku.(*nfsv4.Locku4res_NFS4_OK).LockStateid; u.Seqid != lsa.Seqid+1 {
		t.Errorf("LOCKU stateid seqid %d after %d", u.Seqid, lsa.Seqid)
	}
	b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(b, sb, "lb2", nfsv4.WRITE_LT, 0, 101))
	b.do(putfh(fh), lockNew(b, sb, "lb2", nfsv4.WRITE_LT, 0, 100))

	// TEST_STATEID and FREE_STATEID.
	out = a.do(&nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: []nfsv4.Stateid4{
		sa, {Seqid: 1, Other: [12]byte{1, 2, 3}}}}})
	codes := out[0].(*nfsv4.NfsResop4_OP_TEST_STATEID).OptestStateid.(*nfsv4.TestStateid4res_NFS4_OK).TsrResok4.TsrStatusCodes
	if len(codes) != 2 || codes[0] != nfsv4.NFS4_OK || codes[1] != nfsv4.NFS4ERR_BAD_STATEID {
		t.Errorf("TEST_STATEID = %v", codes)
	}
	a.expect(nfsv4.NFS4ERR_LOCKS_HELD, &nfsv4.NfsArgop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4args{FsaStateid: sa}})
	a.do(&nfsv4.NfsArgop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4args{FsaStateid: nfsv4.Stateid4{Other: lsa.Other}}})
}

func TestLeaseExpiryReleasesTheClientsLocksAndOpens(t *testing.T) {
	e := newEnv(t, Options{LeaseTime: 300 * time.Millisecond})
	a, b := e.dial(1, userCred), e.dial(1, authSys(1001, 1001))
	a.session("sleepy")
	b.session("awake")
	fh, sa := openFile(t, a, "oa", "leased")
	a.do(putfh(fh), lockNew(a, sa, "la", nfsv4.WRITE_LT, 0, math.MaxUint64))
	_, sb := openFile(t, b, "ob", "leased")
	b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 0, 1))
	// b keeps renewing; a goes silent.
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		if _, st := b.call(putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 0, 1)); st == nfsv4.NFS4_OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired client's lock was never released")
		}
	}
	res := a.raw(a.seqOp(), putroot())
	if res.Status != nfsv4.NFS4ERR_BADSESSION {
		t.Errorf("expired client's SEQUENCE: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	if e.eng.FS.IsOpen(e.srvIno(fh)) != true { // b still holds its open
		t.Errorf("b's open was released with a's")
	}
}

func (e *env) srvIno(fh []byte) vfs.Ino {
	i, _, _ := e.srv.parseFH(fh)
	return i
}

func TestSequenceRetransmitIsAnsweredFromTheReplyCache(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("retry")
	mkdir := &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "once"}}
	args := encodeArgs("retry", 1, []nfsv4.NfsArgop4{c.seqOp(), putroot(), mkdir, getfh()})
	_, first := c.rpc(nfsProgram, 4, 1, args)
	_, second := c.rpc(nfsProgram, 4, 1, args)
	if !bytes.Equal(first, second) {
		t.Fatalf("retransmission answered differently:\n%x\n%x", first, second)
	}
	if res := decodeRes(t, second); res.Status != nfsv4.NFS4_OK {
		t.Errorf("replayed CREATE: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	// The next sequence id runs again; skipping one is misordered.
	c.expect(nfsv4.NFS4ERR_EXIST, putroot(), mkdir)
	c.seq++
	res := c.raw(c.seqOp(), putroot())
	if res.Status != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Errorf("skipped sequence id: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	res = c.raw(&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: c.sess, SaSlotid: 99, SaSequenceid: 1}})
	if res.Status != nfsv4.NFS4ERR_BADSLOT {
		t.Errorf("slot 99: %s", nfsv4.Nfsstat4_name[res.Status])
	}
}

func TestNFSv40SetclientidOpenConfirmReadFlow(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("hello.txt", []byte("hello, 4.0"))
	c := e.dial(0, userCred)
	out := c.do(&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
		Client:   nfsv4.NfsClientId4{Verifier: [8]byte{4}, Id: []byte("libnfs-like")},
		Callback: nfsv4.CbClient4{CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "127.0.0.1.0.0"}}}})
	ok := out[0].(*nfsv4.NfsResop4_OP_SETCLIENTID).Opsetclientid.(*nfsv4.Setclientid4res_NFS4_OK).Resok4
	c.clientID = ok.Clientid
	c.expect(nfsv4.NFS4ERR_STALE_CLIENTID, &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: c.clientID}})
	c.do(&nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4args{
		Clientid: ok.Clientid, SetclientidConfirm: ok.SetclientidConfirm}})
	c.do(&nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: c.clientID}})

	out = c.do(putroot(), openArgs(c, 1, "owner40", "hello.txt", nfsv4.OPEN4_SHARE_ACCESS_READ, nil), getfh())
	op := openOK(t, out[1])
	fh := fhOf(t, out[2])
	if op.Rflags&nfsv4.OPEN4_RESULT_CONFIRM == 0 {
		t.Fatalf("a new 4.0 open-owner was not asked to confirm")
	}
	out = c.do(putfh(fh), &nfsv4.NfsArgop4_OP_OPEN_CONFIRM{OpopenConfirm: nfsv4.OpenConfirm4args{OpenStateid: op.Stateid, Seqid: 2}})
	sid := out[1].(*nfsv4.NfsResop4_OP_OPEN_CONFIRM).OpopenConfirm.(*nfsv4.OpenConfirm4res_NFS4_OK).Resok4.OpenStateid
	c.expect(nfsv4.NFS4ERR_OLD_STATEID, putfh(fh), readOp(op.Stateid, 0, 100))
	out = c.do(putfh(fh), readOp(sid, 0, 100))
	if r := readOK(t, out[1]); string(r.Data) != "hello, 4.0" || !r.Eof {
		t.Errorf("READ = %q", r.Data)
	}
	c.expect(nfsv4.NFS4ERR_BAD_SEQID, putfh(fh), closeOp(7, sid))
	c.do(putfh(fh), closeOp(3, sid))

	// A second file written and read back by the confirmed owner.
	out = c.do(putroot(), openArgs(c, 4, "owner40", "new40", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	op, fh = openOK(t, out[1]), fhOf(t, out[2])
	if op.Rflags&nfsv4.OPEN4_RESULT_CONFIRM != 0 {
		t.Errorf("a confirmed owner was asked to confirm again")
	}
	c.do(putfh(fh), writeOp(op.Stateid, 0, []byte("forty"), nfsv4.FILE_SYNC4))
	out = c.do(putfh(fh), readOp(op.Stateid, 0, 100), closeOp(5, op.Stateid))
	if r := readOK(t, out[1]); string(r.Data) != "forty" {
		t.Errorf("READ = %q", r.Data)
	}
	// 4.1 operations do not exist in 4.0.
	res := c.raw(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	if res.Status != nfsv4.NFS4ERR_OP_ILLEGAL {
		t.Errorf("RECLAIM_COMPLETE in 4.0: %s", nfsv4.Nfsstat4_name[res.Status])
	}
}
