package nfs4

import (
	"math"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// currentSid is 4.1's "current stateid" special stateid.
var currentSid = nfsv4.Stateid4{Seqid: 1}

func TestOpenDowngradeToReadRefusesWrites(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("downgrader")
	fh, sid := openFile(t, c, "o", "downgraded")
	c.do(putfh(fh), writeOp(sid, 0, []byte("written before"), nfsv4.FILE_SYNC4))
	// An OPEN for READ too: a downgrade may only go to modes the state
	// was opened with (RFC 8881 18.18.3).
	out := c.do(putroot(), openArgs(c, 0, "o", "downgraded", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
	sid = openOK(t, out[1]).Stateid

	downgrade := func(sid nfsv4.Stateid4, access uint32) nfsv4.NfsArgop4 {
		return &nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: nfsv4.OpenDowngrade4args{OpenStateid: sid,
			ShareAccess: access, ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE}}
	}
	out = c.do(putfh(fh), downgrade(sid, nfsv4.OPEN4_SHARE_ACCESS_READ))
	dsid := out[1].(*nfsv4.NfsResop4_OP_OPEN_DOWNGRADE).OpopenDowngrade.(*nfsv4.OpenDowngrade4res_NFS4_OK).Resok4.OpenStateid
	if dsid.Other != sid.Other || dsid.Seqid != sid.Seqid+1 {
		t.Errorf("OPEN_DOWNGRADE returned %+v after %+v", dsid, sid)
	}
	c.expect(nfsv4.NFS4ERR_OPENMODE, putfh(fh), writeOp(dsid, 0, []byte("written after"), nfsv4.FILE_SYNC4))
	c.expect(nfsv4.NFS4ERR_OLD_STATEID, putfh(fh), writeOp(sid, 0, []byte("written after"), nfsv4.FILE_SYNC4))
	if r := readOK(t, c.do(putfh(fh), readOp(dsid, 0, 100))[1]); string(r.Data) != "written before" {
		t.Errorf("READ after the downgrade = %q", r.Data)
	}
	// A downgrade cannot add access.
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(fh), downgrade(dsid, nfsv4.OPEN4_SHARE_ACCESS_BOTH))
}

func TestOpenByFilehandle(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("claimed.txt", []byte("opened by handle"))
	c := e.dial(1, userCred)
	c.session("claimer")
	fh := fhOf(t, c.do(putroot(), lookup("claimed.txt"), getfh())[2])
	claimFH := func(how nfsv4.Openflag4) nfsv4.NfsArgop4 {
		return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_READ,
			ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE, Owner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte("o")},
			Openhow: how, Claim: &nfsv4.OpenClaim4_CLAIM_FH{}}}
	}
	nocreate := &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE}
	out := c.do(putfh(fh), claimFH(nocreate), readOp(currentSid, 0, 100), getfh())
	if r := readOK(t, out[2]); string(r.Data) != "opened by handle" {
		t.Errorf("READ through the CLAIM_FH open = %q", r.Data)
	}
	if !e.eng.FS.IsOpen(e.srvIno(fh)) {
		t.Errorf("CLAIM_FH left the file closed")
	}
	c.do(putfh(fh), closeOp(0, openOK(t, out[1]).Stateid))
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(fh), claimFH(&nfsv4.Openflag4_OPEN4_CREATE{How: unchecked(0o644)}))
	c.expect(nfsv4.NFS4ERR_ISDIR, putroot(), claimFH(nocreate))
	c.expect(nfsv4.NFS4ERR_NOFILEHANDLE, claimFH(nocreate))
}

func TestVerifyAndNverifySeeASizeChange(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("verifier")
	fh, sid := openFile(t, c, "o", "growing")
	out := c.do(putfh(fh), writeOp(sid, 0, []byte("12345"), nfsv4.FILE_SYNC4), getattr(nfsv4.FATTR4_SIZE))
	five := out[2].(*nfsv4.NfsResop4_OP_GETATTR).Opgetattr.(*nfsv4.Getattr4res_NFS4_OK).Resok4.ObjAttributes
	verify := &nfsv4.NfsArgop4_OP_VERIFY{Opverify: nfsv4.Verify4args{ObjAttributes: five}}
	nverify := &nfsv4.NfsArgop4_OP_NVERIFY{Opnverify: nfsv4.Nverify4args{ObjAttributes: five}}
	c.do(putfh(fh), verify)
	c.expect(nfsv4.NFS4ERR_SAME, putfh(fh), nverify)

	c.do(putfh(fh), writeOp(sid, 5, []byte("67890"), nfsv4.UNSTABLE4))
	c.expect(nfsv4.NFS4ERR_NOT_SAME, putfh(fh), verify, getattr(nfsv4.FATTR4_SIZE))
	// NVERIFY passes, so the operations after it run.
	out = c.do(putfh(fh), nverify, getattr(nfsv4.FATTR4_SIZE))
	if a := attrsOf(t, out[2]); a.size != 10 {
		t.Errorf("size after the second write = %d", a.size)
	}
}

