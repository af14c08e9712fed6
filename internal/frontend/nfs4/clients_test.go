package nfs4

import (
	"context"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Client records and the principals that make them (issue 21; RFC 8881
// 18.35, 18.36, RFC 7530 16.33, 16.34).

// exchangeID sends EXCHANGE_ID for owner with verifier verf and returns
// its status and, on success, its result.
func exchangeID(c *tclient, owner string, verf byte) (nfsv4.Nfsstat4, nfsv4.ExchangeId4resok) {
	c.t.Helper()
	res := c.raw(&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: [8]byte{verf}, CoOwnerid: []byte(owner)},
		EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}})
	if res.Status != nfsv4.NFS4_OK {
		return res.Status, nfsv4.ExchangeId4resok{}
	}
	return res.Status, res.Resarray[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4
}

// createSession sends CREATE_SESSION for client id with csa_sequence seq;
// on success the client uses the new session.
func createSession(c *tclient, id uint64, seq uint32) nfsv4.Nfsstat4 {
	c.t.Helper()
	attrs := nfsv4.ChannelAttrs4{CaMaxrequestsize: 1 << 20, CaMaxresponsesize: 1 << 20,
		CaMaxresponsesizeCached: 8 << 10, CaMaxoperations: 16, CaMaxrequests: 8}
	res := c.raw(&nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
		CsaClientid: id, CsaSequence: seq, CsaForeChanAttrs: attrs, CsaBackChanAttrs: attrs}})
	if res.Status == nfsv4.NFS4_OK {
		cs := res.Resarray[0].(*nfsv4.NfsResop4_OP_CREATE_SESSION).OpcreateSession.(*nfsv4.CreateSession4res_NFS4_OK).CsrResok4
		c.clientID, c.sess, c.seq = id, cs.CsrSessionid, 0
	}
	return res.Status
}

// Only the principal that made an unconfirmed client record may confirm
// it with CREATE_SESSION; another one gets NFS4ERR_CLID_INUSE and leaves
// the record unconfirmed, for its maker to confirm (RFC 8881 18.36.4).
func TestCreateSessionByAnotherPrincipalIsClidInuseAndLeavesTheRecordUnconfirmed(t *testing.T) {
	e := newEnv(t, Options{})
	maker := e.dial(1, userCred)
	st, eid := exchangeID(maker, "unconfirmed", 1)
	if st != nfsv4.NFS4_OK {
		t.Fatalf("EXCHANGE_ID: %s", nfsv4.Nfsstat4_name[st])
	}
	intruder := e.dial(1, authSys(1001, 1001))
	if st := createSession(intruder, eid.EirClientid, eid.EirSequenceid); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Fatalf("CREATE_SESSION of another principal's unconfirmed client: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[st])
	}
	e.srv.state.mu.Lock()
	cl := e.srv.state.clients[eid.EirClientid]
	confirmed := cl != nil && cl.confirmed
	e.srv.state.mu.Unlock()
	if cl == nil || confirmed {
		t.Fatalf("after the refused CREATE_SESSION the record is gone (%v) or confirmed (%v)", cl == nil, confirmed)
	}

	// Its maker confirms it, with the sequence id the refusal did not use.
	if st := createSession(maker, eid.EirClientid, eid.EirSequenceid); st != nfsv4.NFS4_OK {
		t.Fatalf("CREATE_SESSION by the record's maker: %s", nfsv4.Nfsstat4_name[st])
	}
	maker.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	fh, sid := openFile(t, maker, "o", "confirmed-by-its-maker")
	maker.do(putfh(fh), closeOp(0, sid))
	if st, again := exchangeID(maker, "unconfirmed", 1); st != nfsv4.NFS4_OK ||
		again.EirClientid != eid.EirClientid || again.EirFlags&nfsv4.EXCHGID4_FLAG_CONFIRMED_R == 0 {
		t.Errorf("the maker's EXCHANGE_ID after confirming: %s, client id %#x (want %#x), flags %#x",
			nfsv4.Nfsstat4_name[st], again.EirClientid, eid.EirClientid, again.EirFlags)
	}
}

