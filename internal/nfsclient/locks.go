package nfsclient

import (
	"context"
	"errors"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Byte-range locks (RFC 8881 §18.10-18.12). Each OpenFile has its own
// lock-owner, created on its first LOCK: that LOCK names the new owner
// with open_to_lock_owner4 (the open stateid and, on 4.0, the open-owner's
// seqid); later ones use exist_lock_owner4 with the lock stateid the
// server returned. Locks on two OpenFiles therefore conflict like locks of
// two processes.

// LockLength is the length meaning "to the end of the file".
const LockLength = ^uint64(0)

// Lock takes a byte-range lock of type typ (READ_LT, WRITE_LT, or the
// blocking variants, which this client does not retry) on f. A conflict
// is a *StatusError with Status NFS4ERR_DENIED and Denied set.
func (c *Client) Lock(ctx context.Context, f *OpenFile, typ nfsv4.NfsLockType4, off, length uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var locker nfsv4.Locker4
	var seq ownerSeq
	if !f.locked {
		if f.lockOwner == nil {
			f.lockOwner = c.NewOwner()
		}
		var seqids []uint32
		seq, seqids = c.lockOwners(f.Owner, f.lockOwner)
		locker = &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{
			OpenSeqid: seqids[0], OpenStateid: f.Stateid,
			LockSeqid: seqids[1], LockOwner: f.lockOwner.stateOwner(c),
		}}
	} else {
		var seqids []uint32
		seq, seqids = c.lockOwners(f.lockOwner)
		locker = &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{
			LockStateid: f.lockStateid, LockSeqid: seqids[0],
		}}
	}
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{
		Locktype: typ, Offset: off, Length: length, Locker: locker,
	}})
	seq.done(res, err, 1)
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_LOCK](res, 1)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.Lock4res_NFS4_OK](r.Oplock)
	if err != nil {
		return err
	}
	f.lockStateid, f.locked = ok.Resok4.LockStateid, true
	return nil
}

// LockT tests whether f's lock-owner could take the lock. It returns the
// conflicting lock, or nil if there is none.
func (c *Client) LockT(ctx context.Context, f *OpenFile, typ nfsv4.NfsLockType4, off, length uint64) (*nfsv4.Lock4denied, error) {
	f.mu.Lock()
	if f.lockOwner == nil {
		f.lockOwner = c.NewOwner()
	}
	owner := f.lockOwner.stateOwner(c)
	f.mu.Unlock()
	_, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{
		Locktype: typ, Offset: off, Length: length, Owner: owner,
	}})
	var se *StatusError
	if errors.As(err, &se) && se.Status == nfsv4.NFS4ERR_DENIED && se.Denied != nil {
		return se.Denied, nil
	}
	return nil, err
}

// LockU releases a byte range locked through f.
func (c *Client) LockU(ctx context.Context, f *OpenFile, typ nfsv4.NfsLockType4, off, length uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.locked {
		return &StatusError{Op: nfsv4.OP_LOCKU, Status: nfsv4.NFS4ERR_BAD_STATEID}
	}
	seq, seqids := c.lockOwners(f.lockOwner)
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{
		Locktype: typ, Seqid: seqids[0], LockStateid: f.lockStateid, Offset: off, Length: length,
	}})
	seq.done(res, err, 1)
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_LOCKU](res, 1)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.Locku4res_NFS4_OK](r.Oplocku)
	if err != nil {
		return err
	}
	f.lockStateid = ok.LockStateid
	return nil
}

// LockStateid returns f's lock stateid and whether it has one.
func (f *OpenFile) LockStateid() (nfsv4.Stateid4, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lockStateid, f.locked
}

// Seek finds the next data (NFS4_CONTENT_DATA) or hole
// (NFS4_CONTENT_HOLE) at or after off (SEEK, NFSv4.2).
func (c *Client) Seek(ctx context.Context, f *OpenFile, off uint64, what nfsv4.DataContent4) (offset uint64, eof bool, err error) {
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_SEEK{Opseek: nfsv4.Seek4args{
		SaStateid: f.Stateid, SaOffset: off, SaWhat: what,
	}})
	if err != nil {
		return 0, false, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_SEEK](res, 1)
	if err != nil {
		return 0, false, err
	}
	ok, err := unionOK[*nfsv4.Seek4res_NFS4_OK](r.Opseek)
	if err != nil {
		return 0, false, err
	}
	return ok.Resok4.SrOffset, ok.Resok4.SrEof, nil
}

// Allocate reserves space for [off, off+length) (ALLOCATE, NFSv4.2).
func (c *Client) Allocate(ctx context.Context, f *OpenFile, off, length uint64) error {
	_, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_ALLOCATE{Opallocate: nfsv4.Allocate4args{
		AaStateid: f.Stateid, AaOffset: off, AaLength: length,
	}})
	return err
}

// Deallocate punches a hole over [off, off+length) (DEALLOCATE, NFSv4.2).
func (c *Client) Deallocate(ctx context.Context, f *OpenFile, off, length uint64) error {
	_, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_DEALLOCATE{Opdeallocate: nfsv4.Deallocate4args{
		DaStateid: f.Stateid, DaOffset: off, DaLength: length,
	}})
	return err
}

// TestStateids asks the server about each stateid (TEST_STATEID,
// NFSv4.1+) and returns one status per stateid.
func (c *Client) TestStateids(ctx context.Context, stateids ...nfsv4.Stateid4) ([]nfsv4.Nfsstat4, error) {
	res, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_TEST_STATEID{OptestStateid: nfsv4.TestStateid4args{TsStateids: stateids}})
	if err != nil {
		return nil, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_TEST_STATEID](res, 0)
	if err != nil {
		return nil, err
	}
	ok, err := unionOK[*nfsv4.TestStateid4res_NFS4_OK](r.OptestStateid)
	if err != nil {
		return nil, err
	}
	return ok.TsrResok4.TsrStatusCodes, nil
}

// FreeStateid frees a lock stateid with no locks or a revoked stateid
// (FREE_STATEID, NFSv4.1+).
func (c *Client) FreeStateid(ctx context.Context, stateid nfsv4.Stateid4) error {
	_, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_FREE_STATEID{OpfreeStateid: nfsv4.FreeStateid4args{FsaStateid: stateid}})
	return err
}
