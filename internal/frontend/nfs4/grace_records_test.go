package nfs4

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/kv"
)

// Issue 22: a restart waits only for clients that may have something to
// reclaim. A client that holds no open (a one-shot 4.0 client that opened,
// closed and went away) has nothing to reclaim, and one whose lease ran
// out before the server stopped has lost its state already.

// records returns the owners of the client records in stable storage.
func (e *env) records(t *testing.T) map[string]bool {
	t.Helper()
	recs, err := e.eng.Meta.ClientRecords(context.Background(), e.srv.identity)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for owner := range recs {
		if owner != stopRecord {
			out[owner] = true
		}
	}
	return out
}

// A 4.0 client that closed everything it opened leaves no record: after a
// restart straight away (a clean stop) a new client's OPEN gets no GRACE,
// and the log says why.
func TestANFSv40ClientThatClosedEverythingHoldsUpNobodyAfterARestart(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, Options{LeaseTime: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := e.dial(0, userCred)
	fh, sid := confirmedOpen40(t, c, "oneshot40", "copied")
	c.do(putfh(fh), closeOp(3, sid))

	e.restart()
	if recs := e.records(t); len(recs) != 0 {
		t.Errorf("records after the restart: %v", recs)
	}
	other := e.dial(0, authSys(1001, 1001))
	other.setclientid40("other40")
	other.do(putroot(), openArgs(other, 1, "o", "copied", nfsv4.OPEN4_SHARE_ACCESS_READ, nil))
	if !strings.Contains(logs.String(), "no grace period: no NFS client of the previous run holds state") {
		t.Errorf("the start did not say why there is no grace period:\n%s", logs.String())
	}
}

// A client's record goes while the server runs, once its last open is
// closed, so that a crash then leaves nothing to wait for either; a client
// that still holds a lock keeps its record, and after the restart the
// others wait for it alone: its reclaim ends the grace period.
func TestOnlyAClientThatStillHoldsALockHoldsUpOthersAfterARestart(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, Options{LeaseTime: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	holder := e.dial(1, userCred)
	holder.session("holder")
	fh, sid := openFile(t, holder, "o", "ledger")
	holder.do(putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))

	oneshot := e.dial(0, authSys(1002, 1002))
	cfh, csid := confirmedOpen40(t, oneshot, "oneshot40", "copied")
	if recs := e.records(t); !recs["4.0:oneshot40"] || !recs["4.1:holder"] {
		t.Fatalf("records while both hold opens: %v", recs)
	}
	oneshot.do(putfh(cfh), closeOp(3, csid))
	waitFor(t, func() bool {
		recs := e.records(t)
		return len(recs) == 1 && recs["4.1:holder"]
	}, "the record of the client that closed everything to go")

	e.restart()
	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	other.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	if l := logs.String(); !strings.Contains(l, "grace period of 1m5s for 1 NFS clients that held state") || !strings.Contains(l, `4.1:holder`) {
		t.Errorf("the start did not say how long the grace period lasts and for whom:\n%s", l)
	}

	if holder = e.dial(1, userCred); holder.sessionOnly("holder") {
		t.Fatal("the restarted server knew the client's id")
	}
	out := holder.do(putfh(fh), openPrevious(holder, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	holder.do(putfh(fh), lockReclaim(holder, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 0, 100))
	holder.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})

	out = other.do(putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	other.expect(nfsv4.NFS4ERR_DENIED, putfh(fh), lockNew(other, openOK(t, out[1]).Stateid, "l", nfsv4.WRITE_LT, 50, 1))
}

// A record whose client's lease had run out before the server stopped is
// dropped at the start: nothing waits for it. One whose lease still ran
// at the stop is waited for, however long the server was down (the
// client could not renew meanwhile), and so is a record of the earlier
// form, which says nothing of its lease.
func TestARecordWhoseLeaseRanOutBeforeTheStopIsDropped(t *testing.T) {
	lease := time.Minute
	for _, tc := range []struct {
		name   string
		record func(stop time.Time) []byte
		grace  bool
	}{
		{"expired an hour before the stop", func(stop time.Time) []byte {
			return encodeClientRecord(clientRecord{principal: "sys:1000:1000@\"gone\"", renewed: stop.Add(-time.Hour)})
		}, false},
		{"running at the stop", func(stop time.Time) []byte {
			return encodeClientRecord(clientRecord{principal: "sys:1000:1000@\"gone\"", renewed: stop.Add(-lease / 2)})
		}, true},
		{"earlier form", func(time.Time) []byte { return []byte("sys:1000:1000@\"gone\"") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{LeaseTime: lease})
			e.dial(1, userCred).session("first") // the server serves (so its Close is a stop)
			e.srv.Close()
			// The previous instance stopped two hours ago and had this
			// client's record.
			stop := time.Now().Add(-2 * time.Hour)
			ctx := context.Background()
			if err := e.eng.Meta.PutClientRecord(ctx, e.srv.identity, "4.1:gone", tc.record(stop)); err != nil {
				t.Fatal(err)
			}
			if err := e.eng.Meta.PutClientRecord(ctx, e.srv.identity, stopRecord, encodeStop(stop)); err != nil {
				t.Fatal(err)
			}
			e.startServer()

			other := e.dial(1, authSys(1001, 1001))
			other.session("other")
			_, st := other.call(putroot(), openArgs(other, 0, "o", "f", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)))
			if want := map[bool]nfsv4.Nfsstat4{true: nfsv4.NFS4ERR_GRACE, false: nfsv4.NFS4_OK}[tc.grace]; st != want {
				t.Fatalf("OPEN: %s, want %s", nfsv4.Nfsstat4_name[st], nfsv4.Nfsstat4_name[want])
			}
			if recs := e.records(t); recs["4.1:gone"] != tc.grace {
				t.Fatalf("records: %v (the record must stay exactly while it is waited for)", recs)
			}
		})
	}
}

