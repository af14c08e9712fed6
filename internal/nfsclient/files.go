package nfsclient

import (
	"context"
	"crypto/rand"
	"sync"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// OpenFile is the client's side of one OPEN: the file's handle, the open
// stateid and the owner that holds it, plus the lock state of the file's
// lock-owner once LOCK has been used.
type OpenFile struct {
	FH      []byte
	Stateid nfsv4.Stateid4
	// Attrs are the attributes (CommonAttrs) read in the OPEN compound.
	Attrs *Attrs
	// Rflags and Cinfo are from the OPEN result; Attrset lists the
	// attributes a create set.
	Rflags  uint32
	Cinfo   nfsv4.ChangeInfo4
	Attrset []uint32
	Owner   *Owner

	mu          sync.Mutex     // held across lock operations on the file
	lockOwner   *Owner         // guarded by mu
	lockStateid nfsv4.Stateid4 // guarded by mu; valid when locked
	locked      bool           // guarded by mu
}

// CreateMode is how OPEN creates a file (RFC 8881 §18.16.3).
type CreateMode int

const (
	// Unchecked creates the file or opens it if it exists.
	Unchecked CreateMode = iota
	// Guarded fails with NFS4ERR_EXIST if the file exists.
	Guarded
	// Exclusive creates with a verifier, so that a retried create is
	// recognised: EXCLUSIVE4_1 (with attributes) on 4.1+, EXCLUSIVE4
	// (attributes ignored) on 4.0.
	Exclusive
)

// OpenOptions are the choices of an OPEN.
type OpenOptions struct {
	// Access is OPEN4_SHARE_ACCESS_READ, _WRITE or _BOTH; 0 means BOTH.
	Access uint32
	// Deny is an OPEN4_SHARE_DENY_* value.
	Deny uint32
	// Owner is the open-owner; nil means a new one for this open.
	Owner *Owner
	// Create only: the create mode, the attributes to set (e.g.
	// Attrs{}.WithMode(0o644)) and the exclusive create verifier (zero
	// means random).
	Mode     CreateMode
	Attrs    Attrs
	Verifier [8]byte
}

// Create creates (or, for Unchecked, opens) file name in dir with OPEN4_CREATE.
func (c *Client) Create(ctx context.Context, dir []byte, name string, opts OpenOptions) (*OpenFile, error) {
	createAttrs, err := EncodeAttrs(&opts.Attrs)
	if err != nil {
		return nil, err
	}
	if opts.Mode == Exclusive && opts.Verifier == ([8]byte{}) {
		rand.Read(opts.Verifier[:])
	}
	var how nfsv4.Createhow4
	switch {
	case opts.Mode == Unchecked:
		how = &nfsv4.Createhow4_UNCHECKED4{Createattrs: createAttrs}
	case opts.Mode == Guarded:
		how = &nfsv4.Createhow4_GUARDED4{Createattrs: createAttrs}
	case c.cfg.MinorVersion == 0:
		how = &nfsv4.Createhow4_EXCLUSIVE4{Createverf: opts.Verifier}
	default:
		how = &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{
			CvaVerf: opts.Verifier, CvaAttrs: createAttrs}}
	}
	return c.open(ctx, dir, &nfsv4.Openflag4_OPEN4_CREATE{How: how},
		&nfsv4.OpenClaim4_CLAIM_NULL{File: name}, opts)
}

// Open opens the existing file name in dir (CLAIM_NULL).
func (c *Client) Open(ctx context.Context, dir []byte, name string, opts OpenOptions) (*OpenFile, error) {
	return c.open(ctx, dir, &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
		&nfsv4.OpenClaim4_CLAIM_NULL{File: name}, opts)
}

// OpenFH opens the file with handle fh (CLAIM_FH, NFSv4.1+).
func (c *Client) OpenFH(ctx context.Context, fh []byte, opts OpenOptions) (*OpenFile, error) {
	return c.open(ctx, fh, &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
		&nfsv4.OpenClaim4_CLAIM_FH{}, opts)
}

