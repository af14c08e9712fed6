package nfs4

import (
	"bytes"
	"math"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// setclientid40 registers and confirms a 4.0 client.
func (c *tclient) setclientid40(id string) {
	c.t.Helper()
	out := c.do(&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
		Client:   nfsv4.NfsClientId4{Verifier: [8]byte{4}, Id: []byte(id)},
		Callback: nfsv4.CbClient4{CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "127.0.0.1.0.0"}}}})
	ok := out[0].(*nfsv4.NfsResop4_OP_SETCLIENTID).Opsetclientid.(*nfsv4.Setclientid4res_NFS4_OK).Resok4
	c.clientID = ok.Clientid
	c.do(&nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4args{
		Clientid: ok.Clientid, SetclientidConfirm: ok.SetclientidConfirm}})
}

// twice sends the same COMPOUND twice, as a client retransmits it, and
// fails the test unless both replies are the same bytes. It returns the
// decoded reply.
func (c *tclient) twice(ops ...nfsv4.NfsArgop4) *nfsv4.Compound4res {
	c.t.Helper()
	args := encodeArgs("again", c.minor, ops)
	_, first := c.rpc(nfsProgram, 4, 1, args)
	_, second := c.rpc(nfsProgram, 4, 1, args)
	if !bytes.Equal(first, second) {
		c.t.Fatalf("the retransmission was answered differently:\nfirst  %s\nsecond %s",
			statuses(decodeRes(c.t, first)), statuses(decodeRes(c.t, second)))
	}
	return decodeRes(c.t, second)
}

func statuses(res *nfsv4.Compound4res) string {
	s := nfsv4.Nfsstat4_name[res.Status]
	for _, r := range res.Resarray {
		s += " " + nfsv4.NfsOpnum4_name[r.GetResop()]
	}
	return s
}

func guarded(mode uint32) nfsv4.Createhow4 {
	return &nfsv4.Createhow4_GUARDED4{Createattrs: unchecked(mode).(*nfsv4.Createhow4_UNCHECKED4).Createattrs}
}

func openConfirm(sid nfsv4.Stateid4, seqid uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_OPEN_CONFIRM{OpopenConfirm: nfsv4.OpenConfirm4args{OpenStateid: sid, Seqid: seqid}}
}

func openConfirmed(t *testing.T, r nfsv4.NfsResop4) nfsv4.Stateid4 {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_OPEN_CONFIRM).OpopenConfirm.(*nfsv4.OpenConfirm4res_NFS4_OK).Resok4.OpenStateid
}

// lockFirst is a 4.0 LOCK that makes a lock-owner's lock state from an
// open: sequenced by the open-owner's seqid, with the lock-owner's first.
func lockFirst(c *tclient, open nfsv4.Stateid4, openSeqid uint32, owner string, lockSeqid uint32, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Offset: off, Length: n,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: openSeqid, OpenStateid: open,
			LockSeqid: lockSeqid, LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)}}}}}
}

// lockMore is a LOCK under an existing lock stateid.
func lockMore(lsid nfsv4.Stateid4, seqid uint32, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Offset: off, Length: n,
		Locker: &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{LockStateid: lsid, LockSeqid: seqid}}}}
}

func unlock(lsid nfsv4.Stateid4, seqid uint32, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT, Seqid: seqid,
		LockStateid: lsid, Offset: off, Length: n}}
}

func lockOK(t *testing.T, r nfsv4.NfsResop4) nfsv4.Stateid4 {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
}

