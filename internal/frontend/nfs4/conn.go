package nfs4

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// conn is one client connection. One goroutine (serve) reads records; each
// call runs in its own goroutine, at most connInflight at a time per
// connection and serverInflight across the server, and writes its reply
// whole under wmu.
type conn struct {
	s *Server
	// raw is the TCP connection; nc the one replies go on: raw, or the
	// TLS connection over it once the client started TLS (tls.go).
	raw    net.Conn
	nc     net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}
	wg     sync.WaitGroup

	// wmu serializes replies, and guards nc when startTLS replaces it.
	wmu sync.Mutex
	// tls: the connection runs TLS (tls.go).
	tls atomic.Bool
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{s: s, raw: nc, nc: nc, ctx: ctx, cancel: cancel, slots: make(chan struct{}, connInflight)}
}

func (c *conn) close() {
	c.cancel()
	c.raw.Close()
}

func (c *conn) serve() {
	defer func() {
		c.close()
		c.wg.Wait()
		c.s.dropConn(c)
	}()
	br := bufio.NewReaderSize(c.raw, readBufSize)
	for {
		c.raw.SetReadDeadline(time.Now().Add(idleTimeout))
		rec, err := readRecord(br, maxRecord)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.s.log.Debug("connection closed", "remote", c.raw.RemoteAddr().String(), "err", err)
			}
			return
		}
		if xid, ok := tlsProbe(rec); ok {
			// The next bytes may be a TLS handshake: answer the probe
			// here, in order, once the calls before it are done.
			c.wg.Wait()
			if br, err = c.startTLS(xid, br); err != nil {
				c.s.log.Info("RPC-with-TLS: closing the connection", "remote", c.raw.RemoteAddr().String(), "err", err)
				return
			}
			continue
		}
		// Back pressure: stop reading while this connection or the
		// server has too many calls in progress.
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		select {
		case c.s.inflight <- struct{}{}:
		case <-c.ctx.Done():
			<-c.slots
			return
		}
		c.wg.Add(1)
		go func() {
			defer func() {
				<-c.s.inflight
				<-c.slots
				c.wg.Done()
			}()
			reply, err := c.s.handleCall(c.ctx, c, rec)
			if err != nil {
				c.s.log.Debug("bad RPC record; closing the connection", "remote", c.raw.RemoteAddr().String(), "err", err)
				c.close()
				return
			}
			if reply == nil {
				return
			}
			if err := c.write(reply); err != nil {
				c.close()
			}
		}()
	}
}

// readRecord reads one record-marked RPC message of at most limit bytes.
// The buffer grows with the bytes that actually arrive, never by what a
// record marker claims.
func readRecord(r io.Reader, limit int) ([]byte, error) {
	var buf []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ 0x80000000)
		if len(buf)+n > limit {
			return nil, fmt.Errorf("record of more than %d bytes", limit)
		}
		// Memory follows the bytes that arrive, a step at a time, so a
		// header claiming a large fragment costs nothing until the data
		// comes; a fragment that does come is read in place, without the
		// doubling copies of a growing buffer.
		for got := 0; got < n; {
			step := min(n-got, recordStep)
			if got == recordStep {
				step = n - got // the sender is delivering: take the rest at once
			}
			buf = slices.Grow(buf, step)
			m, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
			buf = buf[:len(buf)+m]
			got += m
			if err != nil {
				return nil, io.ErrUnexpectedEOF
			}
		}
		if h&0x80000000 != 0 {
			return buf, nil
		}
	}
}

// recordStep is how much of a fragment is read before the rest is
// allocated.
const recordStep = 256 << 10