// open sends PUTFH, OPEN, GETFH, GETATTR; on 4.0 it confirms a new
// owner's open when the server asks (OPEN4_RESULT_CONFIRM).
func (c *Client) open(ctx context.Context, fh []byte, how nfsv4.Openflag4, claim nfsv4.OpenClaim4, opts OpenOptions) (*OpenFile, error) {
	if opts.Access == 0 {
		opts.Access = nfsv4.OPEN4_SHARE_ACCESS_BOTH
	}
	owner := opts.Owner
	if owner == nil {
		owner = c.NewOwner()
	}
	seq, seqids := c.lockOwners(owner)
	res, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{
		Seqid:       seqids[0],
		ShareAccess: opts.Access,
		ShareDeny:   opts.Deny,
		Owner:       owner.stateOwner(c),
		Openhow:     how,
		Claim:       claim,
	}}, getFH(), getAttr(CommonAttrs()))
	seq.advance(res, err, 1)
	var f *OpenFile
	if err == nil {
		f, err = openResult(res, owner)
	}
	if err == nil && seq.v40 && f.Rflags&nfsv4.OPEN4_RESULT_CONFIRM != 0 {
		err = c.openConfirm(ctx, f)
	}
	seq.unlock()
	if err != nil {
		return nil, err
	}
	return f, nil
}

func openResult(res []nfsv4.NfsResop4, owner *Owner) (*OpenFile, error) {
	o, err := resultAt[*nfsv4.NfsResop4_OP_OPEN](res, 1)
	if err != nil {
		return nil, err
	}
	ok, err := unionOK[*nfsv4.Open4res_NFS4_OK](o.Opopen)
	if err != nil {
		return nil, err
	}
	fh, err := fhResult(res, 2)
	if err != nil {
		return nil, err
	}
	attrs, err := attrResult(res, 3)
	if err != nil {
		return nil, err
	}
	return &OpenFile{FH: fh, Stateid: ok.Resok4.Stateid, Attrs: attrs, Rflags: ok.Resok4.Rflags,
		Cinfo: ok.Resok4.Cinfo, Attrset: ok.Resok4.Attrset, Owner: owner}, nil
}

// CloseFile closes the open (CLOSE). f.Stateid becomes the stateid the
// server returns, which on 4.1 is a special invalid one.
func (c *Client) CloseFile(ctx context.Context, f *OpenFile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq, seqids := c.lockOwners(f.Owner)
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_CLOSE{Opclose: nfsv4.Close4args{
		Seqid: seqids[0], OpenStateid: f.Stateid,
	}})
	seq.done(res, err, 1)
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_CLOSE](res, 1)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.Close4res_NFS4_OK](r.Opclose)
	if err != nil {
		return err
	}
	f.Stateid = ok.OpenStateid
	return nil
}

// OpenDowngrade reduces the open's share access and deny modes.
func (c *Client) OpenDowngrade(ctx context.Context, f *OpenFile, access, deny uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq, seqids := c.lockOwners(f.Owner)
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: nfsv4.OpenDowngrade4args{
		OpenStateid: f.Stateid, Seqid: seqids[0], ShareAccess: access, ShareDeny: deny,
	}})
	seq.done(res, err, 1)
	if err != nil {
		return err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_OPEN_DOWNGRADE](res, 1)
	if err != nil {
		return err
	}
	ok, err := unionOK[*nfsv4.OpenDowngrade4res_NFS4_OK](r.OpopenDowngrade)
	if err != nil {
		return err
	}
	f.Stateid = ok.Resok4.OpenStateid
	return nil
}

// Read reads up to n bytes at off with f's open stateid.
func (c *Client) Read(ctx context.Context, f *OpenFile, off uint64, n uint32) (data []byte, eof bool, err error) {
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{
		Stateid: f.Stateid, Offset: off, Count: n,
	}})
	if err != nil {
		return nil, false, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_READ](res, 1)
	if err != nil {
		return nil, false, err
	}
	ok, err := unionOK[*nfsv4.Read4res_NFS4_OK](r.Opread)
	if err != nil {
		return nil, false, err
	}
	return ok.Resok4.Data, ok.Resok4.Eof, nil
}

// WriteResult is what the server says about a WRITE.
type WriteResult struct {
	Count     uint32
	Committed nfsv4.StableHow4
	Verifier  [8]byte
}

