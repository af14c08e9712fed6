package nfsclient

import (
	"context"
	"errors"
	"sync"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Owner is an open-owner or lock-owner: a name unique within the client
// and, on NFSv4.0, the owner's sequence id. NFSv4.0 requires operations
// of one owner to be sent one at a time in seqid order (RFC 7530 §9.1.7),
// so on 4.0 an owner is locked from building such an operation to reading
// its reply. On 4.1+ the session orders requests, seqids are sent as 0
// and the owner is never locked.
type Owner struct {
	Name []byte

	mu    sync.Mutex
	seqid uint32 // guarded by mu
}

// SeqID is the sequence id the owner's next seqid-bearing operation will
// carry on NFSv4.0.
func (o *Owner) SeqID() uint32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seqid
}

// stateOwner is the owner on the wire for client c.
func (o *Owner) stateOwner(c *Client) nfsv4.StateOwner4 {
	return nfsv4.StateOwner4{Clientid: c.clientID, Owner: o.Name}
}

// ownerSeq holds the owners taking part in one compound on NFSv4.0.
type ownerSeq struct {
	v40    bool
	owners []*Owner
}

// lockOwners locks the given owners (in that order) on NFSv4.0 and
// returns their current seqids; on 4.1+ it locks nothing and returns 0s.
func (c *Client) lockOwners(owners ...*Owner) (ownerSeq, []uint32) {
	seqids := make([]uint32, len(owners))
	if c.sess != nil {
		return ownerSeq{}, seqids
	}
	for i, o := range owners {
		o.mu.Lock()
		seqids[i] = o.seqid
	}
	return ownerSeq{v40: true, owners: owners}, seqids
}

// done applies the outcome of the seqid-bearing operation at index op of
// a compound (results and err as returned by Do) and unlocks the owners.
// Per RFC 7530 §9.1.7 the seqid is consumed when the operation ran,
// whatever its result, except for the errors that mean the server could
// not tell which owner or request it was. If the reply never came the
// seqid is kept, so a resend counts as a retransmission.
func (s ownerSeq) done(results []nfsv4.NfsResop4, err error, op int) {
	s.advance(results, err, op)
	s.unlock()
}

func (s ownerSeq) advance(results []nfsv4.NfsResop4, err error, op int) {
	if s.v40 && seqidConsumed(results, err, op) {
		for _, o := range s.owners {
			o.seqid++
		}
	}
}

func (s ownerSeq) unlock() {
	if !s.v40 {
		return
	}
	for i := len(s.owners) - 1; i >= 0; i-- {
		s.owners[i].mu.Unlock()
	}
}

func seqidConsumed(results []nfsv4.NfsResop4, err error, op int) bool {
	if op >= len(results) {
		return false
	}
	if op < len(results)-1 || err == nil {
		return true
	}
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Status {
	case nfsv4.NFS4ERR_STALE_CLIENTID, nfsv4.NFS4ERR_STALE_STATEID, nfsv4.NFS4ERR_BAD_STATEID,
		nfsv4.NFS4ERR_BAD_SEQID, nfsv4.NFS4ERR_BADXDR, nfsv4.NFS4ERR_RESOURCE,
		nfsv4.NFS4ERR_NOFILEHANDLE, nfsv4.NFS4ERR_MOVED:
		return false
	}
	return true
}

// setClientID establishes an NFSv4.0 client ID: SETCLIENTID then
// SETCLIENTID_CONFIRM (RFC 7530 §16.33-16.34). The callback address is a
// null one: this client takes no callbacks, so it gets no delegations.
func (c *Client) setClientID(ctx context.Context) error {
	res, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
		Client: nfsv4.NfsClientId4{Verifier: c.cfg.Verifier, Id: []byte(c.cfg.OwnerID)},
		Callback: nfsv4.CbClient4{CbProgram: 0x40000000,
			CbLocation: nfsv4.Netaddr4{NaRNetid: "tcp", NaRAddr: "0.0.0.0.0.0"}},
		CallbackIdent: 1,
	}})
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_SETCLIENTID](res, 0)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.Setclientid4res_NFS4_OK](r.Opsetclientid)
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, &nfsv4.NfsArgop4_OP_SETCLIENTID_CONFIRM{OpsetclientidConfirm: nfsv4.SetclientidConfirm4args{
		Clientid: ok.Resok4.Clientid, SetclientidConfirm: ok.Resok4.SetclientidConfirm,
	}})
	if err != nil {
		return err
	}
	c.clientID = ok.Resok4.Clientid
	return nil
}

// openConfirm confirms a new NFSv4.0 open-owner's first open (RFC 7530
// §16.18). The caller holds the owner (lockOwners).
func (c *Client) openConfirm(ctx context.Context, f *OpenFile) error {
	seqid := f.Owner.seqid
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_OPEN_CONFIRM{OpopenConfirm: nfsv4.OpenConfirm4args{
		OpenStateid: f.Stateid, Seqid: seqid,
	}})
	if seqidConsumed(res, err, 1) {
		f.Owner.seqid++
	}
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_OPEN_CONFIRM](res, 1)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.OpenConfirm4res_NFS4_OK](r.OpopenConfirm)
	if err != nil {
		return err
	}
	f.Stateid = ok.Resok4.OpenStateid
	return nil
}

// ReleaseLockOwner tells an NFSv4.0 server that f's lock-owner holds no
// more locks (RFC 7530 §16.37).
func (c *Client) ReleaseLockOwner(ctx context.Context, f *OpenFile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lockOwner == nil {
		return nil
	}
	_, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_RELEASE_LOCKOWNER{OpreleaseLockowner: nfsv4.ReleaseLockowner4args{
		LockOwner: f.lockOwner.stateOwner(c),
	}})
	if err == nil {
		f.lockOwner, f.locked = nil, false
	}
	return err
}