func TestLocksHeldKeepTheirLockStateidAndGoWithClose(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.dial(1, userCred), e.dial(1, authSys(1001, 1001))
	a.session("holder")
	b.session("waiter")
	fh, sa := openFile(t, a, "oa", "held")
	_, sb := openFile(t, b, "ob", "held")
	freeStateid := func(s nfsv4.Stateid4) nfsv4.NfsArgop4 {
		return &nfsv4.NfsArgop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4args{FsaStateid: s}}
	}
	testStateid := func(s nfsv4.Stateid4) nfsv4.Nfsstat4 {
		out := a.do(&nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: []nfsv4.Stateid4{s}}})
		return out[0].(*nfsv4.NfsResop4_OP_TEST_STATEID).OptestStateid.(*nfsv4.TestStateid4res_NFS4_OK).TsrResok4.TsrStatusCodes[0]
	}

	lsid := lockOK(t, a.do(putfh(fh), lockNew(a, sa, "la", nfsv4.WRITE_LT, 0, 100))[1])
	// FREE_STATEID refuses a lock stateid with locks, which stay.
	a.expect(nfsv4.NFS4ERR_LOCKS_HELD, freeStateid(lsid))
	b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 50, 1))
	// Once unlocked, it frees the stateid.
	out := a.do(putfh(fh), unlock(lsid, 0, 0, 100))
	lsid = out[1].(*nfsv4.NfsResop4_OP_LOCKU).Oplocku.(*nfsv4.Locku4res_NFS4_OK).LockStateid
	if st := testStateid(lsid); st != nfsv4.NFS4_OK {
		t.Errorf("a lock stateid with no locks left is %s before FREE_STATEID", nfsv4.Nfsstat4_name[st])
	}
	a.do(freeStateid(lsid))
	if st := testStateid(lsid); st != nfsv4.NFS4ERR_BAD_STATEID {
		t.Errorf("a freed lock stateid is %s", nfsv4.Nfsstat4_name[st])
	}

	// CLOSE with locks held may free them (RFC 8881 18.2.3): it does, and
	// answers with the invalid special stateid (18.2.4).
	lsid = lockOK(t, a.do(putfh(fh), lockNew(a, sa, "la2", nfsv4.WRITE_LT, 0, math.MaxUint64))[1])
	b.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 50, 1))
	out = a.do(putfh(fh), closeOp(0, sa))
	if got := out[1].(*nfsv4.NfsResop4_OP_CLOSE).Opclose.(*nfsv4.Close4res_NFS4_OK).OpenStateid; got != (nfsv4.Stateid4{Seqid: math.MaxUint32}) {
		t.Errorf("CLOSE returned stateid %+v", got)
	}
	if st := testStateid(lsid); st != nfsv4.NFS4ERR_BAD_STATEID {
		t.Errorf("the lock stateid of a closed open is %s", nfsv4.Nfsstat4_name[st])
	}
	b.do(putfh(fh), lockNew(b, sb, "lb", nfsv4.WRITE_LT, 50, 1))
}

// TestOpenCreateUncheckedOfAFileOnlyTheBucketKnowsOpensIt: OPEN with
// UNCHECKED4 creation of a name that exists only in the bucket, in a
// directory never listed, opens the bucket's file (RFC 8881 18.16.3:
// UNCHECKED4 opens an existing file); it never makes a new, empty file
// that hides it.
func TestOpenCreateUncheckedOfAFileOnlyTheBucketKnowsOpensIt(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("d/x", []byte("from the bucket"))
	c := e.dial(1, authSys(0, 0))
	c.session("creator")
	d := fhOf(t, c.do(putroot(), lookup("d"), getfh())[2])
	out := c.do(putfh(d), openArgs(c, 0, "o", "x", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)),
		readOp(currentSid, 0, 100))
	if r := readOK(t, out[2]); string(r.Data) != "from the bucket" {
		t.Fatalf("READ after OPEN(UNCHECKED4) of d/x = %q, want the bucket's bytes", r.Data)
	}
	c.do(putfh(d), lookup("x"), closeOp(0, openOK(t, out[1]).Stateid))
}

// OPEN_DOWNGRADE goes only to share modes an OPEN of the state asked for
// (issue 11; RFC 7530 16.19.4): after OPENs for READ and then WRITE, back
// to READ is fine; a state opened for BOTH alone cannot go to READ, and no
// state can go to modes it does not hold.
func TestOpenDowngradeOnlyToModesOpenedBefore(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("downgrade")
	downgrade := func(sid nfsv4.Stateid4, access, deny uint32) nfsv4.NfsArgop4 {
		return &nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: nfsv4.OpenDowngrade4args{
			OpenStateid: sid, ShareAccess: access, ShareDeny: deny}}
	}
	// READ, then WRITE: the state holds BOTH, opened as READ and WRITE.
	out := c.do(putroot(), openArgs(c, 0, "o1", "f", nfsv4.OPEN4_SHARE_ACCESS_READ, unchecked(0o644)), getfh())
	f := fhOf(t, out[2])
	out = c.do(putroot(), openArgs(c, 0, "o1", "f", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nil))
	sid := openOK(t, out[1]).Stateid
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), downgrade(sid, nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_WRITE))
	out = c.do(putfh(f), downgrade(sid, nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE))
	sid = out[1].(*nfsv4.NfsResop4_OP_OPEN_DOWNGRADE).OpopenDowngrade.(*nfsv4.OpenDowngrade4res_NFS4_OK).Resok4.OpenStateid
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), downgrade(sid, nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE))
	c.do(putfh(f), closeOp(0, sid))

	// BOTH alone: READ was never asked for.
	out = c.do(putroot(), openArgs(c, 0, "o2", "f", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	sid = openOK(t, out[1]).Stateid
	c.expect(nfsv4.NFS4ERR_INVAL, putfh(f), downgrade(sid, nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE))
	c.do(putfh(f), closeOp(0, sid))
}