func TestNFSv40RetransmittedSeqidGetsTheOpenOwnersLastReply(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	c.setclientid40("replay40")

	// A GUARDED create run a second time would answer EXIST; the
	// retransmission must get the first reply, same stateid included.
	res := c.twice(putroot(), openArgs(c, 1, "o", "once", nfsv4.OPEN4_SHARE_ACCESS_BOTH, guarded(0o644)), getfh())
	if res.Status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted OPEN-create: %s", statuses(res))
	}
	op, fh := openOK(t, res.Resarray[1]), fhOf(t, res.Resarray[2])

	// The next seqid runs (and uses up the seqid although it fails); one
	// that is neither the last nor the next is refused.
	c.expect(nfsv4.NFS4ERR_EXIST, putroot(), openArgs(c, 2, "o", "once", nfsv4.OPEN4_SHARE_ACCESS_BOTH, guarded(0o644)))
	c.expect(nfsv4.NFS4ERR_BAD_SEQID, putroot(), openArgs(c, 5, "o", "once", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))

	// OPEN_CONFIRM again: run twice, the old stateid would be
	// OLD_STATEID the second time.
	res = c.twice(putfh(fh), openConfirm(op.Stateid, 3))
	if res.Status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted OPEN_CONFIRM: %s", statuses(res))
	}
	sid := openConfirmed(t, res.Resarray[1])

	// CLOSE again: the open state is gone after the first, yet the
	// retransmission is answered OK from the owner's cache.
	res = c.twice(putfh(fh), closeOp(4, sid))
	if res.Status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted CLOSE: %s", statuses(res))
	}
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), readOp(sid, 0, 1))
	c.do(putroot(), openArgs(c, 5, "o", "once", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
}

func TestNFSv40LockOwnerSeqidsAreEnforcedAndReplayed(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	fh, osid := confirmedOpen40(t, c, "locker40", "locked40")

	// The first lock: the open-owner's seqid 3 and the new lock-owner's
	// first seqid, 0. The lock-owner's next seqid is 1.
	lsid := lockOK(t, c.do(putfh(fh), lockFirst(c, osid, 3, "l", 0, 0, 10))[1])
	for _, seqid := range []uint32{0, 2, 7} {
		c.expect(nfsv4.NFS4ERR_BAD_SEQID, putfh(fh), lockMore(lsid, seqid, 20, 10))
		c.expect(nfsv4.NFS4ERR_BAD_SEQID, putfh(fh), unlock(lsid, seqid, 0, 10))
	}
	// A LOCK run twice would find its stateid old the second time.
	res := c.twice(putfh(fh), lockMore(lsid, 1, 20, 10))
	if res.Status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted LOCK: %s", statuses(res))
	}
	lsid = lockOK(t, res.Resarray[1])

	// A lock-owner holding locks is not released, and keeps its locks.
	release := &nfsv4.NfsArgop4_OP_RELEASE_LOCKOWNER{OpreleaseLockowner: nfsv4.ReleaseLockowner4args{
		LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte("l")}}}
	c.expect(nfsv4.NFS4ERR_LOCKS_HELD, release)
	c.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.READ_LT,
		Offset: 25, Length: 1, Owner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte("someone else")}}})

	out := c.do(putfh(fh), unlock(lsid, 2, 0, math.MaxUint64))
	lsid = out[1].(*nfsv4.NfsResop4_OP_LOCKU).Oplocku.(*nfsv4.Locku4res_NFS4_OK).LockStateid
	c.do(release)
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), lockMore(lsid, 3, 0, 1))
}

func TestNFSv40ExclusiveCreateRetriedOnANewSeqidFindsItsOwnFile(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	c.setclientid40("excl40")
	excl := func(v byte) nfsv4.Createhow4 {
		return &nfsv4.Createhow4_EXCLUSIVE4{Createverf: [8]byte{v, 2, 3, 4, 5, 6, 7, 8}}
	}
	out := c.do(putroot(), openArgs(c, 1, "o", "excl", nfsv4.OPEN4_SHARE_ACCESS_BOTH, excl(1)), getfh())
	op, fh := openOK(t, out[1]), fhOf(t, out[2])
	openConfirmed(t, c.do(putfh(fh), openConfirm(op.Stateid, 2))[1])

	// The client lost the reply and tries again: the verifier matches,
	// so it gets the file it made.
	out = c.do(putroot(), openArgs(c, 3, "o", "excl", nfsv4.OPEN4_SHARE_ACCESS_BOTH, excl(1)), getfh())
	if !bytes.Equal(fhOf(t, out[2]), fh) {
		t.Errorf("the retried exclusive create opened another file")
	}
	sid := openOK(t, out[1]).Stateid
	c.do(putfh(fh), writeOp(sid, 0, []byte("made once"), nfsv4.FILE_SYNC4))
	if r := readOK(t, c.do(putfh(fh), readOp(sid, 0, 100))[1]); string(r.Data) != "made once" {
		t.Errorf("the file holds %q", r.Data)
	}
	// Another client's verifier finds the name taken.
	c.expect(nfsv4.NFS4ERR_EXIST, putroot(), openArgs(c, 4, "o", "excl", nfsv4.OPEN4_SHARE_ACCESS_BOTH, excl(9)))
}