// Write writes data at off with f's open stateid, asking for stability
// stable (UNSTABLE4, DATA_SYNC4 or FILE_SYNC4).
func (c *Client) Write(ctx context.Context, f *OpenFile, off uint64, data []byte, stable nfsv4.StableHow4) (WriteResult, error) {
	res, err := c.Do(ctx, putFH(f.FH), &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{
		Stateid: f.Stateid, Offset: off, Stable: stable, Data: data,
	}})
	if err != nil {
		return WriteResult{}, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_WRITE](res, 1)
	if err != nil {
		return WriteResult{}, err
	}
	ok, err := unionOK[*nfsv4.Write4res_NFS4_OK](r.Opwrite)
	if err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Count: ok.Resok4.Count, Committed: ok.Resok4.Committed, Verifier: ok.Resok4.Writeverf}, nil
}

// Commit commits unstable writes in [off, off+count) (count 0: to the end
// of the file) and returns the write verifier.
func (c *Client) Commit(ctx context.Context, fh []byte, off uint64, count uint32) ([8]byte, error) {
	res, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_COMMIT{Opcommit: nfsv4.Commit4args{Offset: off, Count: count}})
	if err != nil {
		return [8]byte{}, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_COMMIT](res, 1)
	if err != nil {
		return [8]byte{}, err
	}
	ok, err := unionOK[*nfsv4.Commit4res_NFS4_OK](r.Opcommit)
	if err != nil {
		return [8]byte{}, err
	}
	return ok.Resok4.Writeverf, nil
}

// GetAttr reads the attributes in mask (see CommonAttrs) of fh.
func (c *Client) GetAttr(ctx context.Context, fh []byte, mask []uint32) (*Attrs, error) {
	res, err := c.Do(ctx, putFH(fh), getAttr(mask))
	if err != nil {
		return nil, err
	}
	return attrResult(res, 1)
}

// SetAttr sets the attributes present in a (e.g. Attrs{}.WithMode(0o600))
// on fh with the anonymous stateid and returns the attrsset bitmap.
func (c *Client) SetAttr(ctx context.Context, fh []byte, a Attrs) ([]uint32, error) {
	return c.SetAttrStateid(ctx, fh, nfsv4.Stateid4{}, a)
}

// SetAttrStateid is SetAttr with a stateid, e.g. an open's when
// truncating a file open for writing.
func (c *Client) SetAttrStateid(ctx context.Context, fh []byte, stateid nfsv4.Stateid4, a Attrs) ([]uint32, error) {
	f, err := EncodeAttrs(&a)
	if err != nil {
		return nil, err
	}
	res, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
		Stateid: stateid, ObjAttributes: f,
	}})
	if err != nil {
		return nil, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_SETATTR](res, 1)
	if err != nil {
		return nil, err
	}
	return r.Opsetattr.Attrsset, nil
}

// Access asks which of the ACCESS4_* rights in mask the caller has on fh;
// it returns the rights the server could check and those granted.
func (c *Client) Access(ctx context.Context, fh []byte, mask uint32) (supported, granted uint32, err error) {
	res, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{Access: mask}})
	if err != nil {
		return 0, 0, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_ACCESS](res, 1)
	if err != nil {
		return 0, 0, err
	}
	ok, err := unionOK[*nfsv4.Access4res_NFS4_OK](r.Opaccess)
	if err != nil {
		return 0, 0, err
	}
	return ok.Resok4.Supported, ok.Resok4.Access, nil
}

func putFH(fh []byte) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fh}}
}

func getFH() nfsv4.NfsArgop4 { return &nfsv4.NfsArgop4_OP_GETFH{} }

func getAttr(mask []uint32) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_GETATTR{Opgetattr: nfsv4.Getattr4args{AttrRequest: mask}}
}

func fhResult(res []nfsv4.NfsResop4, i int) ([]byte, error) {
	r, err := resultAt[*nfsv4.NfsResop4_OP_GETFH](res, i)
	if err != nil {
		return nil, err
	}
	ok, err := unionOK[*nfsv4.Getfh4res_NFS4_OK](r.Opgetfh)
	if err != nil {
		return nil, err
	}
	return ok.Resok4.Object, nil
}

func attrResult(res []nfsv4.NfsResop4, i int) (*Attrs, error) {
	r, err := resultAt[*nfsv4.NfsResop4_OP_GETATTR](res, i)
	if err != nil {
		return nil, err
	}
	ok, err := unionOK[*nfsv4.Getattr4res_NFS4_OK](r.Opgetattr)
	if err != nil {
		return nil, err
	}
	return DecodeAttrs(ok.Resok4.ObjAttributes)
}
