package nfsclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

func dialFake(t *testing.T, s *fakeServer, opts ConnOptions) *Conn {
	t.Helper()
	c, err := DialConn(context.Background(), s.addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNullCallCarriesTheAuthSysCredential(t *testing.T) {
	s := newFakeServer(t)
	auth := AuthSys{Stamp: 7, MachineName: "tester", UID: 1000, GID: 100, GIDs: []uint32{4, 24, 27}}
	c := dialFake(t, s, ConnOptions{Auth: auth})
	if err := c.Null(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A per-call credential replaces the connection's for that call only.
	if err := c.Null(WithAuth(context.Background(), AuthSys{MachineName: "other", UID: 0, GID: 0})); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := []rpcv2.AuthsysParms{
		{Stamp: 7, Machinename: "tester", Uid: 1000, Gid: 100, Gids: []uint32{4, 24, 27}},
		{Machinename: "other", Gids: []uint32{}},
	}
	if len(s.creds) != 2 || !reflect.DeepEqual(s.creds[0], want[0]) ||
		s.creds[1].Machinename != "other" || s.creds[1].Uid != 0 {
		t.Fatalf("server saw credentials %+v, want %+v", s.creds, want)
	}
}

func TestCompoundReturnsCannedRootAttributes(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	res, err := c.Compound(context.Background(), 0, "mount", []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_PUTROOTFH{}, getFH(), getAttr(CommonAttrs()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != nfsv4.NFS4_OK || res.Tag != "mount" || len(res.Resarray) != 3 {
		t.Fatalf("got status %v, tag %q, %d results", res.Status, res.Tag, len(res.Resarray))
	}
	fh, err := fhResult(res.Resarray, 1)
	if err != nil || string(fh) != "/" {
		t.Fatalf("GETFH = %q, %v", fh, err)
	}
	a, err := attrResult(res.Resarray, 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Type != nfsv4.NF4DIR || a.Mode != 0o755 || a.FileID != 1 || a.Owner != "1000" ||
		a.OwnerGroup != "100" || a.NumLinks != 1 || !a.TimeModify.Equal(time.Unix(1700000000, 500)) {
		t.Fatalf("root attributes %+v", a)
	}
	if a.Has(nfsv4.FATTR4_RAWDEV) {
		t.Fatal("rawdev reported present though the server did not send it")
	}
}

func TestUnsupportedMinorVersionIsAStatusNotAnError(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	res, err := c.Compound(context.Background(), 3, "", []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != nfsv4.NFS4ERR_MINOR_VERS_MISMATCH || len(res.Resarray) != 0 {
		t.Fatalf("got %v with %d results", res.Status, len(res.Resarray))
	}
	if _, err := checkCompound(res, nil, false); !errors.Is(err, Status(nfsv4.NFS4ERR_MINOR_VERS_MISMATCH)) {
		t.Fatalf("checkCompound: %v", err)
	}
}

func TestRawCallSendsHandBuiltArguments(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	// COMPOUND4args by hand: tag "hi", minor version 1, one PUTROOTFH.
	body := []byte{0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 24}
	reply, err := c.RawCall(context.Background(), NFSProgram, NFSVersion, ProcCompound, body)
	if err != nil {
		t.Fatal(err)
	}
	// PUTROOTFH outside a session: the fake answers it (a real 4.1 server
	// would want SEQUENCE first). The reply is status, tag, one result.
	want := []byte{0, 0, 0, 0, 0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0, 0, 1, 0, 0, 0, 24, 0, 0, 0, 0}
	if !bytes.Equal(reply, want) {
		t.Fatalf("reply % x, want % x", reply, want)
	}
}

func TestRPCLevelRefusalsBecomeRPCErrors(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	ctx := context.Background()
	tests := []struct {
		name             string
		prog, vers, proc uint32
		want             RPCError
	}{
		{"unknown program", 100005, 3, 0, RPCError{Accepted: true, AcceptStat: rpcv2.PROG_UNAVAIL}},
		{"unknown version", NFSProgram, 3, 0, RPCError{Accepted: true, AcceptStat: rpcv2.PROG_MISMATCH, Low: 4, High: 4}},
		{"unknown procedure", NFSProgram, 4, 9, RPCError{Accepted: true, AcceptStat: rpcv2.PROC_UNAVAIL}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.RawCall(ctx, tc.prog, tc.vers, tc.proc, nil)
			var re *RPCError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want *RPCError", err)
			}
			re.Xid = 0
			if *re != tc.want {
				t.Fatalf("got %+v, want %+v", *re, tc.want)
			}
		})
	}
	s.mu.Lock()
	s.denyAuth = true
	s.mu.Unlock()
	var re *RPCError
	if err := c.Null(WithAuth(ctx, AuthNone{})); !errors.As(err, &re) || re.RejectStat != rpcv2.AUTH_ERROR || re.AuthStat != rpcv2.AUTH_TOOWEAK {
		t.Fatalf("AUTH_NONE refused: err = %v", err)
	}
}

func TestConcurrentCallsOnOneConnectionGetTheirOwnReplies(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{Auth: AuthSys{MachineName: "m"}})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				// Varying delays make replies come back out of order.
				tag := fmt.Sprintf("sleep:%dus/%d/%d", (g*7+i*13)%5*200, g, i)
				res, err := c.Compound(context.Background(), 1, tag, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}, getFH()})
				if err != nil {
					errs <- err
					return
				}
				if res.Tag != tag {
					errs <- fmt.Errorf("call tagged %q got the reply tagged %q", tag, res.Tag)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCancelledCallReturnsAndTheConnectionCarriesOn(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Compound(ctx, 1, "sleep:300ms", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("cancelled call took %v", d)
	}
	if err := c.Null(context.Background()); err != nil {
		t.Fatalf("call after a cancelled one: %v", err)
	}
	time.Sleep(350 * time.Millisecond) // the late reply arrives and is dropped
	if err := c.Null(context.Background()); err != nil {
		t.Fatalf("call after the late reply: %v", err)
	}
}

func TestCloseFailsOutstandingCalls(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Compound(context.Background(), 1, "sleep:1s", nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("call still waiting after Close")
	}
	if err := c.Null(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestGarbageOnTheWireEndsTheConnection(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{})
	// A record holding an RPC message with an impossible msg_type.
	if err := c.WriteRaw(context.Background(), appendRecord(nil, []byte{0, 0, 0, 1, 0, 0, 0, 9}, 0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the server kept the connection open")
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err() = %v", c.Err())
	}
}

func TestFragmentedRequestsReachTheServer(t *testing.T) {
	s := newFakeServer(t)
	c := dialFake(t, s, ConnOptions{MaxFragmentSize: 5})
	res, err := c.Compound(context.Background(), 1, "fragmented", []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}, getFH()})
	if err != nil || res.Tag != "fragmented" {
		t.Fatalf("res %+v, err %v", res, err)
	}
}

// TestMultiFragmentRepliesAreJoined uses a hand-written server that
// answers every call with its arguments echoed back as results, split
// into 3-byte fragments.
func TestMultiFragmentRepliesAreJoined(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		for {
			rec, err := readRecord(nc, 1<<20)
			if err != nil {
				return
			}
			r := bytes.NewReader(rec)
			var call rpcv2.RpcMsg
			if _, err := call.ReadFrom(r); err != nil {
				return
			}
			args := rec[len(rec)-r.Len():]
			var reply []byte
			reply = binary.BigEndian.AppendUint32(reply, call.Xid)
			reply = append(reply, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // REPLY, ACCEPTED, AUTH_NONE verf, SUCCESS
			reply = append(reply, args...)
			nc.Write(appendRecord(nil, reply, 3))
		}
	}()
	c, err := DialConn(context.Background(), l.Addr().String(), ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	args := bytes.Repeat([]byte("fragment"), 1000)
	got, err := c.RawCall(context.Background(), 1, 1, 1, args)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, args) {
		t.Fatalf("echo of %d bytes came back as %d bytes", len(args), len(got))
	}
}

// decodeCompound takes a READ's data from the reply's own bytes instead of
// go-xdr's copy; everything it decodes must be what go-xdr decodes, and a
// reply cut anywhere must be refused, as go-xdr refuses it.
func TestDecodeCompoundReadsWhatGoXDRReads(t *testing.T) {
	read := func(data []byte, eof bool) nfsv4.NfsResop4 {
		return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: eof, Data: data}}}
	}
	seq := &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{SrSequenceid: 7, SrSlotid: 1}}}
	putfh := &nfsv4.NfsResop4_OP_PUTFH{Opputfh: nfsv4.Putfh4res{Status: nfsv4.NFS4_OK}}
	big := make([]byte, 1<<20+3)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		res  nfsv4.Compound4res
	}{
		{"read of 1 MiB and 3 bytes", nfsv4.Compound4res{Tag: "t", Resarray: []nfsv4.NfsResop4{seq, putfh, read(big, false)}}},
		{"empty read at the end", nfsv4.Compound4res{Resarray: []nfsv4.NfsResop4{seq, putfh, read(nil, true)}}},
		{"reads of 1 to 5 bytes", nfsv4.Compound4res{Resarray: []nfsv4.NfsResop4{read(big[:1], false), read(big[:2], true),
			read(big[:3], false), read(big[:4], true), read(big[:5], false)}}},
		{"a read refused", nfsv4.Compound4res{Status: nfsv4.NFS4ERR_OPENMODE, Resarray: []nfsv4.NfsResop4{seq, putfh,
			&nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_default{Status: nfsv4.NFS4ERR_OPENMODE}}}}},
		{"a read between other results", nfsv4.Compound4res{Resarray: []nfsv4.NfsResop4{seq, read(big[:100], true), putfh}}},
		{"no read", nfsv4.Compound4res{Tag: "ü", Resarray: []nfsv4.NfsResop4{seq, putfh}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := c.res.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			body := buf.Bytes()
			got, err := decodeCompound(body)
			if err != nil {
				t.Fatal(err)
			}
			var want nfsv4.Compound4res
			if _, err := want.ReadFrom(bytes.NewReader(body)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalizeReads(*got), normalizeReads(want)) {
				t.Fatalf("decoded %+v, go-xdr decodes %+v", *got, want)
			}
			for cut := 0; cut < len(body); cut += max(1, len(body)/97) {
				if _, err := decodeCompound(body[:cut]); err == nil {
					t.Fatalf("a reply cut to %d of its %d bytes decoded", cut, len(body))
				}
			}
			if _, err := decodeCompound(append(bytes.Clone(body), 0, 0, 0, 0)); err == nil {
				t.Fatal("a reply with 4 stray bytes decoded")
			}
		})
	}
}

// normalizeReads makes empty and nil READ data compare equal.
func normalizeReads(res nfsv4.Compound4res) nfsv4.Compound4res {
	for i, op := range res.Resarray {
		if r, ok := op.(*nfsv4.NfsResop4_OP_READ); ok {
			if ok, isOK := r.Opread.(*nfsv4.Read4res_NFS4_OK); isOK && len(ok.Resok4.Data) == 0 {
				res.Resarray[i] = &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: ok.Resok4.Eof}}}
			}
		}
	}
	return res
}
