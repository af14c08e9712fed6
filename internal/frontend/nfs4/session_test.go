package nfs4

import (
	"bytes"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

func bindConn(sess [16]byte, dir nfsv4.ChannelDirFromClient4) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION{OpbindConnToSession: nfsv4.BindConnToSession4args{
		BctsaSessid: sess, BctsaDir: dir}}
}

func TestASecondConnectionBoundToTheSessionCarriesItsRequests(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("trunked")
	d := e.dial(1, userCred)

	// The Linux client drops a connection bound "fore or both" unless
	// the answer is BOTH.
	for _, tc := range []struct {
		ask  nfsv4.ChannelDirFromClient4
		want nfsv4.ChannelDirFromServer4
	}{{nfsv4.CDFC4_FORE_OR_BOTH, nfsv4.CDFS4_BOTH}, {nfsv4.CDFC4_FORE, nfsv4.CDFS4_FORE}} {
		res := d.raw(bindConn(c.sess, tc.ask))
		if res.Status != nfsv4.NFS4_OK {
			t.Fatalf("BIND_CONN_TO_SESSION(%d): %s", tc.ask, nfsv4.Nfsstat4_name[res.Status])
		}
		ok := res.Resarray[0].(*nfsv4.NfsResop4_OP_BIND_CONN_TO_SESSION).OpbindConnToSession.(*nfsv4.BindConnToSession4res_NFS4_OK).BctsrResok4
		if ok.BctsrSessid != c.sess || ok.BctsrDir != tc.want {
			t.Errorf("BIND_CONN_TO_SESSION(%d) = session %x, direction %d; want %d", tc.ask, ok.BctsrSessid, ok.BctsrDir, tc.want)
		}
	}
	if res := d.raw(bindConn([16]byte{9}, nfsv4.CDFC4_FORE_OR_BOTH)); res.Status != nfsv4.NFS4ERR_BADSESSION {
		t.Errorf("binding to an unknown session: %s", nfsv4.Nfsstat4_name[res.Status])
	}

	// Both connections now carry the session's slot, in turn.
	d.sess, d.clientID, d.seq = c.sess, c.clientID, c.seq
	out := d.do(putroot(), openArgs(d, 0, "o", "via-second", nfsv4.OPEN4_SHARE_ACCESS_BOTH, unchecked(0o644)), getfh())
	fh, sid := fhOf(t, out[2]), openOK(t, out[1]).Stateid
	c.seq = d.seq
	c.do(putfh(fh), writeOp(sid, 0, []byte("one session, two connections"), nfsv4.FILE_SYNC4), closeOp(0, sid))
	d.seq = c.seq
	if r := readOK(t, d.do(putfh(fh), readOp(nfsv4.Stateid4{}, 0, 100))[1]); string(r.Data) != "one session, two connections" {
		t.Errorf("READ over the second connection = %q", r.Data)
	}
}

func TestSecinfoListsAuthSys(t *testing.T) {
	e := newEnv(t, Options{})
	e.put("sec.txt", []byte("x"))
	c := e.dial(1, userCred)
	c.session("secinfo")
	flavors := func(r nfsv4.NfsResop4) []nfsv4.Secinfo4 {
		t.Helper()
		var res nfsv4.Secinfo4res
		switch v := r.(type) {
		case *nfsv4.NfsResop4_OP_SECINFO:
			res = v.Opsecinfo
		case *nfsv4.NfsResop4_OP_SECINFO_NO_NAME:
			res = v.OpsecinfoNoName
		}
		return res.(*nfsv4.Secinfo4res_NFS4_OK).Resok4
	}
	secinfo := &nfsv4.NfsArgop4_OP_SECINFO{Opsecinfo: nfsv4.Secinfo4args{Name: "sec.txt"}}
	noName := &nfsv4.NfsArgop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: nfsv4.SECINFO_STYLE4_CURRENT_FH}
	for _, op := range []nfsv4.NfsArgop4{secinfo, noName} {
		out := c.do(putroot(), op)
		f := flavors(out[1])
		if len(f) != 1 || f[0].GetFlavor() != rpcv2.AUTH_SYS {
			t.Errorf("%s lists %+v, want AUTH_SYS alone", nfsv4.NfsOpnum4_name[op.GetArgop()], f)
		}
		// In 4.1 both consume the current filehandle.
		c.expect(nfsv4.NFS4ERR_NOFILEHANDLE, putroot(), op, getfh())
	}
	c.expect(nfsv4.NFS4ERR_NOENT, putroot(), &nfsv4.NfsArgop4_OP_SECINFO{Opsecinfo: nfsv4.Secinfo4args{Name: "missing"}})
	c.expect(nfsv4.NFS4ERR_NOENT, putroot(), &nfsv4.NfsArgop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: nfsv4.SECINFO_STYLE4_PARENT})
}

