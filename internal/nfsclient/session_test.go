package nfsclient

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

func dialClient(t *testing.T, s *fakeServer, cfg Config) *Client {
	t.Helper()
	c, err := Dial(context.Background(), s.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSessionSetupAsksForAForeChannelAndNoPNFS(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 1, Slots: 64, OwnerID: "owner-1"})
	info, ok := c.Session()
	if !ok {
		t.Fatal("no session on a 4.1 client")
	}
	if info.Slots != 8 {
		t.Errorf("using %d slots, want the 8 the server granted", info.Slots)
	}
	if info.ExchangeID.EirFlags&nfsv4.EXCHGID4_FLAG_USE_NON_PNFS == 0 {
		t.Errorf("EXCHANGE_ID result flags %#x", info.ExchangeID.EirFlags)
	}
	s.mu.Lock()
	ex, cs := s.exchange, s.createSess
	s.mu.Unlock()
	if string(ex.EiaClientowner.CoOwnerid) != "owner-1" || ex.EiaFlags != 0 {
		t.Errorf("EXCHANGE_ID args %+v", ex)
	}
	if _, ok := ex.EiaStateProtect.(*nfsv4.StateProtect4A_SP4_NONE); !ok {
		t.Errorf("state protection %T, want SP4_NONE", ex.EiaStateProtect)
	}
	if cs.CsaFlags&nfsv4.CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 || cs.CsaForeChanAttrs.CaMaxrequests != 64 ||
		cs.CsaClientid != c.ClientID() {
		t.Errorf("CREATE_SESSION args %+v", cs)
	}
	if n := s.count(nfsv4.OP_RECLAIM_COMPLETE); n != 1 {
		t.Errorf("RECLAIM_COMPLETE sent %d times", n)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.count(nfsv4.OP_DESTROY_SESSION) != 1 || s.count(nfsv4.OP_DESTROY_CLIENTID) != 1 {
		t.Fatal("Shutdown did not destroy the session and client ID")
	}
}

func TestEachCallAdvancesItsSlotsSequenceID(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 2, Slots: 1})
	ctx := context.Background()
	before := c.SlotSequenceID(0) // RECLAIM_COMPLETE used seqid 1
	for range 5 {
		if _, err := c.RootFH(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.SlotSequenceID(0); got != before+5 {
		t.Fatalf("slot 0 sequence id %d, want %d", got, before+5)
	}
	// A hand-built SEQUENCE that skips ahead is refused by the server.
	res, err := c.Compound(ctx, 2, "", []nfsv4.NfsArgop4{c.SequenceOp(0, before+9, false), &nfsv4.NfsArgop4_OP_PUTROOTFH{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != nfsv4.NFS4ERR_SEQ_MISORDERED {
		t.Fatalf("skipping sequence ids: status %v", res.Status)
	}
}

func TestRetransmitIsAnsweredFromTheReplyCache(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 1})
	ctx := context.Background()
	root, err := c.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mkdir := &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_default{Type: nfsv4.NF4DIR}, Objname: "new"}}
	first, err := c.DoCompound(ctx, putFH(root), mkdir, getFH())
	if err != nil || first.Status != nfsv4.NFS4_OK {
		t.Fatalf("CREATE: %v, %v", first, err)
	}
	replay, err := c.Retransmit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if replay.Status != nfsv4.NFS4_OK || !reflect.DeepEqual(replay, first) {
		t.Fatalf("retransmitted CREATE got %v, want the cached reply", replay.Status)
	}
	if n := s.count(nfsv4.OP_CREATE); n != 1 {
		t.Fatalf("server executed CREATE %d times", n)
	}
	// Without caching (a read-only compound), the replay is refused.
	if _, err := c.RootFH(ctx); err != nil {
		t.Fatal(err)
	}
	replay, err = c.Retransmit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if replay.Status != nfsv4.NFS4ERR_RETRY_UNCACHED_REP {
		t.Fatalf("uncached replay: status %v", replay.Status)
	}
}

