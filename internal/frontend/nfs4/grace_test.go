package nfs4

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Restart recovery (issue 11; RFC 8881 8.4): a lock held before a restart
// of the whole process is the holder's to take back, and nobody else gets
// it (or any new lock or open) until the holder has, or the grace period
// is over.

func lockReclaim(c *tclient, openSid nfsv4.Stateid4, owner string, typ nfsv4.NfsLockType4, off, n uint64) nfsv4.NfsArgop4 {
	op := lockNew(c, openSid, owner, typ, off, n).(*nfsv4.NfsArgop4_OP_LOCK)
	op.Oplock.Reclaim = true
	return op
}

// openPrevious reclaims the open of the current file by owner.
func openPrevious(c *tclient, seqid uint32, owner string, access uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: seqid, ShareAccess: access,
		ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE, Owner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)},
		Openhow: &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
		Claim:   &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OPEN_DELEGATE_NONE}}}
}

func lockt(c *tclient, owner string, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT,
		Offset: off, Length: n, Owner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)}}}
}

func lockSid(t *testing.T, r nfsv4.NfsResop4) nfsv4.Stateid4 {
	t.Helper()
	return r.(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
}

func TestALockHeldBeforeARestartIsReclaimedBeforeAnyoneElseGetsIt(t *testing.T) {
	// A lease longer than the test: the grace period may only end by
	// the holder's RECLAIM_COMPLETE.
	e := newEnv(t, Options{LeaseTime: time.Minute})
	holder := e.dial(1, userCred)
	holder.session("holder")
	fh, sid := openFile(t, holder, "o", "ledger")
	holder.do(putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))

	e.restart()

	// Another client, new to the server, waits: no open, no lock test.
	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	other.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	other.expect(nfsv4.NFS4ERR_GRACE, putfh(fh), lockt(other, "l", 0, 1))
	// Nor may it reclaim what it never held.
	other.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), openPrevious(other, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	// Anonymous I/O waits too; reading through the bypass stateid does not.
	other.expect(nfsv4.NFS4ERR_GRACE, putfh(fh), writeOp(nfsv4.Stateid4{}, 0, []byte("x"), nfsv4.FILE_SYNC4))
	other.do(putfh(fh), readOp(nfsv4.Stateid4{Seqid: math.MaxUint32, Other: bypassOther}, 0, 1))

	// The holder comes back and takes its open and its lock back.
	if holder = e.dial(1, userCred); holder.sessionOnly("holder") {
		t.Fatal("the restarted server knew the client's id")
	}
	out := holder.do(putfh(fh), openPrevious(holder, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid = openOK(t, out[1]).Stateid
	holder.do(putfh(fh), lockReclaim(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))
	holder.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	holder.expect(nfsv4.NFS4ERR_COMPLETE_ALREADY, &nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	// After RECLAIM_COMPLETE the holder may reclaim nothing more.
	holder.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), lockReclaim(holder, sid, "l2", nfsv4.WRITE_LT, 200, 1))

	// Its RECLAIM_COMPLETE was the last one outstanding: the grace
	// period is over, and the other client finds the lock held.
	out = other.do(putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	osid := openOK(t, out[1]).Stateid
	other.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(other, osid, "l", nfsv4.WRITE_LT, 50, 1))
	other.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), lockReclaim(other, osid, "l", nfsv4.WRITE_LT, 500, 1))
}