func TestDestroySessionThenClientIDForgetsTheClient(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.session("leaving")
	fh, sid := openFile(t, c, "o", "held-open")
	first := c.sess
	destroySession := func(id [16]byte) nfsv4.Nfsstat4 {
		return c.raw(&nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: id}}).Status
	}
	destroyClient := func() nfsv4.Nfsstat4 {
		return c.raw(&nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: c.clientID}}).Status
	}

	// A client with a session, or with an open file, is busy.
	if st := destroyClient(); st != nfsv4.NFS4ERR_CLIENTID_BUSY {
		t.Errorf("DESTROY_CLIENTID with a session: %s", nfsv4.Nfsstat4_name[st])
	}
	if st := destroySession(first); st != nfsv4.NFS4_OK {
		t.Fatalf("DESTROY_SESSION: %s", nfsv4.Nfsstat4_name[st])
	}
	if st := destroyClient(); st != nfsv4.NFS4ERR_CLIENTID_BUSY {
		t.Errorf("DESTROY_CLIENTID with an open file: %s", nfsv4.Nfsstat4_name[st])
	}
	// Closing needs a session: a new one for the same client.
	c.session("leaving")
	c.do(putfh(fh), closeOp(0, sid))
	if st := destroySession(c.sess); st != nfsv4.NFS4_OK {
		t.Fatalf("DESTROY_SESSION: %s", nfsv4.Nfsstat4_name[st])
	}
	if st := destroyClient(); st != nfsv4.NFS4_OK {
		t.Fatalf("DESTROY_CLIENTID: %s", nfsv4.Nfsstat4_name[st])
	}

	for _, id := range [][16]byte{first, c.sess} {
		c.sess = id
		if res := c.raw(c.seqOp(), putroot()); res.Status != nfsv4.NFS4ERR_BADSESSION {
			t.Errorf("SEQUENCE on a destroyed session: %s", nfsv4.Nfsstat4_name[res.Status])
		}
	}
	if st := destroyClient(); st != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Errorf("DESTROY_CLIENTID again: %s", nfsv4.Nfsstat4_name[st])
	}
	res := c.raw(&nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{CsaClientid: c.clientID, CsaSequence: 3,
		CsaForeChanAttrs: nfsv4.ChannelAttrs4{CaMaxrequestsize: 1 << 20, CaMaxresponsesize: 1 << 20, CaMaxoperations: 8, CaMaxrequests: 1}}})
	if res.Status != nfsv4.NFS4ERR_STALE_CLIENTID {
		t.Errorf("CREATE_SESSION for a destroyed client: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	if e.eng.FS.IsOpen(e.srvIno(fh)) {
		t.Errorf("the file is still open")
	}
}

// OP_ILLEGAL first in a COMPOUND without a session answers
// NFS4ERR_OP_ILLEGAL, as an unknown operation number does (issue 11; RFC
// 8881 15.2): it is no operation, so no session rule applies to it.
func TestOpIllegalFirstWithoutASessionIsOpIllegal(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	res := c.raw(&nfsv4.NfsArgop4_OP_ILLEGAL{})
	if res.Status != nfsv4.NFS4ERR_OP_ILLEGAL || len(res.Resarray) != 1 {
		t.Fatalf("COMPOUND of OP_ILLEGAL: %s with %d results, want NFS4ERR_OP_ILLEGAL and one", nfsv4.Nfsstat4_name[res.Status], len(res.Resarray))
	}
	if _, ok := res.Resarray[0].(*nfsv4.NfsResop4_OP_ILLEGAL); !ok {
		t.Fatalf("result %T, want OP_ILLEGAL's", res.Resarray[0])
	}
}

