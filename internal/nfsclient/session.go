package nfsclient

import (
	"context"
	"fmt"
	"sync"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// session is an NFSv4.1 session (RFC 8881 §2.10) with its fore channel
// slot table. Each slot carries one request at a time; the sequence id
// of a slot's next new request is one more than its last (RFC 8881
// §2.10.6.1), and a retransmission reuses the last one, which the server
// answers from its reply cache.
type session struct {
	id    nfsv4.Sessionid4
	fore  nfsv4.ChannelAttrs4
	flags uint32

	mu          sync.Mutex
	busy        []bool         // guarded by mu
	seqid       []uint32       // guarded by mu; last sequence id used per slot
	last        []*sentRequest // guarded by mu; last request per slot
	lastSlot    int            // guarded by mu; slot of the latest completed call, -1 if none
	statusFlags uint32         // guarded by mu; sr_status_flags of the latest SEQUENCE
	freed       chan struct{}  // guarded by mu; closed and replaced when a slot frees
}

// sentRequest is what a retransmission must repeat.
type sentRequest struct {
	ops       []nfsv4.NfsArgop4
	cacheThis bool
}

func newSession(id nfsv4.Sessionid4, fore nfsv4.ChannelAttrs4, flags uint32, slots int) *session {
	return &session{
		id: id, fore: fore, flags: flags,
		busy:     make([]bool, slots),
		seqid:    make([]uint32, slots),
		last:     make([]*sentRequest, slots),
		lastSlot: -1,
		freed:    make(chan struct{}),
	}
}

// acquire takes slot want, or any free slot if want < 0, waiting as needed.
func (s *session) acquire(ctx context.Context, want int) (int, error) {
	for {
		s.mu.Lock()
		if want >= len(s.busy) {
			s.mu.Unlock()
			return -1, fmt.Errorf("nfsclient: slot %d beyond the session's %d slots", want, len(s.busy))
		}
		for i := range s.busy {
			if (want < 0 || i == want) && !s.busy[i] {
				s.busy[i] = true
				s.mu.Unlock()
				return i, nil
			}
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
}

// release frees slot. If the server accepted the SEQUENCE (advanced),
// seqid becomes the slot's last sequence id and req its last request.
func (s *session) release(slot int, seqid uint32, advanced bool, req *sentRequest, statusFlags uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[slot] = false
	if advanced {
		s.seqid[slot] = seqid
		s.last[slot] = req
		s.lastSlot = slot
		s.statusFlags = statusFlags
	}
	close(s.freed)
	s.freed = make(chan struct{})
}

// call sends ops behind a SEQUENCE on a slot (want, or any if want < 0).
// A retransmission resends the slot's last request with its last
// sequence id and leaves the slot's state as it was. If ctx ends before
// the reply, the slot stays taken until the reply comes or the connection
// fails, so that its sequence id stays in step with the server.
func (s *session) call(ctx context.Context, c *Client, want int, retransmit bool, ops []nfsv4.NfsArgop4) (*nfsv4.Compound4res, error) {
	slot, err := s.acquire(ctx, want)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	seqid := s.seqid[slot] + 1
	req := &sentRequest{ops: ops, cacheThis: wantsCache(ops)}
	if retransmit {
		seqid = s.seqid[slot]
		req = s.last[slot]
	}
	highest := uint32(len(s.busy) - 1)
	s.mu.Unlock()
	if req == nil {
		s.release(slot, 0, false, nil, 0)
		return nil, fmt.Errorf("nfsclient: nothing sent on slot %d to retransmit", slot)
	}

	seq := &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{
		SaSessionid: s.id, SaSequenceid: seqid, SaSlotid: uint32(slot),
		SaHighestSlotid: highest, SaCachethis: req.cacheThis,
	}}
	all := append([]nfsv4.NfsArgop4{seq}, req.ops...)
	cl, err := c.conn.startCompound(ctx, c.cfg.MinorVersion, tagFromContext(ctx), all)
	if err != nil {
		s.release(slot, 0, false, nil, 0)
		return nil, err
	}
	finish := func() (*nfsv4.Compound4res, error) {
		var res *nfsv4.Compound4res
		body, err := cl.result()
		if err == nil {
			res, err = decodeCompound(body)
		}
		advanced, flags := false, uint32(0)
		if err == nil && len(res.Resarray) > 0 {
			if r, ok := res.Resarray[0].(*nfsv4.NfsResop4_OP_SEQUENCE); ok {
				if ok, isOK := r.Opsequence.(*nfsv4.Sequence4res_NFS4_OK); isOK {
					advanced, flags = true, ok.SrResok4.SrStatusFlags
				}
			}
		}
		s.release(slot, seqid, advanced, req, flags)
		return res, err
	}
	select {
	case <-cl.done:
		return finish()
	case <-ctx.Done():
		go finish()
		return nil, ctx.Err()
	}
}

// wantsCache says whether to set sa_cachethis: yes unless every operation
// is one that can safely run twice.
func wantsCache(ops []nfsv4.NfsArgop4) bool {
	for _, op := range ops {
		switch op.GetArgop() {
		case nfsv4.OP_PUTFH, nfsv4.OP_PUTROOTFH, nfsv4.OP_PUTPUBFH, nfsv4.OP_GETFH, nfsv4.OP_GETATTR,
			nfsv4.OP_LOOKUP, nfsv4.OP_LOOKUPP, nfsv4.OP_ACCESS, nfsv4.OP_READ, nfsv4.OP_READDIR,
			nfsv4.OP_READLINK, nfsv4.OP_SAVEFH, nfsv4.OP_RESTOREFH, nfsv4.OP_VERIFY, nfsv4.OP_NVERIFY,
			nfsv4.OP_SECINFO, nfsv4.OP_SECINFO_NO_NAME, nfsv4.OP_LOCKT, nfsv4.OP_SEEK,
			nfsv4.OP_TEST_STATEID, nfsv4.OP_READ_PLUS:
		default:
			return true
		}
	}
	return false
}

// SessionInfo describes the client's NFSv4.1 session.
type SessionInfo struct {
	ID          nfsv4.Sessionid4
	Flags       uint32              // csr_flags
	ForeChannel nfsv4.ChannelAttrs4 // as granted by the server
	Slots       int                 // slots in use: min(asked, granted)
	ExchangeID  nfsv4.ExchangeId4resok
}

// Session describes the session; ok is false on NFSv4.0.
func (c *Client) Session() (info SessionInfo, ok bool) {
	if c.sess == nil {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: c.sess.id, Flags: c.sess.flags, ForeChannel: c.sess.fore,
		Slots: len(c.sess.busy), ExchangeID: c.exchange}, true
}

// SequenceStatusFlags returns sr_status_flags from the latest successful
// SEQUENCE (SEQ4_STATUS_* bits), e.g. to see lease or state trouble.
func (c *Client) SequenceStatusFlags() uint32 {
	if c.sess == nil {
		return 0
	}
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.sess.statusFlags
}

// DoOnSlot is DoCompound on a given slot of the session's table.
func (c *Client) DoOnSlot(ctx context.Context, slot uint32, ops ...nfsv4.NfsArgop4) (*nfsv4.Compound4res, error) {
	if c.sess == nil {
		return nil, errNoSession
	}
	return c.sess.call(ctx, c, int(slot), false, ops)
}

// Retransmit resends the latest request that completed, on the same slot
// with the same sequence id and operations, as a client does after losing
// a reply. A server must answer it from its reply cache (or with
// NFS4ERR_RETRY_UNCACHED_REP if the request did not ask for caching)
// rather than run it again. The slot table is left unchanged.
func (c *Client) Retransmit(ctx context.Context) (*nfsv4.Compound4res, error) {
	if c.sess == nil {
		return nil, errNoSession
	}
	c.sess.mu.Lock()
	slot := c.sess.lastSlot
	c.sess.mu.Unlock()
	if slot < 0 {
		return nil, fmt.Errorf("nfsclient: no request to retransmit")
	}
	return c.sess.call(ctx, c, slot, true, nil)
}

// RetransmitSlot resends the last request completed on slot.
func (c *Client) RetransmitSlot(ctx context.Context, slot uint32) (*nfsv4.Compound4res, error) {
	if c.sess == nil {
		return nil, errNoSession
	}
	return c.sess.call(ctx, c, int(slot), true, nil)
}

// SlotSequenceID returns the last sequence id used on slot, for building
// SEQUENCE operations by hand with SequenceOp.
func (c *Client) SlotSequenceID(slot uint32) uint32 {
	if c.sess == nil || int(slot) >= len(c.sess.seqid) {
		return 0
	}
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.sess.seqid[slot]
}

// SequenceOp builds a SEQUENCE for this session with any slot and
// sequence id, for hand-built compounds sent with Compound (misordered or
// replayed sequence ids, slots beyond the table). It does not touch the
// slot table; do not use a slot that concurrent calls may be using.
func (c *Client) SequenceOp(slot, seqid uint32, cacheThis bool) *nfsv4.NfsArgop4_OP_SEQUENCE {
	var id nfsv4.Sessionid4
	highest := uint32(0)
	if c.sess != nil {
		id, highest = c.sess.id, uint32(len(c.sess.busy)-1)
	}
	return &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{
		SaSessionid: id, SaSequenceid: seqid, SaSlotid: slot, SaHighestSlotid: highest, SaCachethis: cacheThis,
	}}
}

var errNoSession = fmt.Errorf("nfsclient: NFSv4.0 client has no session")

// exchangeID establishes the client ID (RFC 8881 §18.35), asking for no
// pNFS role and no state protection.
func (c *Client) exchangeID(ctx context.Context) error {
	op := &nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
		EiaClientowner:  nfsv4.ClientOwner4{CoVerifier: c.cfg.Verifier, CoOwnerid: []byte(c.cfg.OwnerID)},
		EiaFlags:        c.cfg.ExchangeIDFlags,
		EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{},
		EiaClientImplId: []nfsv4.NfsImplId4{{NiiDomain: "bucketfs", NiiName: "bucketfs nfsclient"}},
	}}
	res, err := c.unsequenced(ctx, op)
	if err != nil {
		return err
	}
	r, err := unionOK[*nfsv4.ExchangeId4res_NFS4_OK](res[0].(*nfsv4.NfsResop4_OP_EXCHANGE_ID).OpexchangeId)
	if err != nil {
		return err
	}
	c.exchange = r.EirResok4
	c.clientID = r.EirResok4.EirClientid
	return nil
}