// The record of a client that holds state follows its lease coarsely: a
// renewal more than a quarter lease past the stored one is stored, so a
// crash does not make a live client's lease look run out at the next
// start.
func TestTheRecordOfAClientThatHoldsStateFollowsItsRenewals(t *testing.T) {
	lease := 400 * time.Millisecond
	e := newEnv(t, Options{LeaseTime: lease})
	c := e.dial(0, userCred)
	confirmedOpen40(t, c, "renewing40", "held")
	stored := func() time.Time {
		recs, err := e.eng.Meta.ClientRecords(context.Background(), e.srv.identity)
		if err != nil {
			t.Fatal(err)
		}
		return decodeClientRecord(recs["4.0:renewing40"]).renewed
	}
	first := stored()
	if first.IsZero() {
		t.Fatal("the client's record holds no renewal time")
	}
	waitFor(t, func() bool {
		c.do(&nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: c.clientID}})
		return stored().Sub(first) > lease/4
	}, "a later renewal to be stored")
}

// A record of the single-server form an earlier version wrote (n<owner>)
// is the restarted server's: its client is waited for and may reclaim, and
// the record is kept under the server's identity from then on.
func TestARecordOfTheSingleServerFormIsTakenOverAtTheStart(t *testing.T) {
	e := newEnv(t, Options{LeaseTime: time.Minute})
	holder := e.dial(1, userCred)
	holder.session("holder")
	fh, sid := openFile(t, holder, "o", "ledger")
	holder.do(putfh(fh), lockNew(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))
	e.srv.Close()
	// Rewrite the stopped server's records as the earlier version kept
	// them: one key per owner, under no identity.
	ctx := context.Background()
	recs, err := e.eng.Meta.ClientRecords(ctx, e.srv.identity)
	if err != nil || recs["4.1:holder"] == nil {
		t.Fatalf("records at the stop: %q, %v", recs, err)
	}
	if err := e.eng.KV.Update(ctx, func(tx kv.Txn) error {
		for owner, v := range recs {
			if err := tx.Set(append([]byte{'n'}, owner...), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Meta.ChangeClientRecords(ctx, e.srv.identity, nil, slices.Collect(maps.Keys(recs))); err != nil {
		t.Fatal(err)
	}
	e.startServer()

	other := e.dial(1, authSys(1001, 1001))
	other.session("other")
	other.expect(nfsv4.NFS4ERR_GRACE, putroot(), openArgs(other, 0, "o", "ledger", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	if holder = e.dial(1, userCred); holder.sessionOnly("holder") {
		t.Fatal("the restarted server knew the client's id")
	}
	out := holder.do(putfh(fh), openPrevious(holder, 0, "o", nfsv4.OPEN4_SHARE_ACCESS_BOTH))
	sid = openOK(t, out[1]).Stateid
	holder.do(putfh(fh), lockReclaim(holder, sid, "l", nfsv4.WRITE_LT, 0, 100))
	holder.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	if !e.records(t)["4.1:holder"] {
		t.Fatalf("records after the start: %v; want the holder's under the server's identity", e.records(t))
	}
	var legacy int
	e.eng.KV.View(ctx, func(r kv.Reader) error {
		return r.Scan([]byte{'n'}, []byte{'o'}, func(k, v []byte) bool { legacy++; return true })
	})
	if legacy != 0 {
		t.Fatalf("%d records of the earlier form are left", legacy)
	}
}
