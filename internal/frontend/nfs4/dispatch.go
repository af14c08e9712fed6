package nfs4

import (
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// dispatch runs one decoded operation (SEQUENCE excepted, see run) and
// wraps its result. Every operation is one method of request with the
// operation's arguments in and its result union out.
func (q *request) dispatch(op operation) (opResult, nfsv4.Nfsstat4) {
	if res, st, refused := q.pseudoRootGuard(op.GetArgop()); refused {
		return res, st
	}
	switch a := op.(type) {
	// Filehandles and attributes (ops_fh.go).
	case *nfsv4.NfsArgop4_OP_PUTROOTFH:
		st := q.putrootfh()
		return &nfsv4.NfsResop4_OP_PUTROOTFH{Opputrootfh: nfsv4.Putrootfh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_PUTPUBFH:
		st := q.putrootfh()
		return &nfsv4.NfsResop4_OP_PUTPUBFH{Opputpubfh: nfsv4.Putpubfh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_PUTFH:
		st := q.putfh(a.Opputfh.Object)
		return &nfsv4.NfsResop4_OP_PUTFH{Opputfh: nfsv4.Putfh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_GETFH:
		r := q.getfh()
		return &nfsv4.NfsResop4_OP_GETFH{Opgetfh: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_SAVEFH:
		st := q.savefh()
		return &nfsv4.NfsResop4_OP_SAVEFH{Opsavefh: nfsv4.Savefh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_RESTOREFH:
		st := q.restorefh()
		return &nfsv4.NfsResop4_OP_RESTOREFH{Oprestorefh: nfsv4.Restorefh4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_LOOKUP:
		st := q.lookup(a.Oplookup.Objname)
		return &nfsv4.NfsResop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_LOOKUPP:
		st := q.lookupp()
		return &nfsv4.NfsResop4_OP_LOOKUPP{Oplookupp: nfsv4.Lookupp4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_ACCESS:
		r := q.access(a.Opaccess.Access)
		return &nfsv4.NfsResop4_OP_ACCESS{Opaccess: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_GETATTR:
		r := q.getattr(a.Opgetattr.AttrRequest)
		return &nfsv4.NfsResop4_OP_GETATTR{Opgetattr: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_SETATTR:
		r := q.setattr(&a.Opsetattr)
		return &nfsv4.NfsResop4_OP_SETATTR{Opsetattr: r}, r.Status
	case *nfsv4.NfsArgop4_OP_VERIFY:
		st := q.verify(&a.Opverify.ObjAttributes, true)
		return &nfsv4.NfsResop4_OP_VERIFY{Opverify: nfsv4.Verify4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_NVERIFY:
		st := q.verify(&a.Opnverify.ObjAttributes, false)
		return &nfsv4.NfsResop4_OP_NVERIFY{Opnverify: nfsv4.Nverify4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_SECINFO:
		r := q.secinfo(a.Opsecinfo.Name)
		return &nfsv4.NfsResop4_OP_SECINFO{Opsecinfo: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_SECINFO_NO_NAME:
		r := q.secinfoNoName(a.OpsecinfoNoName)
		return &nfsv4.NfsResop4_OP_SECINFO_NO_NAME{OpsecinfoNoName: r}, r.GetStatus()

	// Names (ops_dir.go, readdir.go).
	case *nfsv4.NfsArgop4_OP_CREATE:
		r := q.create(&a.Opcreate)
		return &nfsv4.NfsResop4_OP_CREATE{Opcreate: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_REMOVE:
		r := q.remove(a.Opremove.Target)
		return &nfsv4.NfsResop4_OP_REMOVE{Opremove: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_RENAME:
		r := q.rename(&a.Oprename)
		return &nfsv4.NfsResop4_OP_RENAME{Oprename: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_LINK:
		r := q.link(a.Oplink.Newname)
		return &nfsv4.NfsResop4_OP_LINK{Oplink: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_READLINK:
		r := q.readlink()
		return &nfsv4.NfsResop4_OP_READLINK{Opreadlink: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_READDIR:
		r := q.readdir(&a.Opreaddir)
		return &nfsv4.NfsResop4_OP_READDIR{Opreaddir: r}, r.GetStatus()

	// Opens (ops_open.go).
	case *nfsv4.NfsArgop4_OP_OPEN:
		r := q.open(&a.Opopen)
		return &nfsv4.NfsResop4_OP_OPEN{Opopen: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_OPEN_CONFIRM:
		r := q.openConfirm(&a.OpopenConfirm)
		return &nfsv4.NfsResop4_OP_OPEN_CONFIRM{OpopenConfirm: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE:
		r := q.openDowngrade(&a.OpopenDowngrade)
		return &nfsv4.NfsResop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_CLOSE:
		r := q.close(&a.Opclose)
		return &nfsv4.NfsResop4_OP_CLOSE{Opclose: r}, r.GetStatus()

	// Data (ops_io.go).
	case *nfsv4.NfsArgop4_OP_READ:
		r := q.read(&a.Opread)
		return &nfsv4.NfsResop4_OP_READ{Opread: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_WRITE:
		r := q.write(&a.Opwrite)
		return &nfsv4.NfsResop4_OP_WRITE{Opwrite: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_COMMIT:
		r := q.commit(&a.Opcommit)
		return &nfsv4.NfsResop4_OP_COMMIT{Opcommit: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_SEEK:
		r := q.seek(&a.Opseek)
		return &nfsv4.NfsResop4_OP_SEEK{Opseek: r}, r.GetSaStatus()
	case *nfsv4.NfsArgop4_OP_ALLOCATE:
		st := q.allocate(a.Opallocate.AaStateid, a.Opallocate.AaOffset, a.Opallocate.AaLength, false)
		return &nfsv4.NfsResop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4res{ArStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_DEALLOCATE:
		st := q.allocate(a.Opdeallocate.DaStateid, a.Opdeallocate.DaOffset, a.Opdeallocate.DaLength, true)
		return &nfsv4.NfsResop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4res{DrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_COPY:
		r := q.copy(&a.Opcopy)
		return &nfsv4.NfsResop4_OP_COPY{Opcopy: r}, r.GetCrStatus()

	// Extended attributes, RFC 8276 (xattr.go).
	case *xattrArgs:
		return q.xattr(a)

	// Byte-range locks (ops_lock.go).
	case *nfsv4.NfsArgop4_OP_LOCK:
		r := q.lock(&a.Oplock)
		return &nfsv4.NfsResop4_OP_LOCK{Oplock: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_LOCKT:
		r := q.lockt(&a.Oplockt)
		return &nfsv4.NfsResop4_OP_LOCKT{Oplockt: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_LOCKU:
		r := q.locku(&a.Oplocku)
		return &nfsv4.NfsResop4_OP_LOCKU{Oplocku: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_RELEASE_LOCKOWNER:
		st := q.releaseLockowner(&a.OpreleaseLockowner.LockOwner)
		return &nfsv4.NfsResop4_OP_RELEASE_LOCKOWNER{OpreleaseLockowner: nfsv4.ReleaseLockowner4res{Status: st}}, st

	// Clients and sessions (session.go, ops40.go).
	case *nfsv4.NfsArgop4_OP_EXCHANGE_ID:
		r := q.exchangeID(&a.OpexchangeId)
		return &nfsv4.NfsResop4_OP_EXCHANGE_ID{OpexchangeId: r}, r.GetEirStatus()
	case *nfsv4.NfsArgop4_OP_CREATE_SESSION:
		r := q.createSession(&a.OpcreateSession)
		return &nfsv4.NfsResop4_OP_CREATE_SESSION{OpcreateSession: r}, r.GetCsrStatus()
	case *nfsv4.NfsArgop4_OP_DESTROY_SESSION:
		st := q.destroySession(a.OpdestroySession.DsaSessionid)
		return &nfsv4.NfsResop4_OP_DESTROY_SESSION{OpdestroySession: nfsv4.DestroySession4res{DsrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION:
		r := q.bindConn(&a.OpbindConnToSession)
		return &nfsv4.NfsResop4_OP_BIND_CONN_TO_SESSION{OpbindConnToSession: r}, r.GetBctsrStatus()
	case *nfsv4.NfsArgop4_OP_DESTROY_CLIENTID:
		st := q.destroyClientID(a.OpdestroyClientid.DcaClientid)
		return &nfsv4.NfsResop4_OP_DESTROY_CLIENTID{OpdestroyClientid: nfsv4.DestroyClientid4res{DcrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE:
		st := q.reclaimComplete(a.OpreclaimComplete.RcaOneFs)
		return &nfsv4.NfsResop4_OP_RECLAIM_COMPLETE{OpreclaimComplete: nfsv4.ReclaimComplete4res{RcrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_TEST_STATEID:
		r := q.testStateid(a.OptestStateid.TsStateids)
		return &nfsv4.NfsResop4_OP_TEST_STATEID{OptestStateid: r}, r.GetTsrStatus()
	case *nfsv4.NfsArgop4_OP_FREE_STATEID:
		st := q.freeStateid(a.OpfreeStateid.FsaStateid)
		return &nfsv4.NfsResop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4res{FsrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_BACKCHANNEL_CTL:
		st := q.needSession()
		return &nfsv4.NfsResop4_OP_BACKCHANNEL_CTL{OpbackchannelCtl: nfsv4.BackchannelCtl4res{BcrStatus: st}}, st
	case *nfsv4.NfsArgop4_OP_SETCLIENTID:
		r := q.setclientid(&a.Opsetclientid)
		return &nfsv4.NfsResop4_OP_SETCLIENTID{Opsetclientid: r}, r.GetStatus()
	case *nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM:
		st := q.setclientidConfirm(&a.OpsetclientidConfirm)
		return &nfsv4.NfsResop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_RENEW:
		st := q.renew(a.Oprenew.Clientid)
		return &nfsv4.NfsResop4_OP_RENEW{Oprenew: nfsv4.Renew4res{Status: st}}, st

	// Delegations are never granted: there is nothing to return.
	case *nfsv4.NfsArgop4_OP_DELEGRETURN:
		st := nfsv4.Nfsstat4(nfsv4.NFS4ERR_BAD_STATEID)
		return &nfsv4.NfsResop4_OP_DELEGRETURN{Opdelegreturn: nfsv4.Delegreturn4res{Status: st}}, st
	case *nfsv4.NfsArgop4_OP_ILLEGAL:
		st := nfsv4.Nfsstat4(nfsv4.NFS4ERR_OP_ILLEGAL)
		return &nfsv4.NfsResop4_OP_ILLEGAL{Opillegal: nfsv4.Illegal4res{Status: st}}, st
	}
	// Known but unsupported: pNFS layouts, delegations, named attributes,
	// SSV, server-side offload, READ_PLUS, CLONE, WRITE_SAME, IO_ADVISE.
	// Clients fall back on NFS4ERR_NOTSUPP.
	return rawResult{op.GetArgop(), nfsv4.NFS4ERR_NOTSUPP}, nfsv4.NFS4ERR_NOTSUPP
}
