package nfs4

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/meta"
)

// The errors of a reclaim (RFC 8881 15.1.9 and the error lists of OPEN
// and LOCK; RFC 7530's lists for them hold the same errors): a reclaim
// that runs into state granted since the restart is
// NFS4ERR_RECLAIM_CONFLICT, not the NFS4ERR_DENIED or
// NFS4ERR_SHARE_DENIED of an ordinary request, which tell a client that
// the same request may succeed later.

// openPreviousDeny is openPrevious with a deny mode.
func openPreviousDeny(c *tclient, seqid uint32, owner string, access, deny uint32) nfsv4.NfsArgop4 {
	op := openPrevious(c, seqid, owner, access).(*nfsv4.NfsArgop4_OP_OPEN)
	op.Opopen.ShareDeny = deny
	return op
}

// Two clients hold locks on one file before a restart; after it, the
// first one reclaims more than it held (a lock over the second one's
// range, and its open with a deny mode it never had). The second one's
// reclaims of its open and its lock then conflict with what the first was
// granted since the restart.
func TestAReclaimThatConflictsWithStateGrantedSinceTheRestartIsReclaimConflict(t *testing.T) {
	// A lease longer than the test: the grace period lasts.
	e := newEnv(t, Options{LeaseTime: time.Minute})
	x1 := e.dial(1, userCred)
	x1.session("x1")
	fh, sid1 := openFile(t, x1, "o", "ledger")
	x1.do(putfh(fh), lockNew(x1, sid1, "l", nfsv4.WRITE_LT, 0, 100))
	x2 := e.dial(1, userCred)
	x2.session("x2")
	_, sid2 := openFile(t, x2, "o", "ledger")
	x2.do(putfh(fh), lockNew(x2, sid2, "l", nfsv4.WRITE_LT, 200, 100))

	e.restart()
	x1 = e.dial(1, userCred)
	x1.sessionOnly("x1")
	out := x1.do(putfh(fh), openPreviousDeny(x1, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_WRITE))
	x1.do(putfh(fh), lockReclaim(x1, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 300))

	x2 = e.dial(1, userCred)
	x2.sessionOnly("x2")
	x2.expect(nfsv4.NFS4ERR_RECLAIM_CONFLICT, putfh(fh), openPrevious(x2, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	out = x2.do(putfh(fh), openPrevious(x2, 0, "o2", nfsv4.OPEN4_SHARE_ACCESS_READ))
	x2.expect(nfsv4.NFS4ERR_RECLAIM_CONFLICT, putfh(fh), lockReclaim(x2, openOK(t, out[1]).Stateid, "l", nfsv4.READ_LT, 200, 100))
	// What does not conflict is reclaimed.
	x2.do(putfh(fh), lockReclaim(x2, openOK(t, out[1]).Stateid, "l", nfsv4.READ_LT, 400, 100))
}

// lock40 is a 4.0 LOCK by a new lock-owner of an open-owner.
func lock40(c *tclient, reclaim bool, openSid nfsv4.Stateid4, openSeqid uint32, owner string, typ nfsv4.NfsLockType4, off, n uint64) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: typ, Offset: off, Length: n, Reclaim: reclaim,
		Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: openSeqid, OpenStateid: openSid,
			LockSeqid: 0, LockOwner: nfsv4.StateOwner4{Clientid: c.clientID, Owner: []byte(owner)}}}}}
}

