package nfs4

import (
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/engine"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
)

// The server's stable storage (one client record per client that holds
// state) and the grace period it gives after a restart come out as they
// do when every kv transaction runs its fn once, although here each runs
// twice, the first time on a transaction that is thrown away (kv's rule
// for callers: a PostgreSQL backend retries serialization failures so).
func TestClientRecordsAndTheGracePeriodHoldWhenEveryTransactionRunsTwice(t *testing.T) {
	var rs *kvreplay.Store
	e := newEnv(t, Options{LeaseTime: time.Minute}, func(c *engine.Config) {
		c.WrapKV = func(db kv.Store) kv.Store {
			rs = kvreplay.New(db, kvreplay.Options{})
			return rs
		}
	})
	holder := e.dial(1, userCred)
	holder.session("holder")
	fh, sid := openFile(t, holder, "o", "ledger")
	holder.do(putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))
	oneshot := e.dial(0, authSys(1002, 1002))
	cfh, csid := confirmedOpen40(t, oneshot, "oneshot40", "copied")
	if recs := e.records(t); len(recs) != 2 || !recs["4.0:oneshot40"] || !recs["4.1:holder"] {
		t.Fatalf("records while both hold opens: %v", recs)
	}
	oneshot.do(putfh(cfh), closeOp(3, csid))
	waitFor(t, func() bool {
		recs := e.records(t)
		return len(recs) == 1 && recs["4.1:holder"]
	}, "the record of the client that closed everything to go")
	if rs.Replays() == 0 {
		t.Fatal("no transaction was run twice")
	}

	e.restart()
	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	other.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	if holder = e.dial(1, userCred); holder.sessionOnly("holder") {
		t.Fatal("the restarted server knew the client's id")
	}
	out := holder.do(putfh(fh), openPrevious(holder, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	holder.do(putfh(fh), lockReclaim(holder, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
	holder.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	out = other.do(putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	other.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(other, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 50, 1))
	if recs := e.records(t); len(recs) != 2 || !recs["4.1:holder"] || !recs["4.1:other"] {
		t.Fatalf("records after the reclaim and the other client's open: %v", recs)
	}
	if rs.Replays() == 0 {
		t.Fatal("no transaction of the restarted server was run twice")
	}
}