// A client recorded before the restart that does not come back holds the
// others up for one lease at most; then its record is gone, and with it
// any claim to reclaim after a later restart.
func TestAClientThatDoesNotComeBackHoldsUpOthersForOneLeaseAndThenLosesItsClaim(t *testing.T) {
	lease := time.Second
	e := newEnv(t, Options{LeaseTime: lease})
	gone := e.dial(1, userCred)
	gone.session("gone")
	fh, sid := openFile(t, gone, "o", "abandoned")
	gone.do(putfh(fh), lockNew(gone, sid, "l", nfsv4.WRITE_LT, 0, 100))

	e.restart()
	start := time.Now()
	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	deadline := time.Now().Add(10 * lease)
	var osid nfsv4.Stateid4
	for {
		out, st := other.call(putroot(), openArgs(other, 0, "o", "abandoned", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
		if st == nfsv4.NFS4_OK {
			osid = openOK(t, out[1]).Stateid
			break
		}
		if st != nfsv4.NFS4ERR_GRACE {
			t.Fatalf("OPEN during the grace period: %s", nfsv4.Nfsstat4_name[st])
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grace period did not end within %v", 10*lease)
		}
		time.Sleep(lease / 20) // polling interval, not synchronisation
	}
	if waited := time.Since(start); waited < lease/2 {
		t.Errorf("the grace period ended after %v, before the missing client's lease (%v) could run out", waited, lease)
	}
	other.do(putfh(fh), lockNew(other, osid, "l", nfsv4.WRITE_LT, 0, 100))

	// Too late for the missing client.
	gone = e.dial(1, userCred)
	gone.sessionOnly("gone")
	gone.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), openPrevious(gone, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))

	// Its record is gone: after another restart only the other client
	// may reclaim (its lock), the late one may not.
	waitFor(t, func() bool {
		recs, err := e.eng.Meta.ClientRecords(context.Background(), e.srv.identity)
		return err == nil && len(recs) == 1 && recs["4.1:other"] != nil
	}, "the records to be pruned to the other client's")
	e.restart()
	gone = e.dial(1, userCred)
	gone.sessionOnly("gone")
	gone.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), openPrevious(gone, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	other = e.dial(1, authSys(1001, 1001))
	other.sessionOnly("other")
	out := other.do(putfh(fh), openPrevious(other, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	other.do(putfh(fh), lockReclaim(other, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A 4.0 client, which has no RECLAIM_COMPLETE, reclaims with a new client
// id after the restart; its old stateids are stale and its old client id
// too.
func TestANFSv40ClientReclaimsItsLockAfterARestart(t *testing.T) {
	e := newEnv(t, Options{LeaseTime: 2 * time.Second})
	c := e.dial(0, userCred)
	fh, sid := confirmedOpen40(t, c, "holder40", "ledger40")
	out := c.do(putfh(fh), &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 10,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: 3, OpenStateid: sid, LockSeqid: 0,
			LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte("l")}}}}})
	lsid := lockSid(t, out[1])
	oldID := c.clientID

	e.restart()
	c = e.dial(0, userCred)
	c.clientID = oldID
	c.expect(nfsv4.NFS4ERR_STALE_CLIENTID, &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: oldID}})
	c.expect(nfsv4.NFS4ERR_STALE_STATEID, putfh(fh), readOp(sid, 0, 1))
	c.expect(nfsv4.NFS4ERR_STALE_STATEID, putfh(fh), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{
		Locktype: nfsv4.WRITE_LT, Seqid: 1, LockStateid: lsid, Offset: 0, Length: 10}})

	other := e.dial(0, authSys(1001, 1001))
	other.setclientid40("other40")
	other.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(other, 1, "o", "ledger40", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))

	c.setclientid40("holder40")
	out = c.do(putfh(fh), openPrevious(c, 1, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	ok := openOK(t, out[1])
	if ok.Rflags&nfsv4.OPEN4_RESULT_CONFIRM != 0 {
		t.Errorf("a reclaimed open asked for OPEN_CONFIRM")
	}
	c.do(putfh(fh), &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 10,
		Reclaim: true, Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: 2, OpenStateid: ok.Stateid,
			LockSeqid: 0, LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte("l")}}}}})

	// Without RECLAIM_COMPLETE from a 4.0 client, the grace period runs
	// out its lease; then the other client finds the lock held.
	seq := uint32(2)
	waitFor(t, func() bool {
		// The holder renews its lease meanwhile, as a live client does.
		c.do(&nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: c.clientID}})
		_, st := other.call(putroot(), openArgs(other, seq, "o", "ledger40", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
		seq++
		if st != nfsv4.NFS4_OK && st != nfsv4.NFS4ERR_GRACE {
			t.Fatalf("OPEN during the grace period: %s", nfsv4.Nfsstat4_name[st])
		}
		return st == nfsv4.NFS4_OK
	}, "the grace period to end")
	other.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockt(other, "l", 0, 1))
}