// handleCall runs one RPC call and returns the record-marked reply, nil
// for none, or an error for a record that is not a call (the connection is
// then closed).
func (s *Server) handleCall(ctx context.Context, c *conn, rec []byte) ([]byte, error) {
	r := bytes.NewReader(rec)
	var msg rpcv2.RpcMsg
	if _, err := msg.ReadFrom(r); err != nil {
		return nil, err
	}
	body, ok := msg.Body.(*rpcv2.RpcMsgBody_CALL)
	if !ok {
		return nil, errors.New("RPC message is not a CALL")
	}
	call := &body.Cbody
	if call.Rpcvers != 2 {
		rej := &rpcv2.RejectedReply_RPC_MISMATCH{}
		rej.MismatchInfo.Low, rej.MismatchInfo.High = 2, 2
		return denied(msg.Xid, rej), nil
	}
	if s.opts.TLSRequired && (c == nil || !c.tls.Load()) {
		// Nothing but the probe (tls.go) before TLS.
		s.noteTLSRefused(c)
		return denied(msg.Xid, &rpcv2.RejectedReply_AUTH_ERROR{Stat: rpcv2.AUTH_TOOWEAK}), nil
	}
	var who caller
	if !isPing(call) {
		var stat rpcv2.AuthStat
		if who, stat = s.credOf(&call.Cred); stat != rpcv2.AUTH_OK {
			return denied(msg.Xid, &rpcv2.RejectedReply_AUTH_ERROR{Stat: stat}), nil
		}
	}
	if call.Prog != nfsProgram {
		return accepted(msg.Xid, &rpcv2.AcceptedReplyData_default{Stat: rpcv2.PROG_UNAVAIL}, nil), nil
	}
	if call.Vers != 4 {
		mm := &rpcv2.AcceptedReplyData_PROG_MISMATCH{}
		mm.MismatchInfo.Low, mm.MismatchInfo.High = 4, 4
		return accepted(msg.Xid, mm, nil), nil
	}
	switch call.Proc {
	case 0: // NULL
		return accepted(msg.Xid, &rpcv2.AcceptedReplyData_SUCCESS{}, nil), nil
	case 1: // COMPOUND
		args := rec[len(rec)-r.Len():]
		res, ok := s.compoundOnce(ctx, c, msg.Xid, who, args, len(rec))
		if !ok {
			return accepted(msg.Xid, &rpcv2.AcceptedReplyData_default{Stat: rpcv2.GARBAGE_ARGS}, nil), nil
		}
		return accepted(msg.Xid, &rpcv2.AcceptedReplyData_SUCCESS{}, res), nil
	}
	return accepted(msg.Xid, &rpcv2.AcceptedReplyData_default{Stat: rpcv2.PROC_UNAVAIL}, nil), nil
}

// isPing reports whether call is the NULL procedure under a flavor other
// than RPCSEC_GSS. Clients ping before they do anything else (the Linux
// client's rpc_ping uses AUTH_NONE whatever the mount's security flavor)
// and give up on a server that refuses the ping, so NULL is answered
// whatever the credential: it carries no arguments, returns nothing and
// reaches no file. Every other procedure still goes through credOf, where
// AUTH_NONE is refused unless Options.AllowAuthNone. Under RPCSEC_GSS a
// NULL call is a request to set up a security context, which this server
// does not offer, so that one is refused as before.
func isPing(call *rpcv2.CallBody) bool {
	return call.Proc == 0 && call.Cred.Flavor != rpcsecGSS
}

// rpcsecGSS is the RPCSEC_GSS credential flavor (RFC 2203).
const rpcsecGSS rpcv2.AuthFlavor = 6

// compoundOnce is compound, through the duplicate request cache for
// 4.0 (drc.go).
func (s *Server) compoundOnce(ctx context.Context, c *conn, xid uint32, who caller, args []byte, size int) ([]byte, bool) {
	if c == nil || compoundMinor(args) != 0 {
		return s.compound(ctx, c, who, args, size)
	}
	k, ok := s.drc.key(c.raw.RemoteAddr(), xid, who, args)
	if !ok {
		return s.compound(ctx, c, who, args, size)
	}
	e, first := s.drc.begin(k)
	if !first {
		if reply := e.wait(ctx); reply != nil {
			return reply, true
		}
		return s.compound(ctx, c, who, args, size)
	}
	res, ok := s.compound(ctx, c, who, args, size)
	if !ok {
		res = nil
	}
	s.drc.finish(k, e, res)
	return res, ok
}

// compoundMinor is a COMPOUND's minor version, or -1 when its header does
// not decode.
func compoundMinor(args []byte) int64 {
	x := xdrReader{b: args}
	x.opaque(nfsv4.NFS4_OPAQUE_LIMIT)
	minor := x.u32()
	if x.err != nil {
		return -1
	}
	return int64(minor)
}

func accepted(xid uint32, data rpcv2.AcceptedReplyData, results []byte) []byte {
	return reply(xid, &rpcv2.ReplyBody_MSG_ACCEPTED{Areply: rpcv2.AcceptedReply{
		Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}, ReplyData: data}}, results)
}

func denied(xid uint32, rej rpcv2.RejectedReply) []byte {
	return reply(xid, &rpcv2.ReplyBody_MSG_DENIED{Rreply: rej}, nil)
}

// reply encodes a record-marked reply message followed by results.
func reply(xid uint32, body rpcv2.ReplyBody, results []byte) []byte {
	msg := rpcv2.RpcMsg{Xid: xid, Body: &rpcv2.RpcMsgBody_REPLY{Rbody: body}}
	n := msg.GetEncodedSizeBytes()
	buf := bytes.NewBuffer(make([]byte, 4, 4+n+len(results)))
	msg.WriteTo(buf)
	buf.Write(results)
	b := buf.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)-4)|0x80000000)
	return b
}
