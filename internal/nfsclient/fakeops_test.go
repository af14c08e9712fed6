package nfsclient

import (
	"encoding/binary"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// fakeState is one compound's current and saved filehandles.
type fakeState struct{ cur, saved string }

// exec runs one operation of the fake server. Requires s.mu.
func (s *fakeServer) exec(st *fakeState, op nfsv4.NfsArgop4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	node := s.nodes[st.cur]
	needFH := func() nfsv4.Nfsstat4 {
		if node == nil {
			return nfsv4.NFS4ERR_NOFILEHANDLE
		}
		return nfsv4.NFS4_OK
	}
	switch a := op.(type) {
	case *nfsv4.NfsArgop4_OP_EXCHANGE_ID:
		s.exchange = &a.OpexchangeId
		s.nextID++
		return &nfsv4.NfsResop4_OP_EXCHANGE_ID{OpexchangeId: &nfsv4.ExchangeId4res_NFS4_OK{EirResok4: nfsv4.ExchangeId4resok{
			EirClientid: s.nextID, EirSequenceid: 7, EirFlags: nfsv4.EXCHGID4_FLAG_USE_NON_PNFS,
			EirStateProtect: &nfsv4.StateProtect4R_SP4_NONE{},
			EirServerOwner:  nfsv4.ServerOwner4{SoMajorId: []byte("fake")}, EirServerScope: []byte("fake"),
		}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_CREATE_SESSION:
		if s.exchange == nil || a.OpcreateSession.CsaSequence != 7 {
			return &nfsv4.NfsResop4_OP_CREATE_SESSION{OpcreateSession: &nfsv4.CreateSession4res_default{
				CsrStatus: nfsv4.NFS4ERR_SEQ_MISORDERED}}, nfsv4.NFS4ERR_SEQ_MISORDERED
		}
		s.createSess = &a.OpcreateSession
		fore := a.OpcreateSession.CsaForeChanAttrs
		fore.CaMaxrequests = min(fore.CaMaxrequests, s.grantSlots)
		s.sessionID = nfsv4.Sessionid4{1, 2, 3}
		s.slots = make([]fakeSlot, fore.CaMaxrequests)
		return &nfsv4.NfsResop4_OP_CREATE_SESSION{OpcreateSession: &nfsv4.CreateSession4res_NFS4_OK{CsrResok4: nfsv4.CreateSession4resok{
			CsrSessionid: s.sessionID, CsrSequence: 7, CsrForeChanAttrs: fore,
			CsrBackChanAttrs: a.OpcreateSession.CsaBackChanAttrs,
		}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE:
		return &nfsv4.NfsResop4_OP_RECLAIM_COMPLETE{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_DESTROY_SESSION:
		s.slots = nil
		return &nfsv4.NfsResop4_OP_DESTROY_SESSION{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_DESTROY_CLIENTID:
		return &nfsv4.NfsResop4_OP_DESTROY_CLIENTID{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_SETCLIENTID:
		s.nextID++
		verf := [8]byte{9, 9}
		s.setclient[s.nextID] = verf
		return &nfsv4.NfsResop4_OP_SETCLIENTID{Opsetclientid: &nfsv4.Setclientid4res_NFS4_OK{Resok4: nfsv4.Setclientid4resok{
			Clientid: s.nextID, SetclientidConfirm: verf}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM:
		if v, ok := s.setclient[a.OpsetclientidConfirm.Clientid]; !ok || v != a.OpsetclientidConfirm.SetclientidConfirm {
			return &nfsv4.NfsResop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4res{
				Status: nfsv4.NFS4ERR_STALE_CLIENTID}}, nfsv4.NFS4ERR_STALE_CLIENTID
		}
		return &nfsv4.NfsResop4_OP_SETCLIENTID_CONFIRM{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_RENEW:
		return &nfsv4.NfsResop4_OP_RENEW{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_PUTROOTFH:
		st.cur = "/"
		return &nfsv4.NfsResop4_OP_PUTROOTFH{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_PUTFH:
		if s.nodes[string(a.Opputfh.Object)] == nil {
			return &nfsv4.NfsResop4_OP_PUTFH{Opputfh: nfsv4.Putfh4res{Status: nfsv4.NFS4ERR_STALE}}, nfsv4.NFS4ERR_STALE
		}
		st.cur = string(a.Opputfh.Object)
		return &nfsv4.NfsResop4_OP_PUTFH{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_SAVEFH:
		st.saved = st.cur
		return &nfsv4.NfsResop4_OP_SAVEFH{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_GETFH:
		if e := needFH(); e != nfsv4.NFS4_OK {
			return &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_default{Status: e}}, e
		}
		return &nfsv4.NfsResop4_OP_GETFH{Opgetfh: &nfsv4.Getfh4res_NFS4_OK{Resok4: nfsv4.Getfh4resok{Object: []byte(node.fh)}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_GETATTR:
		if e := needFH(); e != nfsv4.NFS4_OK {
			return &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: &nfsv4.Getattr4res_default{Status: e}}, e
		}
		return &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: &nfsv4.Getattr4res_NFS4_OK{Resok4: nfsv4.Getattr4resok{
			ObjAttributes: fakeAttrs(node, a.Opgetattr.AttrRequest)}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_LOOKUP:
		child, ok := "", false
		if node != nil {
			child, ok = node.children[a.Oplookup.Objname]
		}
		if !ok {
			return &nfsv4.NfsResop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4res{Status: nfsv4.NFS4ERR_NOENT}}, nfsv4.NFS4ERR_NOENT
		}
		st.cur = child
		return &nfsv4.NfsResop4_OP_LOOKUP{}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_CREATE:
		if _, exists := node.children[a.Opcreate.Objname]; exists {
			return &nfsv4.NfsResop4_OP_CREATE{Opcreate: &nfsv4.Create4res_default{Status: nfsv4.NFS4ERR_EXIST}}, nfsv4.NFS4ERR_EXIST
		}
		st.cur = s.addNode(node.fh, a.Opcreate.Objname, a.Opcreate.Objtype.GetType(), nil).fh
		return &nfsv4.NfsResop4_OP_CREATE{Opcreate: &nfsv4.Create4res_NFS4_OK{}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_OPEN:
		return s.open(st, node, &a.Opopen)
	case *nfsv4.NfsArgop4_OP_OPEN_CONFIRM:
		if e := s.checkSeqid(s.lastOwners[nfsv4.OP_OPEN], a.OpopenConfirm.Seqid); e != nfsv4.NFS4_OK {
			return &nfsv4.NfsResop4_OP_OPEN_CONFIRM{OpopenConfirm: &nfsv4.OpenConfirm4res_default{Status: e}}, e
		}
		sid := a.OpopenConfirm.OpenStateid
		sid.Seqid++
		return &nfsv4.NfsResop4_OP_OPEN_CONFIRM{OpopenConfirm: &nfsv4.OpenConfirm4res_NFS4_OK{
			Resok4: nfsv4.OpenConfirm4resok{OpenStateid: sid}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_CLOSE:
		if s.slots == nil { // 4.0: the open-owner's seqid must follow on
			if e := s.checkSeqid(s.lastOwners[nfsv4.OP_OPEN], a.Opclose.Seqid); e != nfsv4.NFS4_OK {
				return &nfsv4.NfsResop4_OP_CLOSE{Opclose: &nfsv4.Close4res_default{Status: e}}, e
			}
		}
		if cur, ok := s.stateids[a.Opclose.OpenStateid.Other]; !ok || cur.Seqid > a.Opclose.OpenStateid.Seqid+1 {
			return &nfsv4.NfsResop4_OP_CLOSE{Opclose: &nfsv4.Close4res_default{Status: nfsv4.NFS4ERR_BAD_STATEID}}, nfsv4.NFS4ERR_BAD_STATEID
		}
		delete(s.stateids, a.Opclose.OpenStateid.Other)
		return &nfsv4.NfsResop4_OP_CLOSE{Opclose: &nfsv4.Close4res_NFS4_OK{}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_READ:
		off, n := a.Opread.Offset, uint64(a.Opread.Count)
		data := node.data[min(off, uint64(len(node.data))):min(off+n, uint64(len(node.data)))]
		return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{
			Data: data, Eof: off+n >= uint64(len(node.data))}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_WRITE:
		w := a.Opwrite
		if end := w.Offset + uint64(len(w.Data)); end > uint64(len(node.data)) {
			node.data = append(node.data, make([]byte, end-uint64(len(node.data)))...)
		}
		copy(node.data[w.Offset:], w.Data)
		return &nfsv4.NfsResop4_OP_WRITE{Opwrite: &nfsv4.Write4res_NFS4_OK{Resok4: nfsv4.Write4resok{
			Count: uint32(len(w.Data)), Committed: nfsv4.FILE_SYNC4, Writeverf: [8]byte{'v', 'e', 'r', 'f'}}}}, nfsv4.NFS4_OK
	case *nfsv4.NfsArgop4_OP_READDIR:
		return s.readdir(node, &a.Opreaddir)
	}
	return &nfsv4.NfsResop4_OP_ILLEGAL{Opillegal: nfsv4.Illegal4res{Status: nfsv4.NFS4ERR_NOTSUPP}}, nfsv4.NFS4ERR_NOTSUPP
}

// checkSeqid enforces a 4.0 open-owner's seqid order.
func (s *fakeServer) checkSeqid(owner []byte, seqid uint32) nfsv4.Nfsstat4 {
	want, ok := s.openSeq[string(owner)]
	if !ok || seqid != want {
		return nfsv4.NFS4ERR_BAD_SEQID
	}
	s.openSeq[string(owner)] = want + 1
	return nfsv4.NFS4_OK
}

func (s *fakeServer) open(st *fakeState, dir *fakeNode, a *nfsv4.Open4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	fail := func(e nfsv4.Nfsstat4) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
		return &nfsv4.NfsResop4_OP_OPEN{Opopen: &nfsv4.Open4res_default{Status: e}}, e
	}
	var rflags uint32
	if s.slots == nil { // 4.0: owner seqids; a new owner must confirm
		if _, known := s.openSeq[string(a.Owner.Owner)]; !known {
			s.openSeq[string(a.Owner.Owner)] = a.Seqid
			rflags |= nfsv4.OPEN4_RESULT_CONFIRM
		}
		if e := s.checkSeqid(a.Owner.Owner, a.Seqid); e != nfsv4.NFS4_OK {
			return fail(e)
		}
	}
	s.lastOwners[nfsv4.OP_OPEN] = a.Owner.Owner
	target := dir
	if c, ok := a.Claim.(*nfsv4.OpenClaim4_CLAIM_NULL); ok {
		fh, exists := dir.children[c.File]
		switch {
		case exists:
			if h, ok := a.Openhow.(*nfsv4.Openflag4_OPEN4_CREATE); ok && h.How.GetMode() == nfsv4.GUARDED4 {
				return fail(nfsv4.NFS4ERR_EXIST)
			}
			target = s.nodes[fh]
		case a.Openhow.GetOpentype() == nfsv4.OPEN4_CREATE:
			target = s.addNode(dir.fh, c.File, nfsv4.NF4REG, nil)
		default:
			return fail(nfsv4.NFS4ERR_NOENT)
		}
	}
	st.cur = target.fh
	s.nextID++
	sid := nfsv4.Stateid4{Seqid: 1}
	binary.BigEndian.PutUint64(sid.Other[:], s.nextID)
	s.stateids[sid.Other] = sid
	return &nfsv4.NfsResop4_OP_OPEN{Opopen: &nfsv4.Open4res_NFS4_OK{Resok4: nfsv4.Open4resok{
		Stateid: sid, Rflags: rflags, Delegation: &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE{},
	}}}, nfsv4.NFS4_OK
}

// readdir returns s.pageSize entries per call; cookies are 1-based
// indexes and the verifier is constant.
func (s *fakeServer) readdir(dir *fakeNode, a *nfsv4.Readdir4args) (nfsv4.NfsResop4, nfsv4.Nfsstat4) {
	verf := [8]byte{'c', 'o', 'o', 'k', 'i', 'e'}
	if a.Cookie != 0 && a.Cookieverf != verf {
		return &nfsv4.NfsResop4_OP_READDIR{Opreaddir: &nfsv4.Readdir4res_default{Status: nfsv4.NFS4ERR_NOT_SAME}}, nfsv4.NFS4ERR_NOT_SAME
	}
	var head *nfsv4.Entry4
	tail := &head
	i := int(a.Cookie)
	for ; i < len(dir.names) && i < int(a.Cookie)+s.pageSize; i++ {
		child := s.nodes[dir.children[dir.names[i]]]
		e := &nfsv4.Entry4{Cookie: uint64(i + 1), Name: dir.names[i], Attrs: fakeAttrs(child, a.AttrRequest)}
		*tail = e
		tail = &e.Nextentry
	}
	return &nfsv4.NfsResop4_OP_READDIR{Opreaddir: &nfsv4.Readdir4res_NFS4_OK{Resok4: nfsv4.Readdir4resok{
		Cookieverf: verf, Reply: nfsv4.Dirlist4{Entries: head, Eof: i >= len(dir.names)},
	}}}, nfsv4.NFS4_OK
}