// The three kinds of unusable stateid are told apart (issue 11; RFC 7530
// 9.1.4): one the server never issued is NFS4ERR_BAD_STATEID, one of an
// earlier server instance NFS4ERR_STALE_STATEID (above), one of a client
// whose lease expired NFS4ERR_EXPIRED.
func TestNFSv40StateidsOfAnExpiredClientAreExpiredAndMadeUpOnesBad(t *testing.T) {
	lease := 300 * time.Millisecond
	e := newEnv(t, Options{LeaseTime: lease})
	c := e.dial(0, userCred)
	fh, sid := confirmedOpen40(t, c, "expiring", "short-lived")
	made := sid
	made.Other[11] ^= 0x80 // this instance's prefix, never issued
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), readOp(made, 0, 1))

	// Wait without a word to the server (any use of the stateid would
	// renew the lease).
	waitFor(t, func() bool {
		e.srv.state.mu.Lock()
		defer e.srv.state.mu.Unlock()
		return len(e.srv.state.clients) == 0
	}, "the client's lease to expire")
	c.expect(nfsv4.NFS4ERR_EXPIRED, putfh(fh), readOp(sid, 0, 1))
	made.Other[4] ^= 0x80 // a client this instance never had
	c.expect(nfsv4.NFS4ERR_BAD_STATEID, putfh(fh), readOp(made, 0, 1))
}

// Share reservations (issue 11; RFC 7530 9.9): a deny binds the owner
// that holds it too, and I/O under the anonymous stateid on a file opened
// with a deny of its kind is NFS4ERR_LOCKED.
func TestShareReservationsBindTheSameOwnerAndAnonymousIO(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("sharer")
	open := func(owner string, access, deny uint32) nfsv4.NfsArgop4 {
		op := openArgs(c, 0, owner, "reserved", access, unchecked(0o644)).(*nfsv4.NfsArgop4_OP_OPEN)
		op.Opopen.ShareDeny = deny
		return op
	}
	out := c.do(putroot(), open("o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE), getfh())
	fh := fhOf(t, out[2])
	c.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open("o", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE))
	c.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open("o2", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE))
	c.do(putroot(), open("o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE))

	c.expect(nfsv4.NFS4ERR_LOCKED, putfh(fh), writeOp(nfsv4.Stateid4{}, 0, []byte("x"), nfsv4.FILE_SYNC4))
	var size xdrBuf
	size.u64(0)
	c.expect(nfsv4.NFS4ERR_LOCKED, putfh(fh), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
		ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_SIZE).words(), AttrVals: size}}})
	c.do(putfh(fh), readOp(nfsv4.Stateid4{}, 0, 1)) // reads are not denied

	// Another owner's deny of reads makes anonymous reads NFS4ERR_LOCKED
	// (a file nobody else has open: the deny would conflict with them).
	other := e.dial(1, userCred)
	other.session("reader-denier")
	op := openArgs(other, 0, "d", "read-denied", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644)).(*nfsv4.NfsArgop4_OP_OPEN)
	op.Opopen.ShareDeny = nfsv4.OPEN4_SHARE_DENY_READ
	out = other.do(putroot(), op, getfh())
	denied := fhOf(t, out[2])
	c.expect(nfsv4.NFS4ERR_LOCKED, putfh(denied), readOp(nfsv4.Stateid4{}, 0, 1))
	c.do(putfh(denied), readOp(nfsv4.Stateid4{Seqid: math.MaxUint32, Other: bypassOther}, 0, 1))
}