// An EXCHANGE_ID from another principal for the owner of a confirmed
// record that holds no state (no opens, hence no locks, and no sessions)
// removes that record at once (RFC 8881 18.35.4, client collision): its
// client id is stale from then on, its stable-storage record is gone, and
// the new principal gets a new client id. A record that holds an open is
// not removed, even without a session.
func TestExchangeIDFromAnotherPrincipalRemovesAConfirmedRecordWithoutStateAtOnce(t *testing.T) {
	e := newEnv(t, Options{})
	old := e.dial(1, userCred)
	old.session("collided")
	fh, sid := openFile(t, old, "o", "once-open")
	old.do(putfh(fh), closeOp(0, sid))
	oldID, oldSess := old.clientID, old.sess
	old.do(&nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: oldSess}})
	if recs, err := e.eng.Meta.ClientRecords(context.Background(), e.srv.identity); err != nil || recs["4.1:collided"] == nil {
		t.Fatalf("the client that opened a file has no stable record (%v)", err)
	}

	newcomer := e.dial(1, authSys(1001, 1001))
	st, eid := exchangeID(newcomer, "collided", 2)
	if st != nfsv4.NFS4_OK {
		t.Fatalf("EXCHANGE_ID for an owner whose record holds nothing, by another principal: %s", nfsv4.Nfsstat4_name[st])
	}
	if eid.EirClientid == oldID || eid.EirFlags&nfsv4.EXCHGID4_FLAG_CONFIRMED_R != 0 {
		t.Errorf("the new principal got client id %#x (the old one %#x), flags %#x", eid.EirClientid, oldID, eid.EirFlags)
	}
	// The old record is gone now, before the new one is confirmed.
	if st := createSession(e.dial(1, userCred), oldID, 2); st != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Errorf("CREATE_SESSION for the replaced client id: %s, want NFS4ERR_STALE_CLIENTID", nfsv4.Nfsstat4_name[st])
	}
	if res := old.raw(&nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: oldID}}); res.Status != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Errorf("DESTROY_CLIENTID of the replaced client id: %s, want NFS4ERR_STALE_CLIENTID", nfsv4.Nfsstat4_name[res.Status])
	}
	old.sess = oldSess
	if res := old.raw(old.seqOp(), putroot()); res.Status != nfsv4.NFS4ERR_BADSESSION {
		t.Errorf("SEQUENCE on the replaced client's session: %s, want NFS4ERR_BADSESSION", nfsv4.Nfsstat4_name[res.Status])
	}
	if recs, err := e.eng.Meta.ClientRecords(context.Background(), e.srv.identity); err != nil || recs["4.1:collided"] != nil {
		t.Errorf("the replaced client's stable record is still there (%v): it could reclaim after a restart", err)
	}

	// The new principal's record works as any other.
	if st := createSession(newcomer, eid.EirClientid, eid.EirSequenceid); st != nfsv4.NFS4_OK {
		t.Fatalf("CREATE_SESSION of the new record: %s", nfsv4.Nfsstat4_name[st])
	}
	newcomer.do(&nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{})
	fh, sid = openFile(t, newcomer, "o", "newcomer")

	// It now holds an open; without a session it is still not to be
	// taken over.
	newcomer.do(&nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: newcomer.sess}})
	if st, _ := exchangeID(e.dial(1, userCred), "collided", 3); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Errorf("EXCHANGE_ID for an owner whose record holds an open, by another principal: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[st])
	}
	if st := createSession(newcomer, eid.EirClientid, eid.EirSequenceid+1); st != nfsv4.NFS4_OK {
		t.Fatalf("a new session for the open's holder: %s", nfsv4.Nfsstat4_name[st])
	}
	newcomer.do(putfh(fh), writeOp(sid, 0, []byte("still mine"), nfsv4.FILE_SYNC4), closeOp(0, sid))
}

