package nfsclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	"github.com/buildbarn/go-xdr/pkg/rpcserver"
)

// fakeServer is a stand-in NFSv4 server for this package's unit tests,
// built on go-xdr's rpcserver. It answers just enough of the protocol, in
// just enough detail, to check what the client sends: sessions with a
// slot table and reply cache, the 4.0 client ID and owner seqids, and a
// tiny canned tree. The real server (internal/frontend/nfs4) is tested
// on its own, and against this client, elsewhere.
type fakeServer struct {
	addr string

	mu         sync.Mutex
	creds      []rpcv2.AuthsysParms        // AUTH_SYS credentials seen
	opCount    map[nfsv4.NfsOpnum4]int     // operations executed (not replayed)
	exchange   *nfsv4.ExchangeId4args      // last EXCHANGE_ID
	createSess *nfsv4.CreateSession4args   // last CREATE_SESSION
	grantSlots uint32                      // ca_maxrequests granted
	sessionID  nfsv4.Sessionid4            // the one session
	slots      []fakeSlot                  // its slot table
	seqOnly    int                         // SEQUENCE-only compounds (lease renewals)
	setclient  map[uint64][8]byte          // 4.0: unconfirmed client IDs
	openSeq    map[string]uint32           // 4.0: next seqid per open-owner
	nodes      map[string]*fakeNode        // by filehandle
	nextID     uint64                      // fileids, client IDs, stateids
	pageSize   int                         // READDIR entries per reply
	denyAuth   bool                        // refuse AUTH_NONE
	lastOwners map[nfsv4.NfsOpnum4][]byte  // owner names seen per op
	stateids   map[[12]byte]nfsv4.Stateid4 // open stateids handed out
}

type fakeSlot struct {
	seqid  uint32
	reply  *nfsv4.Compound4res
	cached bool
}

type fakeNode struct {
	fh       string
	fileid   uint64
	typ      nfsv4.NfsFtype4
	mode     uint32
	data     []byte
	children map[string]string // name -> fh, kept in insertion order by names
	names    []string
}

type credKey struct{}

// fakeAuth records AUTH_SYS credentials and can refuse AUTH_NONE.
type fakeAuth struct{ s *fakeServer }

func (a fakeAuth) Authenticate(ctx context.Context, cred, verf *rpcv2.OpaqueAuth) (context.Context, rpcv2.OpaqueAuth, rpcv2.AuthStat) {
	none := rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}
	switch cred.Flavor {
	case rpcv2.AUTH_SYS:
		var p rpcv2.AuthsysParms
		if _, err := p.ReadFrom(bytes.NewReader(cred.Body)); err != nil {
			return ctx, none, rpcv2.AUTH_BADCRED
		}
		a.s.mu.Lock()
		a.s.creds = append(a.s.creds, p)
		a.s.mu.Unlock()
		return context.WithValue(ctx, credKey{}, p), none, rpcv2.AUTH_OK
	case rpcv2.AUTH_NONE:
		a.s.mu.Lock()
		deny := a.s.denyAuth
		a.s.mu.Unlock()
		if deny {
			return ctx, none, rpcv2.AUTH_TOOWEAK
		}
		return ctx, none, rpcv2.AUTH_OK
	}
	return ctx, none, rpcv2.AUTH_BADCRED
}

// newFakeServer starts a fake server on a loopback port; t.Cleanup stops it.
func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	s := &fakeServer{
		opCount: map[nfsv4.NfsOpnum4]int{}, grantSlots: 8, setclient: map[uint64][8]byte{},
		openSeq: map[string]uint32{}, nodes: map[string]*fakeNode{}, pageSize: 2,
		lastOwners: map[nfsv4.NfsOpnum4][]byte{}, stateids: map[[12]byte]nfsv4.Stateid4{},
	}
	s.addNode("", "", nfsv4.NF4DIR, nil)
	dir := s.addNode("/", "dir", nfsv4.NF4DIR, nil)
	s.addNode(dir.fh, "file", nfsv4.NF4REG, bytes.Repeat([]byte("0123456789"), 1000))
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		s.addNode(dir.fh, n, nfsv4.NF4REG, nil)
	}
	srv := rpcserver.NewServer(map[uint32]rpcserver.Service{
		nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER: nfsv4.NewNfs4ProgramService(s),
	}, fakeAuth{s})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(nc, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.HandleConnection(nc, nc)
				nc.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return s
}

// addNode adds a node under parent (by fh); the root has fh "/".
func (s *fakeServer) addNode(parent, name string, typ nfsv4.NfsFtype4, data []byte) *fakeNode {
	s.nextID++
	n := &fakeNode{fh: "/", fileid: s.nextID, typ: typ, mode: 0o644, data: data}
	if parent != "" {
		n.fh = parent + name + "/"
		p := s.nodes[parent]
		if p.children == nil {
			p.children = map[string]string{}
		}
		p.children[name] = n.fh
		p.names = append(p.names, name)
	}
	if typ == nfsv4.NF4DIR {
		n.mode = 0o755
	}
	s.nodes[n.fh] = n
	return n
}

func (s *fakeServer) count(op nfsv4.NfsOpnum4) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opCount[op]
}

func (s *fakeServer) NfsV4Nfsproc4Null(ctx context.Context) error { return nil }