// A 4.1 client may not take new state before its RECLAIM_COMPLETE, grace
// period or not (issue 21; RFC 8881 18.51.3): a non-reclaim OPEN is
// NFS4ERR_GRACE until then. The rule is per client id: a second session
// of a client that has sent it needs none, a rebooted client (a new
// verifier, so a new client id) sends its own. 4.0 has no
// RECLAIM_COMPLETE and is not held up.
func TestANFSv41ClientGetsGraceForNewOpensUntilItsReclaimComplete(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.sessionOnly("eager")
	c.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(c, 0, "o", "eager", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
	c.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	fh, sid := openFile(t, c, "o", "eager")
	c.do(putfh(fh), closeOp(0, sid))

	// The same client on a new connection and session.
	d := e.dial(1, userCred)
	if !d.sessionOnly("eager") {
		t.Fatal("the client's second EXCHANGE_ID did not find its confirmed record")
	}
	fh, sid = openFile(t, d, "o", "eager")
	d.do(putfh(fh), closeOp(0, sid))

	// The client reboots: a new client id, a new RECLAIM_COMPLETE.
	r := e.dial(1, userCred)
	st, eid := exchangeID(r, "eager", 2)
	if st != nfsv4.NFS4_OK {
		t.Fatalf("EXCHANGE_ID of the rebooted client: %s", nfsv4.Nfsstat4_name[st])
	}
	if st := createSession(r, eid.EirClientid, eid.EirSequenceid); st != nfsv4.NFS4_OK {
		t.Fatalf("CREATE_SESSION of the rebooted client: %s", nfsv4.Nfsstat4_name[st])
	}
	r.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(r, 0, "o", "eager", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	r.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	fh, sid = openFile(t, r, "o", "eager")
	r.do(putfh(fh), closeOp(0, sid))

	// A 4.0 client opens at once.
	c40 := e.dial(0, userCred)
	fh, sid = confirmedOpen40(t, c40, "eager40", "eager40")
	c40.do(putfh(fh), closeOp(3, sid))
}

// A client that reclaimed its open after a restart but has not sent
// RECLAIM_COMPLETE gets NFS4ERR_GRACE for a new lock and a new open even
// once the server's grace period is over (issue 21; RFC 8881 18.51.3);
// after its RECLAIM_COMPLETE it gets them.
func TestAReclaimingClientGetsGraceForNewLocksAfterTheGracePeriodUntilItsReclaimComplete(t *testing.T) {
	lease := time.Second
	e := newEnv(t, Options{LeaseTime: lease})
	holder := e.dial(1, userCred)
	holder.session("slow-reclaimer")
	fh, _ := openFile(t, holder, "o", "slow")

	e.restart()
	holder = e.dial(1, userCred)
	holder.sessionOnly("slow-reclaimer")
	out := holder.do(putfh(fh), openPrevious(holder, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid := openOK(t, out[1]).Stateid

	// The grace period ends with its lease: the holder never says it is
	// done, though it keeps its own lease alive.
	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	waitFor(t, func() bool {
		holder.do(putroot())
		_, st := other.call(putroot(), openArgs(other, 0, "o", "unrelated", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
		if st != nfsv4.NFS4_OK && st != nfsv4.NFS4ERR_GRACE {
			t.Fatalf("OPEN during the grace period: %s", nfsv4.Nfsstat4_name[st])
		}
		return st == nfsv4.NFS4_OK
	}, "the grace period to end")

	holder.expect(nfsv4.NFS4ERR_GRACE, putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 10))
	holder.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(holder, 0, "o2", "slow", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
	holder.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	holder.do(putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 10))
	holder.do(putroot(), openArgs(holder, 0, "o2", "slow", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
}

// Found by the Linux client (kernelnfs, two servers of one file system):
// Linux waits at least 5 s between renewals whatever the lease, and the
// lease of a shared file system is 5 s, so an idle client renewed at the
// end of its lease or just after, and lost its locks. The rule: a client
// that renews a little late (here at 1.3 times the lease, twice: past the
// lease and the reaper's tick, within half the lease more, at most 5 s
// more, which it is kept for) keeps its state; one that stops renewing is
// expired all the same.
func TestAClientThatRenewsALittleLateKeepsItsLocks(t *testing.T) {
	lease := 2 * time.Second
	e := newEnv(t, Options{LeaseTime: lease})
	holder, other := e.dial(0, userCred), e.dial(0, userCred)
	fh, sid := confirmedOpen40(t, holder, "late-renewer", "held-late")
	holder.do(putfh(fh), lockFirst(holder, sid, 3, "h", 0, 0, 10))
	other.setclientid40("other")
	lockt := &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 1,
		Owner: nfsv4.StateOwner4{Clientid: other.clientID, Owner: []byte("x")}}}
	renew := &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: holder.clientID}}
	for range 2 {
		time.Sleep(lease * 13 / 10) // the client's own renewal period, not a wait for the server
		holder.do(renew)
		other.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockt)
	}
	// Silent from now on: expired, and its lock released (the reaper
	// releases it after dropping the client).
	third := e.dial(0, userCred)
	third.setclientid40("third")
	lockt.Oplockt.Owner.Clientid = third.clientID
	waitFor(t, func() bool {
		_, st := third.call(putfh(fh), lockt)
		return st == nfsv4.NFS4_OK
	}, "the silent client's lock to be released")
	e.srv.state.mu.Lock()
	_, kept := e.srv.state.clients[holder.clientID]
	e.srv.state.mu.Unlock()
	if kept {
		t.Error("the silent client's lock is released, yet the client is kept")
	}
}