func TestCancelledCallKeepsItsSlotUntilTheReplyComes(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 1, Slots: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	// Tag the compound so the fake sleeps before running it.
	_, err := c.DoCompound(WithTag(ctx, "sleep:200ms"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	// The only slot is still out; this call waits for it and then uses
	// the next sequence id, which the server accepts.
	if _, err := c.RootFH(context.Background()); err != nil {
		t.Fatalf("call after a cancelled one: %v", err)
	}
}

func TestRenewLoopKeepsTheLeaseWithSequence(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 1, RenewInterval: 10 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	c.Close()
	s.mu.Lock()
	n := s.seqOnly
	s.mu.Unlock()
	if n < 3 {
		t.Fatalf("%d SEQUENCE-only compounds in 80ms at a 10ms interval", n)
	}
	if err := c.RenewErr(); err != nil {
		t.Fatalf("renew error: %v", err)
	}
}

func TestV40ClientConfirmsItsIDAndNewOwnersOpens(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 0, RenewInterval: 10 * time.Millisecond})
	ctx := context.Background()
	if _, ok := c.Session(); ok {
		t.Fatal("a 4.0 client has a session")
	}
	if s.count(nfsv4.OP_SETCLIENTID_CONFIRM) != 1 {
		t.Fatal("SETCLIENTID was not confirmed")
	}
	dir, err := c.LookupPath(ctx, "/dir")
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Open(ctx, dir, "file", OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	if err != nil {
		t.Fatal(err)
	}
	// OPEN used seqid 0 and OPEN_CONFIRM 1; the fake checks both.
	if s.count(nfsv4.OP_OPEN_CONFIRM) != 1 || f.Owner.SeqID() != 2 || f.Stateid.Seqid != 2 {
		t.Fatalf("after open: %d OPEN_CONFIRMs, owner seqid %d, stateid seqid %d",
			s.count(nfsv4.OP_OPEN_CONFIRM), f.Owner.SeqID(), f.Stateid.Seqid)
	}
	data, eof, err := c.Read(ctx, f, 9990, 100)
	if err != nil || string(data) != "0123456789" || !eof {
		t.Fatalf("Read = %q, %v, %v", data, eof, err)
	}
	if err := c.CloseFile(ctx, f); err != nil {
		t.Fatal(err)
	}
	if f.Owner.SeqID() != 3 {
		t.Fatalf("owner seqid after CLOSE %d, want 3", f.Owner.SeqID())
	}
	time.Sleep(40 * time.Millisecond)
	if s.count(nfsv4.OP_RENEW) == 0 {
		t.Fatal("the 4.0 renew loop sent no RENEW")
	}
}

func TestConvenienceCallsOverASession(t *testing.T) {
	s := newFakeServer(t)
	c := dialClient(t, s, Config{MinorVersion: 1})
	ctx := context.Background()
	dir, attrs, err := c.StatPath(ctx, "/dir", CommonAttrs())
	if err != nil || attrs.Type != nfsv4.NF4DIR {
		t.Fatalf("StatPath: %v, %+v", err, attrs)
	}
	if _, err := c.LookupPath(ctx, "/dir/missing"); !errors.Is(err, Status(nfsv4.NFS4ERR_NOENT)) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	entries, err := c.ReadDir(ctx, dir, Bitmap(nfsv4.FATTR4_TYPE))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.FileID == 0 || e.Attrs.Type != nfsv4.NF4REG {
			t.Errorf("entry %+v", e)
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	if want := []string{"a", "b", "c", "d", "e", "file"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("ReadDir over 2-entry pages = %v, want %v", names, want)
	}
	f, err := c.Create(ctx, dir, "created", OpenOptions{Mode: Guarded, Attrs: Attrs{}.WithMode(0o600)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, dir, "created", OpenOptions{Mode: Guarded}); !errors.Is(err, Status(nfsv4.NFS4ERR_EXIST)) {
		t.Fatalf("second guarded create: %v", err)
	}
	w, err := c.Write(ctx, f, 0, []byte("hello"), nfsv4.FILE_SYNC4)
	if err != nil || w.Count != 5 || w.Committed != nfsv4.FILE_SYNC4 {
		t.Fatalf("Write = %+v, %v", w, err)
	}
	data, _, err := c.Read(ctx, f, 0, 100)
	if err != nil || !bytes.Equal(data, []byte("hello")) {
		t.Fatalf("Read = %q, %v", data, err)
	}
	if err := c.CloseFile(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(ctx, f); !errors.Is(err, Status(nfsv4.NFS4ERR_BAD_STATEID)) {
		t.Fatalf("closing twice: %v", err)
	}
}