// setclientid sends SETCLIENTID for id with verifier verf and returns its
// status and, on success, the client id and confirm verifier.
func setclientid(c *tclient, id string, verf byte) (nfsv4.Nfsstat4, nfsv4.Setclientid4resok) {
	c.t.Helper()
	res := c.raw(&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
		Client:   nfsv4.NfsClientId4{Verifier: [8]byte{verf}, Id: []byte(id)},
		Callback: nfsv4.CbClient4{CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "127.0.0.1.0.0"}}}})
	if res.Status != nfsv4.NFS4_OK {
		return res.Status, nfsv4.Setclientid4resok{}
	}
	return res.Status, res.Resarray[0].(*nfsv4.NfsResop4_OP_SETCLIENTID).Opsetclientid.(*nfsv4.Setclientid4res_NFS4_OK).Resok4
}

func setclientidConfirm(c *tclient, ok nfsv4.Setclientid4resok) nfsv4.Nfsstat4 {
	c.t.Helper()
	return c.raw(&nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4args{
		Clientid: ok.Clientid, SetclientidConfirm: ok.SetclientidConfirm}}).Status
}

// A 4.0 client record that holds no state does not keep another
// principal from using its id (RFC 7530 16.33.5, as EXCHANGE_ID in 4.1):
// the other principal's SETCLIENTID and SETCLIENTID_CONFIRM go through and
// replace the record, whose client id is then stale. Only the principal
// that made an unconfirmed record may confirm it, and a confirmation is
// refused while the record it would replace has gained state meanwhile.
func TestNFSv40SetclientidFromAnotherPrincipalReplacesARecordWithoutState(t *testing.T) {
	e := newEnv(t, Options{})
	old := e.dial(0, userCred)
	old.setclientid40("shared40")

	newcomer := e.dial(0, authSys(1001, 1001))
	st, ok := setclientid(newcomer, "shared40", 5)
	if st != nfsv4.NFS4_OK {
		t.Fatalf("SETCLIENTID for an id whose record holds nothing, by another principal: %s", nfsv4.Nfsstat4_name[st])
	}
	if ok.Clientid == old.clientID {
		t.Fatalf("the new principal got the old client id %#x", ok.Clientid)
	}
	// Someone else cannot confirm the newcomer's record.
	if st := setclientidConfirm(e.dial(0, userCred), ok); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Errorf("SETCLIENTID_CONFIRM of another principal's record: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[st])
	}
	if st := setclientidConfirm(newcomer, ok); st != nfsv4.NFS4_OK {
		t.Fatalf("SETCLIENTID_CONFIRM by the new principal: %s", nfsv4.Nfsstat4_name[st])
	}
	newcomer.clientID = ok.Clientid
	if st := old.raw(&nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: old.clientID}}).Status; st != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Errorf("RENEW of the replaced client id: %s, want NFS4ERR_STALE_CLIENTID", nfsv4.Nfsstat4_name[st])
	}
	out := newcomer.do(putroot(), openArgs(newcomer, 1, "o", "newcomer40", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	nfh, nsid := fhOf(t, out[2]), openOK(t, out[1]).Stateid
	nsid = openConfirmed(t, newcomer.do(putfh(nfh), openConfirm(nsid, 2))[1])

	// A third principal's SETCLIENTID, while the newcomer's record holds
	// an open, is refused; so is the confirmation of one made while the
	// record held nothing, once it holds something.
	third := e.dial(0, authSysOn("elsewhere", 1001, 1001))
	if st, _ := setclientid(third, "shared40", 6); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Errorf("SETCLIENTID for an id whose record holds an open, by another principal: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[st])
	}
	newcomer.do(putfh(nfh), closeOp(3, nsid))
	st, pending := setclientid(third, "shared40", 6)
	if st != nfsv4.NFS4_OK {
		t.Fatalf("SETCLIENTID for an id whose record holds nothing again: %s", nfsv4.Nfsstat4_name[st])
	}
	out = newcomer.do(putroot(), openArgs(newcomer, 4, "o", "newcomer40", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil))
	nsid = openOK(t, out[1]).Stateid
	if st := setclientidConfirm(third, pending); st != nfsv4.NFS4ERR_CLID_INUSE {
		t.Errorf("SETCLIENTID_CONFIRM replacing a record that gained an open: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[st])
	}
	newcomer.do(putfh(nfh), writeOp(nsid, 0, []byte("kept"), nfsv4.FILE_SYNC4), closeOp(5, nsid))
}