// confirmedOpen40 sets c up as the 4.0 client id and creates name with
// open-owner "o" (seqid 1), confirmed (seqid 2).
func confirmedOpen40(t *testing.T, c *tclient, id, name string) ([]byte, nfsv4.Stateid4) {
	t.Helper()
	c.setclientid40(id)
	out := c.do(putroot(), openArgs(c, 1, "o", name, nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	op, fh := openOK(t, out[1]), fhOf(t, out[2])
	return fh, openConfirmed(t, c.do(putfh(fh), openConfirm(op.Stateid, 2))[1])
}

// OPEN_CONFIRM of an open-owner confirmed already is NFS4ERR_BAD_STATEID
// (issue 11; RFC 7530 16.18.5: only the first OPEN of an owner needs it),
// and the refusal uses up no seqid.
func TestNFSv40OpenConfirmOfAConfirmedOwnerIsBadStateid(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	fh, sid := confirmedOpen40(t, c, "confirm40", "confirmed")
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), openConfirm(sid, 3))
	c.do(putfh(fh), closeOp(3, sid))
}

// SETCLIENTID with the id of a confirmed client that holds state, from
// another principal (another AUTH_SYS uid), is NFS4ERR_CLID_INUSE (issue
// 11; RFC 7530 16.33.5): one user cannot take over another's client
// record and its state. The same principal may (a client reboot, with a
// new verifier). A record without state is another matter
// (clients_test.go).
func TestNFSv40SetclientidFromAnotherPrincipalIsClidInuse(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	confirmedOpen40(t, c, "shared-id", "held-by-shared-id")
	// Another uid, and the same uid on another machine, are other
	// principals.
	for _, cred := range []rpcv2.OpaqueAuth{authSys(1001, 1001), authSysOn("elsewhere", 1000, 1000, 1000, 2000)} {
		other := e.dial(0, cred)
		res := other.raw(&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
			Client:   nfsv4.NfsClientId4{Verifier: [8]byte{9}, Id: []byte("shared-id")},
			Callback: nfsv4.CbClient4{CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "127.0.0.1.0.0"}}}})
		if res.Status != nfsv4.NFS4ERR_CLID_INUSE {
			t.Fatalf("SETCLIENTID of another principal's id: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[res.Status])
		}
	}
	again := e.dial(0, userCred)
	again.setclientid40("shared-id") // the same principal, a new connection
}

// Found by the Linux 4.0 client (kernelnfs, two servers of one file
// system): a lock-owner whose first LOCK was denied got NFS4ERR_BAD_SEQID,
// an EIO to the application, on its next try. Linux drops the lock state
// of a LOCK that failed and starts the next one afresh, with the lock-owner
// it had (its id is reused) and lock_seqid 0 again. The rule (RFC 7530
// 16.10.4): only a lock-owner with an established lock_seqid, one that
// holds lock state, sequences an open_to_lock_owner; one that holds none
// starts its sequence with this request, whatever its seqid.
func TestNFSv40ALockOwnerWhoseFirstLockWasDeniedStartsAgain(t *testing.T) {
	e := newEnv(t, Options{})
	holder, waiter := e.dial(0, userCred), e.dial(0, userCred)
	fh, hsid := confirmedOpen40(t, holder, "holder40", "contended40")
	hlock := lockOK(t, holder.do(putfh(fh), lockFirst(holder, hsid, 3, "h", 0, 0, 100))[1])
	_, wsid := confirmedOpen40(t, waiter, "waiter40", "contended40")

	// Denied three times over, as a polling client tries: Linux's
	// lock_seqid 0 each time, or one that counted on (1).
	for i, lockSeqid := range []uint32{0, 0, 1} {
		c := waiter
		c.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockFirst(c, wsid, 3+uint32(i), "w", lockSeqid, 50, 10))
	}
	holder.do(putfh(fh), unlock(hlock, 1, 0, 100))
	wlock := lockOK(t, waiter.do(putfh(fh), lockFirst(waiter, wsid, 6, "w", 0, 50, 10))[1])
	// Its sequence runs on from the grant.
	waiter.do(putfh(fh), lockMore(wlock, 1, 70, 10))
	waiter.expect(nfsv4.NFS4ERR_BAD_SEQID, putfh(fh), lockMore(wlock, 0, 90, 10))
}