// createSession creates the session (RFC 8881 §18.36) with a fore
// channel only: no CONN_BACK_CHAN flag, as this client takes no callbacks.
func (c *Client) createSession(ctx context.Context) error {
	op := &nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{
		CsaClientid: c.clientID,
		CsaSequence: c.exchange.EirSequenceid,
		CsaForeChanAttrs: nfsv4.ChannelAttrs4{
			CaMaxrequestsize:        c.cfg.MaxRequestSize,
			CaMaxresponsesize:       c.cfg.MaxResponseSize,
			CaMaxresponsesizeCached: c.cfg.MaxResponseSizeCached,
			CaMaxoperations:         c.cfg.MaxOperations,
			CaMaxrequests:           c.cfg.Slots,
		},
		CsaBackChanAttrs: nfsv4.ChannelAttrs4{
			CaMaxrequestsize: 4096, CaMaxresponsesize: 4096, CaMaxoperations: 2, CaMaxrequests: 1,
		},
		CsaCbProgram: 0x40000000,
		CsaSecParms:  []nfsv4.CallbackSecParms4{&nfsv4.CallbackSecParms4_AUTH_NONE{}},
	}}
	res, err := c.unsequenced(ctx, op)
	if err != nil {
		return err
	}
	r, err := unionOK[*nfsv4.CreateSession4res_NFS4_OK](res[0].(*nfsv4.NfsResop4_OP_CREATE_SESSION).OpcreateSession)
	if err != nil {
		return err
	}
	ok := r.CsrResok4
	slots := min(c.cfg.Slots, ok.CsrForeChanAttrs.CaMaxrequests)
	if slots == 0 {
		return fmt.Errorf("nfsclient: CREATE_SESSION granted no slots")
	}
	c.sess = newSession(ok.CsrSessionid, ok.CsrForeChanAttrs, ok.CsrFlags, int(slots))
	return nil
}