// NfsV4Nfsproc4Compound runs a compound. A tag "sleep:<duration>" delays
// the reply, for tests of concurrency and cancellation.
func (s *fakeServer) NfsV4Nfsproc4Compound(ctx context.Context, args *nfsv4.Compound4args) (*nfsv4.Compound4res, error) {
	if d, ok := strings.CutPrefix(args.Tag, "sleep:"); ok {
		dur, _ := time.ParseDuration(d)
		time.Sleep(dur)
	}
	res := &nfsv4.Compound4res{Tag: args.Tag}
	if args.Minorversion > 2 {
		res.Status = nfsv4.NFS4ERR_MINOR_VERS_MISMATCH
		return res, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var slot *fakeSlot
	st := &fakeState{}
	for i, op := range args.Argarray {
		if seq, ok := op.(*nfsv4.NfsArgop4_OP_SEQUENCE); ok && i == 0 {
			r, status, sl, replay := s.sequence(&seq.Opsequence, len(args.Argarray))
			if replay != nil {
				return replay, nil
			}
			slot = sl
			res.Resarray = append(res.Resarray, &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: r})
			if status != nfsv4.NFS4_OK {
				res.Status = status
				return res, nil
			}
			continue
		}
		r, status := s.exec(st, op)
		s.opCount[op.GetArgop()]++
		res.Resarray = append(res.Resarray, r)
		if status != nfsv4.NFS4_OK {
			res.Status = status
			break
		}
	}
	if slot != nil {
		slot.reply = res
	}
	return res, nil
}

// sequence checks a SEQUENCE against the slot table (RFC 8881 §2.10.6.1).
// It returns a cached reply for a retransmission.
func (s *fakeServer) sequence(a *nfsv4.Sequence4args, nops int) (nfsv4.Sequence4res, nfsv4.Nfsstat4, *fakeSlot, *nfsv4.Compound4res) {
	fail := func(st nfsv4.Nfsstat4) (nfsv4.Sequence4res, nfsv4.Nfsstat4, *fakeSlot, *nfsv4.Compound4res) {
		return &nfsv4.Sequence4res_default{SrStatus: st}, st, nil, nil
	}
	if s.slots == nil || a.SaSessionid != s.sessionID {
		return fail(nfsv4.NFS4ERR_BADSESSION)
	}
	if int(a.SaSlotid) >= len(s.slots) {
		return fail(nfsv4.NFS4ERR_BADSLOT)
	}
	sl := &s.slots[a.SaSlotid]
	switch a.SaSequenceid {
	case sl.seqid:
		if !sl.cached || sl.reply == nil {
			return fail(nfsv4.NFS4ERR_RETRY_UNCACHED_REP)
		}
		return nil, 0, nil, sl.reply
	case sl.seqid + 1:
	default:
		return fail(nfsv4.NFS4ERR_SEQ_MISORDERED)
	}
	sl.seqid, sl.cached, sl.reply = a.SaSequenceid, a.SaCachethis, nil
	if nops == 1 {
		s.seqOnly++
	}
	return &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{
		SrSessionid: a.SaSessionid, SrSequenceid: a.SaSequenceid, SrSlotid: a.SaSlotid,
		SrHighestSlotid: uint32(len(s.slots) - 1), SrTargetHighestSlotid: uint32(len(s.slots) - 1),
	}}, nfsv4.NFS4_OK, sl, nil
}

// fakeAttrs encodes the attributes the fake supports that mask asks for,
// by hand rather than with the package's encoder, so that tests compare
// the decoder with an independent encoding.
func fakeAttrs(n *fakeNode, mask []uint32) nfsv4.Fattr4 {
	var vals []byte
	var out []uint32
	u32 := func(v uint32) { vals = binary.BigEndian.AppendUint32(vals, v) }
	u64 := func(v uint64) { vals = binary.BigEndian.AppendUint64(vals, v) }
	set := func(attr uint32) bool {
		if !BitmapHas(mask, attr) {
			return false
		}
		for len(out) <= int(attr/32) {
			out = append(out, 0)
		}
		out[attr/32] |= 1 << (attr % 32)
		return true
	}
	if set(nfsv4.FATTR4_TYPE) {
		u32(uint32(n.typ))
	}
	if set(nfsv4.FATTR4_CHANGE) {
		u64(n.fileid * 1000)
	}
	if set(nfsv4.FATTR4_SIZE) {
		u64(uint64(len(n.data)))
	}
	if set(nfsv4.FATTR4_LEASE_TIME) {
		u32(90)
	}
	if set(nfsv4.FATTR4_FILEID) {
		u64(n.fileid)
	}
	if set(nfsv4.FATTR4_MODE) {
		u32(n.mode)
	}
	if set(nfsv4.FATTR4_NUMLINKS) {
		u32(1)
	}
	if set(nfsv4.FATTR4_OWNER) {
		vals = append(vals, 0, 0, 0, 4, '1', '0', '0', '0')
	}
	if set(nfsv4.FATTR4_OWNER_GROUP) {
		vals = append(vals, 0, 0, 0, 3, '1', '0', '0', 0)
	}
	if set(nfsv4.FATTR4_TIME_MODIFY) {
		u64(1700000000)
		u32(500)
	}
	return nfsv4.Fattr4{Attrmask: out, AttrVals: vals}
}
