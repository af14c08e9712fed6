package nfs4

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/heartbeat"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// sharedServers starts two NFS servers of one file system: each its own
// meta.Store and vfs.FS on one kv store, with a heartbeat, and no bucket
// (the tests open and lock only; nothing is exported). It returns an env
// per server for dialling.
func sharedServers(t *testing.T) (a, b *env) {
	t.Helper()
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := func(id uint64) *env {
		m, err := meta.Open(ctx, db, meta.Options{ExportDelay: time.Minute, Server: id})
		if err != nil {
			t.Fatal(err)
		}
		beats, err := heartbeat.Start(ctx, db, id, 50*time.Millisecond, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(beats.Stop)
		fs := vfs.New(m, nil, nil, vfs.Config{Liveness: beats, Logger: quietLogger})
		t.Cleanup(fs.WaitCloses) // before the store is closed
		if _, err := fs.SetAttr(ctx, vfs.Root, meta.RootIno, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
		srv, err := New(ctx, fs, Options{Logger: quietLogger, Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.Serve(sctx, ln); err != nil {
				t.Errorf("serve: %v", err)
			}
		}()
		t.Cleanup(func() {
			cancel()
			<-done
			srv.Close()
		})
		return &env{t: t, srv: srv, addr: ln.Addr().String()}
	}
	return start(1), start(2)
}

// A share reservation held through one NFS server binds the OPENs of
// clients of another server of the same file system, and I/O under the
// anonymous stateid there; the CLOSE through the first server frees them.
func TestShareReservationsHoldAcrossTwoNFSServers(t *testing.T) {
	srvA, srvB := sharedServers(t)
	ca := srvA.dial(1, userCred)
	ca.session("client-of-a")
	cb := srvB.dial(1, userCred)
	cb.session("client-of-b")
	open := func(c *tclient, owner string, access, deny uint32) nfsv4.NfsArgop4 {
		op := openArgs(c, 0, owner, "shared", access, unchecked(0o644)).(*nfsv4.NfsArgop4_OP_OPEN)
		op.Opopen.ShareDeny = deny
		return op
	}

	out := ca.do(putroot(), open(ca, "o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_WRITE), getfh())
	held := openOK(t, out[1]).Stateid
	fh := fhOf(t, out[2])
	cb.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open(cb, "o", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE))
	cb.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open(cb, "o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_READ))
	out = cb.do(putroot(), open(cb, "o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE))
	readerB := openOK(t, out[1]).Stateid
	cb.expect(nfsv4.NFS4ERR_LOCKED, putfh(fh), writeOp(nfsv4.Stateid4{}, 0, []byte("x"), nfsv4.FILE_SYNC4))
	cb.do(putfh(fh), readOp(nfsv4.Stateid4{}, 0, 1)) // reads are not denied

	// b's reader now binds a's clients: a deny of reads is refused there.
	ca.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open(ca, "o2", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_READ))

	ca.do(putfh(fh), closeOp(0, held))
	out = cb.do(putroot(), open(cb, "w", nfsv4.OPEN4_SHARE_ACCESS_WRITE, nfsv4.OPEN4_SHARE_DENY_NONE))
	writerB := openOK(t, out[1]).Stateid
	cb.do(putfh(fh), writeOp(nfsv4.Stateid4{}, 0, []byte("x"), nfsv4.FILE_SYNC4))

	// b's CLOSEs free the file for a deny of both through a.
	cb.do(putfh(fh), closeOp(0, readerB))
	cb.do(putfh(fh), closeOp(0, writerB))
	ca.do(putroot(), open(ca, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nfsv4.OPEN4_SHARE_DENY_BOTH))
	cb.expect(nfsv4.NFS4ERR_SHARE_DENIED, putroot(), open(cb, "o", nfsv4.OPEN4_SHARE_ACCESS_READ, nfsv4.OPEN4_SHARE_DENY_NONE))
}

// A byte-range lock taken through one NFS server denies conflicting LOCKs
// and LOCKTs of clients of another server of the file system; after LOCKU
// through the first, the second's LOCK is granted.
func TestLocksConflictAcrossTwoNFSServers(t *testing.T) {
	srvA, srvB := sharedServers(t)
	ca := srvA.dial(1, userCred)
	ca.session("client-of-a")
	cb := srvB.dial(1, authSys(1001, 1001))
	cb.session("client-of-b")
	fh, sa := openFile(t, ca, "oa", "locked")
	_, sb := openFile(t, cb, "ob", "locked")

	out := ca.do(putfh(fh), lockNew(ca, sa, "la", nfsv4.WRITE_LT, 0, 100))
	lsa := out[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4_OK).Resok4.LockStateid
	out = cb.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(cb, sb, "lb", nfsv4.READ_LT, 50, 10))
	d := out[1].(*nfsv4.NfsResop4_OP_LOCK).Oplock.(*nfsv4.Lock4res_NFS4ERR_DENIED).Denied
	if d.Offset != 0 || d.Length != 100 || d.Locktype != nfsv4.WRITE_LT {
		t.Errorf("LOCK through b denied with %+v; want a's write lock on [0,100)", d)
	}
	cb.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT,
		Offset: 99, Length: math.MaxUint64, Owner: nfsv4.StateOwner4{Clientid: cb.clientID, Owner: []byte("lb")}}})
	cb.do(putfh(fh), lockNew(cb, sb, "lb", nfsv4.WRITE_LT, 100, 10))

	ca.do(putfh(fh), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT,
		LockStateid: lsa, Offset: 0, Length: 100}})
	cb.do(putfh(fh), lockNew(cb, sb, "lb2", nfsv4.WRITE_LT, 0, 100))
	ca.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.READ_LT,
		Offset: 0, Length: 1, Owner: nfsv4.StateOwner4{Clientid: ca.clientID, Owner: []byte("la")}}})
}
