package nfs4

import (
	"crypto/rand"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// The NFSv4.0 client operations (RFC 7530 16.33, 16.34, 16.29). A 4.0
// client has no session: its lease is renewed by RENEW and by every
// operation that names its state.

func (q *request) setclientid(a *nfsv4.Setclientid4args) nfsv4.Setclientid4res {
	key := "4.0:" + string(a.Client.Id)
	var confirm [8]byte
	rand.Read(confirm[:])
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	cl := t.confirmed[key]
	if cl != nil && cl.principal != q.principal {
		// Another principal's client record: not to be taken over
		// while it holds state (RFC 7530 16.33.5). Without state it is
		// replaced when this principal's record is confirmed.
		if cl.holdsState() {
			return &nfsv4.Setclientid4res_NFS4ERR_CLID_INUSE{}
		}
		cl = nil
	}
	if p := t.grace.reclaimable[key]; p != "" && p != q.principal && t.inGrace(time.Now()) {
		// Nor one recorded for reclaim.
		return &nfsv4.Setclientid4res_NFS4ERR_CLID_INUSE{}
	}
	if cl == nil || cl.verifier != a.Client.Verifier {
		if old := t.unconfirmed[key]; old != nil {
			t.removeClient(old)
		}
		cl = q.s.newClient(key, a.Client.Verifier, false)
		cl.principal = q.principal
		t.unconfirmed[key] = cl
	}
	cl.confirmVerf = confirm
	cl.renew()
	return &nfsv4.Setclientid4res_NFS4_OK{Resok4: nfsv4.Setclientid4resok{
		Clientid: cl.id, SetclientidConfirm: confirm}}
}

func (q *request) setclientidConfirm(a *nfsv4.SetclientidConfirm4args) nfsv4.Nfsstat4 {
	t := q.s.state
	t.mu.Lock()
	cl := t.clients[a.Clientid]
	if cl == nil || cl.minor41 || cl.confirmVerf != a.SetclientidConfirm {
		t.mu.Unlock()
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	// Only the principal that made the record confirms it, and not over
	// another principal's record that gained state since the
	// SETCLIENTID (RFC 7530 16.34.5).
	prev := t.confirmed[cl.key]
	if cl.principal != q.principal ||
		prev != nil && prev != cl && prev.principal != cl.principal && prev.holdsState() {
		t.mu.Unlock()
		return nfsv4.NFS4ERR_CLID_INUSE
	}
	cl.renew()
	oldID, old := t.confirm(cl)
	t.mu.Unlock()
	if oldID != 0 {
		if prev.principal != cl.principal {
			q.s.forgetClient(prev)
		}
		q.s.releaseClient(oldID, old)
	}
	return nfsv4.NFS4_OK
}

func (q *request) renew(id uint64) nfsv4.Nfsstat4 {
	t := q.s.state
	t.mu.Lock()
	defer t.mu.Unlock()
	cl := t.clients[id]
	if cl == nil || !cl.confirmed || cl.minor41 {
		return nfsv4.NFS4ERR_STALE_CLIENTID
	}
	cl.renew()
	return nfsv4.NFS4_OK
}

// clientFor returns the client an open or lock owner belongs to: the
// session's in 4.1, the confirmed 4.0 client named by id otherwise.
// Requires the table mutex.
func (q *request) clientFor(id uint64) (*client, nfsv4.Nfsstat4) {
	if q.minor >= 1 {
		if q.client == nil {
			return nil, nfsv4.NFS4ERR_OP_NOT_IN_SESSION
		}
		return q.client, nfsv4.NFS4_OK
	}
	cl := q.s.state.clients[id]
	if cl == nil || cl.minor41 {
		return nil, nfsv4.NFS4ERR_STALE_CLIENTID
	}
	if !cl.confirmed {
		return nil, nfsv4.NFS4ERR_STALE_CLIENTID
	}
	cl.renew()
	return cl, nfsv4.NFS4_OK
}