// The same in NFSv4.0, whose reclaims come with a new client id.
func TestANFSv40ReclaimThatConflictsWithStateGrantedSinceTheRestartIsReclaimConflict(t *testing.T) {
	e := newEnv(t, Options{LeaseTime: time.Minute})
	x1 := e.dial(0, userCred)
	fh, sid1 := confirmedOpen40(t, x1, "x1", "ledger40")
	x1.do(putfh(fh), lock40(x1, false, sid1, 3, "l", nfsv4.WRITE_LT, 0, 100))
	x2 := e.dial(0, userCred)
	_, sid2 := confirmedOpen40(t, x2, "x2", "ledger40")
	x2.do(putfh(fh), lock40(x2, false, sid2, 3, "l", nfsv4.WRITE_LT, 200, 100))

	e.restart()
	x1 = e.dial(0, userCred)
	x1.setclientid40("x1")
	out := x1.do(putfh(fh), openPreviousDeny(x1, 1, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_WRITE))
	x1.do(putfh(fh), lock40(x1, true, openOK(t, out[1]).Stateid, 2, "l", nfsv4.WRITE_LT, 0, 300))

	x2 = e.dial(0, userCred)
	x2.setclientid40("x2")
	x2.expect(nfsv4.NFS4ERR_RECLAIM_CONFLICT, putfh(fh), openPrevious(x2, 1, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	out = x2.do(putfh(fh), openPrevious(x2, 1, "o2", nfsv4.OPEN4_SHARE_ACCESS_READ))
	x2.expect(nfsv4.NFS4ERR_RECLAIM_CONFLICT, putfh(fh), lock40(x2, true, openOK(t, out[1]).Stateid, 2, "l", nfsv4.READ_LT, 200, 100))
}

// waitLock polls LOCK of [off, off+n) by c's lock-owner owner on the file
// of open stateid sid until it is granted, and returns the lock stateid.
func waitLock(t *testing.T, c *tclient, fh []byte, sid nfsv4.Stateid4, owner string, off, n uint64) nfsv4.Stateid4 {
	t.Helper()
	deadline := time.Now().Add(3*registryLease + 10*time.Second)
	for {
		out, st := c.call(putfh(fh), lockNew(c, sid, owner, nfsv4.WRITE_LT, off, n))
		if st == nfsv4.NFS4_OK {
			return lockSid(t, out[1])
		}
		if st != nfsv4.NFS4ERR_DENIED {
			t.Fatalf("LOCK: %s", nfsv4.Nfsstat4_name[st])
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock was never granted")
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// A lock another server's client took while its holder's server was dead
// (after the registry took it for dead) makes the holder's reclaim after
// the restart NFS4ERR_RECLAIM_CONFLICT: the holder lost the lock, as to a
// lease that ran out, and a retry cannot give it back. Another reclaim on
// that file is NFS4ERR_NO_GRACE: the server cannot vouch for any range of
// a file where a lock was granted meanwhile. A reclaim on a file nobody
// touched meanwhile is granted.
func TestAReclaimThatConflictsWithALockGrantedThroughAnotherServerIsReclaimConflict(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	x, fh, sid := lockLedger(t, a)
	fh2, sid2 := openFile(t, x, "o", "journal")
	x.do(putfh(fh2), lockNew(x, sid2, "l", nfsv4.WRITE_LT, 0, 100))
	w, wsid := openLedger(t, b)

	a.crash()
	waitLock(t, w, fh, wsid, "wl", 50, 1)

	// w's lock must outlive the restart, or nothing conflicts with the
	// reclaim.
	defer renewing(w)()
	a = f.start(dirA, Options{})
	x = a.env().dial(1, userCred)
	x.sessionOnly("x")
	out := x.do(putfh(fh), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid = openOK(t, out[1]).Stateid
	x.expect(nfsv4.NFS4ERR_RECLAIM_CONFLICT, putfh(fh), lockReclaim(x, sid, "l", nfsv4.WRITE_LT, 0, 100))
	x.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), lockReclaim(x, sid, "l", nfsv4.WRITE_LT, 60, 40))
	out = x.do(putfh(fh2), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	x.do(putfh(fh2), lockReclaim(x, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
}

// RFC 8881 8.4.3's first edge condition across servers: while the
// holder's server is dead, another server's client takes a conflicting
// lock and releases it. No lock conflicts with the holder's reclaim after
// the restart, yet granting it would let the holder believe it held the
// range all along: it is NFS4ERR_NO_GRACE. Once the grace period is over
// the marks that told are gone.
func TestAReclaimAfterAnotherServerGrantedAndReleasedAConflictingLockIsNoGrace(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	x, fh, _ := lockLedger(t, a)
	w, wsid := openLedger(t, b)

	a.crash()
	wl := waitLock(t, w, fh, wsid, "wl", 50, 1)
	w.do(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
		LockStateid: wl, Offset: 50, Length: 1}})

	a = f.start(dirA, Options{})
	x = a.env().dial(1, userCred)
	x.sessionOnly("x")
	out := x.do(putfh(fh), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	x.expect(nfsv4.NFS4ERR_NO_GRACE, putfh(fh), lockReclaim(x, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
	x.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	ino := a.env().srvIno(fh)
	waitFor(t, func() bool {
		dropped, err := a.eng.Meta.LocksDropped(context.Background(), ino, a.opts.Identity)
		if err != nil {
			t.Fatal(err)
		}
		return !dropped
	}, "the mark of the dropped locks to go with the grace period")
}

// A server restarted after the registry has forgotten its crashed run
// (two lease times after the crash): its client reclaims its lock at
// once, although the crashed run's lock record is still in the store and
// the new run has never seen that run alive or dead in the registry.
func TestAClientReclaimsAtOnceFromAServerRestartedAfterTheRegistryForgotItsCrashedRun(t *testing.T) {
	f := newPGFS(t)
	dirA := t.TempDir()
	a, b := f.start(dirA, Options{}), f.start(t.TempDir(), Options{})
	x, fh, _ := lockLedger(t, a)
	oldID := a.eng.ServerID()

	a.crash()
	waitFor := time.Now().Add(4*registryLease + 10*time.Second)
	for {
		srvs, err := b.eng.Meta.Servers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(srvs, func(s meta.Server) bool { return s.ID == oldID }) {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatal("the crashed run stayed in the registry")
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}

	a = f.start(dirA, Options{})
	x = a.env().dial(1, userCred)
	x.sessionOnly("x")
	out := x.do(putfh(fh), openPrevious(x, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	x.do(putfh(fh), lockReclaim(x, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
}