// A 4.1 client record is bound to the principal that made it (issue 11;
// RFC 8881 18.35.5): another principal cannot update it (NFS4ERR_PERM)
// nor take it over while it has a session (NFS4ERR_CLID_INUSE); once it
// has neither state nor sessions, another principal's EXCHANGE_ID makes a
// new record with a new client id.
func TestExchangeIDFromAnotherPrincipalCannotTakeOverAClient(t *testing.T) {
	e := newEnv(t, Options{})
	owner := e.dial(1, userCred)
	owner.session("bound")
	exchange := func(c *tclient, flags uint32) *nfsv4.Compound4res {
		return c.raw(&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
			EiaClientowner: nfsv4.ClientOwner4{CoVerifier: [8]byte{1}, CoOwnerid: []byte("bound")},
			EiaFlags:       flags, EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}})
	}
	intruder := e.dial(1, authSys(1001, 1001))
	if res := exchange(intruder, 0); res.Status != nfsv4.NFS4ERR_CLID_INUSE {
		t.Errorf("EXCHANGE_ID of a client with a session, by another principal: %s, want NFS4ERR_CLID_INUSE", nfsv4.Nfsstat4_name[res.Status])
	}
	if res := exchange(intruder, nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A); res.Status != nfsv4.NFS4ERR_PERM {
		t.Errorf("an update of another principal's client: %s, want NFS4ERR_PERM", nfsv4.Nfsstat4_name[res.Status])
	}
	// The owner itself is still known, with its client id.
	if res := exchange(e.dial(1, userCred), 0); res.Status != nfsv4.NFS4_OK ||
		res.Resarray[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4.EirClientid != owner.clientID {
		t.Errorf("the owner's own EXCHANGE_ID: %s, or another client id", nfsv4.Nfsstat4_name[res.Status])
	}

	owner.do(&nfsv4.NfsArgop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: owner.sess}})
	res := exchange(intruder, 0)
	if res.Status != nfsv4.NFS4_OK {
		t.Fatalf("EXCHANGE_ID of an idle client's owner by another principal: %s", nfsv4.Nfsstat4_name[res.Status])
	}
	eid := res.Resarray[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4
	if eid.EirClientid == owner.clientID || eid.EirFlags&nfsv4.EXCHGID4_FLAG_CONFIRMED_R != 0 {
		t.Errorf("the replacing record kept client id %#x (flags %#x)", eid.EirClientid, eid.EirFlags)
	}
}

// A session's negotiated limits are enforced (issue 11; RFC 8881 18.46.3,
// 2.10.6.4): more operations than ca_maxoperations, a request over
// ca_maxrequestsize, a reply over ca_maxresponsesize, and a reply the
// client wants cached over ca_maxresponsesize_cached each get their error.
func TestTheSessionsChannelLimitsAreEnforced(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	c.fore = &nfsv4.ChannelAttrs4{CaMaxrequestsize: 2048, CaMaxresponsesize: 2048,
		CaMaxresponsesizeCached: 600, CaMaxoperations: 8, CaMaxrequests: 4}
	c.session("limited")
	fh, sid := openFile(t, c, "o", "limits")
	c.do(putfh(fh), writeOp(sid, 0, bytes.Repeat([]byte("x"), 1500), nfsv4.FILE_SYNC4))

	seqStatus := func(res *nfsv4.Compound4res) nfsv4.Nfsstat4 {
		t.Helper()
		if len(res.Resarray) == 0 {
			t.Fatalf("no results, status %s", nfsv4.Nfsstat4_name[res.Status])
		}
		return res.Resarray[0].(*nfsv4.NfsResop4_OP_SEQUENCE).Opsequence.GetSrStatus()
	}
	ops := []nfsv4.NfsArgop4{c.seqOp()}
	for range 8 {
		ops = append(ops, putroot())
	}
	if st := seqStatus(c.raw(ops...)); st != nfsv4.NFS4ERR_TOO_MANY_OPS {
		t.Errorf("9 operations in a session of 8: SEQUENCE %s, want NFS4ERR_TOO_MANY_OPS", nfsv4.Nfsstat4_name[st])
	}
	c.seq-- // the refused request used no slot sequence
	if st := seqStatus(c.raw(c.seqOp(), putfh(fh), writeOp(sid, 0, bytes.Repeat([]byte("y"), 2048), nfsv4.FILE_SYNC4))); st != nfsv4.NFS4ERR_REQ_TOO_BIG {
		t.Errorf("a 2 KiB write in a session of 2 KiB requests: SEQUENCE %s, want NFS4ERR_REQ_TOO_BIG", nfsv4.Nfsstat4_name[st])
	}
	c.seq--
	// Each READ fits alone; three do not fit one reply.
	out, st := c.call(putfh(fh), readOp(sid, 0, 700), readOp(sid, 0, 700), readOp(sid, 0, 700))
	if st != nfsv4.NFS4ERR_REP_TOO_BIG || len(out) != 4 {
		t.Errorf("three 700-byte READs in a reply of 2 KiB: %s after %d results, want NFS4ERR_REP_TOO_BIG at the third READ",
			nfsv4.Nfsstat4_name[st], len(out))
	}
	// A reply the client wants cached must fit the cache.
	c.do(putfh(fh), readOp(sid, 0, 700))
	c.cacheThis = true
	c.expect(nfsv4.NFS4ERR_REP_TOO_BIG_TO_CACHE, putfh(fh), readOp(sid, 0, 700))
	c.do(putfh(fh), readOp(sid, 0, 100))
}