// unsequenced sends ops without SEQUENCE and checks the reply.
func (c *Client) unsequenced(ctx context.Context, ops ...nfsv4.NfsArgop4) ([]nfsv4.NfsResop4, error) {
	res, err := c.conn.Compound(ctx, c.cfg.MinorVersion, tagFromContext(ctx), ops)
	if err != nil {
		return nil, err
	}
	return checkCompound(res, ops, false)
}

// ReclaimComplete tells the server this client has no state to reclaim
// (RFC 8881 §18.51), which a 4.1 server needs before allowing opens.
func (c *Client) ReclaimComplete(ctx context.Context) error {
	_, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_RECLAIM_COMPLETE{OpreclaimComplete: nfsv4.ReclaimComplete4args{}})
	return err
}

// DestroySession destroys the session (RFC 8881 §18.37), sent as the only
// operation of its compound. The slot table is unusable afterwards.
func (c *Client) DestroySession(ctx context.Context) error {
	if c.sess == nil {
		return errNoSession
	}
	_, err := c.unsequenced(ctx, &nfsv4.NfsArgop4_OP_DESTROY_SESSION{
		OpdestroySession: nfsv4.DestroySession4args{DsaSessionid: c.sess.id}})
	return err
}

// DestroyClientID destroys the client ID (RFC 8881 §18.50), sent as the
// only operation of its compound.
func (c *Client) DestroyClientID(ctx context.Context) error {
	_, err := c.unsequenced(ctx, &nfsv4.NfsArgop4_OP_DESTROY_CLIENTID{
		OpdestroyClientid: nfsv4.DestroyClientid4args{DcaClientid: c.clientID}})
	return err
}