// CREATE_SESSION refuses unknown flags (NFS4ERR_INVAL) and a back channel
// too small to carry a callback (NFS4ERR_TOOSMALL), as it refuses such a
// fore channel (issue 11; RFC 8881 18.36.3).
func TestCreateSessionRefusesUnknownFlagsAndUnusableChannels(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(1, userCred)
	res := c.raw(&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: [8]byte{1}, CoOwnerid: []byte("creating")},
		EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}})
	eid := res.Resarray[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId.(*nfsv4.ExchangeId4res_NFS4_OK).EirResok4
	good := nfsv4.ChannelAttrs4{CaMaxrequestsize: 1 << 20, CaMaxresponsesize: 1 << 20,
		CaMaxresponsesizeCached: 8 << 10, CaMaxoperations: 16, CaMaxrequests: 8}
	create := func(flags uint32, back nfsv4.ChannelAttrs4) nfsv4.Nfsstat4 {
		return c.raw(&nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
			CsaClientid: eid.EirClientid, CsaSequence: eid.EirSequenceid, CsaFlags: flags,
			CsaForeChanAttrs: good, CsaBackChanAttrs: back}}).Status
	}
	if st := create(0x100, good); st != nfsv4.NFS4ERR_INVAL {
		t.Errorf("CREATE_SESSION with an unknown flag: %s, want NFS4ERR_INVAL", nfsv4.Nfsstat4_name[st])
	}
	for name, back := range map[string]nfsv4.ChannelAttrs4{
		"no slots":          {CaMaxrequestsize: 4096, CaMaxresponsesize: 4096, CaMaxoperations: 4, CaMaxrequests: 0},
		"one operation":     {CaMaxrequestsize: 4096, CaMaxresponsesize: 4096, CaMaxoperations: 1, CaMaxrequests: 1},
		"16-byte requests":  {CaMaxrequestsize: 16, CaMaxresponsesize: 4096, CaMaxoperations: 4, CaMaxrequests: 1},
		"16-byte responses": {CaMaxrequestsize: 4096, CaMaxresponsesize: 16, CaMaxoperations: 4, CaMaxrequests: 1},
	} {
		if st := create(0, back); st != nfsv4.NFS4ERR_TOOSMALL {
			t.Errorf("CREATE_SESSION with a back channel of %s: %s, want NFS4ERR_TOOSMALL", name, nfsv4.Nfsstat4_name[st])
		}
	}
	if st := create(nfsv4.CREATE_SESSION4_FLAG_CONN_BACK_CHAN, good); st != nfsv4.NFS4_OK {
		t.Errorf("CREATE_SESSION with good attributes: %s", nfsv4.Nfsstat4_name[st])
	}
}
