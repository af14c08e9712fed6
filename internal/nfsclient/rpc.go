package nfsclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
	xdrruntime "github.com/buildbarn/go-xdr/pkg/runtime"
)

// NFS program and procedure numbers (RFC 7530 §17, RFC 8881 §16).
const (
	NFSProgram    = nfsv4.NFS4_PROGRAM_PROGRAM_NUMBER
	NFSVersion    = 4
	ProcNull      = 0
	ProcCompound  = 1
	rpcVersion    = 2
	msgTypeReply  = 1
	xidHeaderSize = 8 // xid + msg_type
)

// ConnOptions configures an RPC connection.
type ConnOptions struct {
	// Auth is the default credential for calls; nil means AuthNone.
	// WithAuth overrides it for one call.
	Auth Auth
	// MaxRecordSize bounds a reply record; 0 means DefaultMaxRecordSize.
	MaxRecordSize int
	// MaxFragmentSize splits each outgoing record into fragments of at
	// most this many bytes; 0 sends every record as one fragment.
	MaxFragmentSize int
	// TLS, if set, makes DialConn start RPC-with-TLS (StartTLS) before
	// anything else.
	TLS *tls.Config
}

// Conn is one ONC RPC (RFC 5531) connection over a stream transport.
// Calls may be issued concurrently: each gets its own XID, requests are
// written whole under a write lock, and a single reader goroutine hands
// each reply record to the call waiting for its XID. Replies for XIDs
// nobody waits for (cancelled calls) are dropped, as are CALL messages
// from the server: this client offers no back channel.
type Conn struct {
	nc   net.Conn
	opts ConnOptions

	// wsem serializes record writes; a channel rather than a mutex so
	// that a writer can give up when its context ends.
	wsem chan struct{}
	xid  atomic.Uint32

	mu      sync.Mutex
	pending map[uint32]*call // guarded by mu
	err     error            // guarded by mu; set once when the reader stops
	done    chan struct{}    // closed when the reader stops
}

// call is one outstanding request. reply and err are written by the
// reader goroutine (or by fail) before done is closed.
type call struct {
	xid   uint32
	done  chan struct{}
	reply []byte
	err   error
}

// DialConn connects to addr over TCP and starts the connection's reader.
func DialConn(ctx context.Context, addr string, opts ConnOptions) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("nfsclient: dial %s: %w", addr, err)
	}
	if opts.TLS != nil {
		tc, err := StartTLS(ctx, nc, opts.TLS)
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	return NewConn(nc, opts), nil
}

// NewConn runs the RPC protocol over an established connection. The Conn
// owns nc and closes it on Close.
func NewConn(nc net.Conn, opts ConnOptions) *Conn {
	if opts.Auth == nil {
		opts.Auth = AuthNone{}
	}
	if opts.MaxRecordSize <= 0 {
		opts.MaxRecordSize = DefaultMaxRecordSize
	}
	c := &Conn{
		nc:      nc,
		opts:    opts,
		wsem:    make(chan struct{}, 1),
		pending: make(map[uint32]*call),
		done:    make(chan struct{}),
	}
	c.xid.Store(rand.Uint32())
	go c.readLoop()
	return c
}

// Close closes the connection. Outstanding calls fail with ErrClosed.
func (c *Conn) Close() error {
	err := c.nc.Close()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil // already closed, by an earlier Close or by the reader
	}
	return err
}

// Done is closed once the connection has stopped, by Close or because the
// peer closed it or sent something unreadable; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection stopped, or nil while it is running.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LocalAddr and RemoteAddr are the two ends of the transport.
func (c *Conn) LocalAddr() net.Addr  { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

func (c *Conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var err error
	for {
		var rec []byte
		rec, err = readRecord(r, c.opts.MaxRecordSize)
		if err != nil {
			break
		}
		if len(rec) < xidHeaderSize {
			err = fmt.Errorf("nfsclient: RPC record of %d bytes is too short", len(rec))
			break
		}
		if binary.BigEndian.Uint32(rec[4:8]) != msgTypeReply {
			continue // a callback from the server: not supported, ignored
		}
		xid := binary.BigEndian.Uint32(rec[0:4])
		c.mu.Lock()
		cl := c.pending[xid]
		delete(c.pending, xid)
		c.mu.Unlock()
		if cl != nil {
			cl.reply = rec
			close(cl.done)
		}
	}
	c.nc.Close()
	if errors.Is(err, net.ErrClosed) || err == io.EOF {
		err = ErrClosed
	} else {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	c.mu.Lock()
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, cl := range pending {
		cl.err = err
		close(cl.done)
	}
	close(c.done)
}

// Call sends one RPC call whose arguments are args (nil for none) and
// returns the procedure's encoded results once the matching reply
// arrives. A reply that is not MSG_ACCEPTED/SUCCESS is an *RPCError.
func (c *Conn) Call(ctx context.Context, prog, vers, proc uint32, args io.WriterTo) ([]byte, error) {
	cl, err := c.start(ctx, prog, vers, proc, args)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, cl)
}

// RawCall is Call with arguments already encoded, sent verbatim, so tests
// can send malformed or hand-built requests.
func (c *Conn) RawCall(ctx context.Context, prog, vers, proc uint32, body []byte) ([]byte, error) {
	return c.Call(ctx, prog, vers, proc, rawBody(body))
}

// WriteRaw writes p to the transport as is, with no record marking, under
// the write lock. It exists to send broken records; the server's reaction
// shows up on Done and Err or in later calls.
func (c *Conn) WriteRaw(ctx context.Context, p []byte) error {
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.wsem }()
	_, err := c.nc.Write(p)
	return err
}

// Null calls the NFS NULL procedure, a round trip that does nothing.
func (c *Conn) Null(ctx context.Context) error {
	_, err := c.Call(ctx, NFSProgram, NFSVersion, ProcNull, nil)
	return err
}

// Compound sends one COMPOUND exactly as given: no SEQUENCE is added and
// the result's status is not turned into an error. The error is only for
// transport, RPC and decoding failures.
func (c *Conn) Compound(ctx context.Context, minorVersion uint32, tag string, ops []nfsv4.NfsArgop4) (*nfsv4.Compound4res, error) {
	cl, err := c.startCompound(ctx, minorVersion, tag, ops)
	if err != nil {
		return nil, err
	}
	body, err := c.wait(ctx, cl)
	if err != nil {
		return nil, err
	}
	return decodeCompound(body)
}

func (c *Conn) startCompound(ctx context.Context, minorVersion uint32, tag string, ops []nfsv4.NfsArgop4) (*call, error) {
	args := &nfsv4.Compound4args{Tag: tag, Minorversion: minorVersion, Argarray: ops}
	return c.start(ctx, NFSProgram, NFSVersion, ProcCompound, args)
}

// decodeCompound decodes a COMPOUND4res as Compound4res.ReadFrom does,
// but for the data of a READ, which it slices out of body: go-xdr reads a
// variable-length opaque through a buffer that grows as it reads, and a
// READ of 1 MiB cost about 2 MiB of allocation and as many bytes copied
// (a fifth of the Go client's CPU in a cold read). The data shares body's
// memory, which nothing else uses.
func decodeCompound(body []byte) (*nfsv4.Compound4res, error) {
	res, err := decodeCompoundRes(body)
	if err != nil {
		return nil, fmt.Errorf("nfsclient: decoding COMPOUND4res: %w", err)
	}
	return res, nil
}

func decodeCompoundRes(body []byte) (*nfsv4.Compound4res, error) {
	var res nfsv4.Compound4res
	r := bytes.NewReader(body)
	status, _, err := xdrruntime.ReadInt(r)
	if err != nil {
		return nil, err
	}
	res.Status = nfsv4.Nfsstat4(status)
	if res.Tag, _, err = xdrruntime.ReadUTF8String(r, math.MaxUint32); err != nil {
		return nil, err
	}
	n, _, err := xdrruntime.ReadUnsignedInt(r)
	if err != nil {
		return nil, err
	}
	for range n {
		at := len(body) - r.Len()
		if len(body)-at >= 4 && binary.BigEndian.Uint32(body[at:]) == uint32(nfsv4.OP_READ) {
			op, used, err := decodeRead(body[at+4:])
			if err != nil {
				return nil, err
			}
			res.Resarray = append(res.Resarray, op)
			r.Seek(int64(at+4+used), io.SeekStart)
			continue
		}
		op, _, err := nfsv4.ReadNfsResop4(r)
		if err != nil {
			return nil, err
		}
		res.Resarray = append(res.Resarray, op)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d stray bytes after COMPOUND4res", r.Len())
	}
	return &res, nil
}

// decodeRead decodes a READ4res from the start of b, its data a slice of
// b, and says how many bytes of b it took.
func decodeRead(b []byte) (*nfsv4.NfsResop4_OP_READ, int, error) {
	if len(b) < 4 {
		return nil, 0, io.ErrUnexpectedEOF
	}
	status := nfsv4.Nfsstat4(binary.BigEndian.Uint32(b))
	if status != nfsv4.NFS4_OK {
		return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_default{Status: status}}, 4, nil
	}
	if len(b) < 12 {
		return nil, 0, io.ErrUnexpectedEOF
	}
	var eof bool
	switch binary.BigEndian.Uint32(b[4:]) {
	case 0:
	case 1:
		eof = true
	default:
		return nil, 0, errors.New("READ4resok.eof is not a boolean")
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	padded := n + (4-n%4)%4
	if n < 0 || len(b)-12 < padded {
		return nil, 0, io.ErrUnexpectedEOF
	}
	data := b[12 : 12+n : 12+n]
	return &nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Eof: eof, Data: data}}},
		12 + padded, nil
}

type rawBody []byte

func (b rawBody) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}

// start registers a call and writes its request. On success the reply
// will be delivered to the returned call whatever happens to ctx later.
func (c *Conn) start(ctx context.Context, prog, vers, proc uint32, args io.WriterTo) (*call, error) {
	auth := authFromContext(ctx)
	if auth == nil {
		auth = c.opts.Auth
	}
	cred, verf, err := auth.Credential()
	if err != nil {
		return nil, fmt.Errorf("nfsclient: building credential: %w", err)
	}
	cl := &call{xid: c.xid.Add(1), done: make(chan struct{})}
	msg := rpcv2.RpcMsg{
		Xid: cl.xid,
		Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
			Rpcvers: rpcVersion, Prog: prog, Vers: vers, Proc: proc, Cred: cred, Verf: verf,
		}},
	}
	var buf bytes.Buffer
	if _, err := msg.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("nfsclient: encoding RPC header: %w", err)
	}
	if args != nil {
		if _, err := args.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("nfsclient: encoding arguments: %w", err)
		}
	}
	record := appendRecord(make([]byte, 0, buf.Len()+8), buf.Bytes(), c.opts.MaxFragmentSize)

	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[cl.xid] = cl
	c.mu.Unlock()

	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		c.forget(cl)
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.Err()
	}
	_, err = c.nc.Write(record)
	<-c.wsem
	if err != nil {
		c.forget(cl)
		// A failed write leaves a partial record on the stream; nothing
		// after it can be framed, so the connection is finished.
		c.nc.Close()
		return nil, fmt.Errorf("%w: write: %w", ErrClosed, err)
	}
	return cl, nil
}

// forget drops a call whose reply is no longer wanted.
func (c *Conn) forget(cl *call) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, cl.xid)
	}
	c.mu.Unlock()
}

// wait waits for cl's reply and checks its RPC header. If ctx ends first
// the call is forgotten and its reply, if any, dropped.
func (c *Conn) wait(ctx context.Context, cl *call) ([]byte, error) {
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.forget(cl)
		return nil, ctx.Err()
	}
	return cl.result()
}

// result decodes the reply header of a finished call and returns the
// procedure results that follow it.
func (cl *call) result() ([]byte, error) {
	if cl.err != nil {
		return nil, cl.err
	}
	r := bytes.NewReader(cl.reply)
	var msg rpcv2.RpcMsg
	if _, err := msg.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("nfsclient: decoding RPC reply header: %w", err)
	}
	body, ok := msg.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok {
		return nil, errors.New("nfsclient: reply is not an RPC REPLY")
	}
	switch rb := body.Rbody.(type) {
	case *rpcv2.ReplyBody_MSG_ACCEPTED:
		switch d := rb.Areply.ReplyData.(type) {
		case *rpcv2.AcceptedReplyData_SUCCESS:
			return cl.reply[len(cl.reply)-r.Len():], nil
		case *rpcv2.AcceptedReplyData_PROG_MISMATCH:
			return nil, &RPCError{Xid: cl.xid, Accepted: true, AcceptStat: rpcv2.PROG_MISMATCH,
				Low: d.MismatchInfo.Low, High: d.MismatchInfo.High}
		default:
			return nil, &RPCError{Xid: cl.xid, Accepted: true, AcceptStat: d.GetStat()}
		}
	case *rpcv2.ReplyBody_MSG_DENIED:
		switch d := rb.Rreply.(type) {
		case *rpcv2.RejectedReply_RPC_MISMATCH:
			return nil, &RPCError{Xid: cl.xid, RejectStat: rpcv2.RPC_MISMATCH,
				Low: d.MismatchInfo.Low, High: d.MismatchInfo.High}
		case *rpcv2.RejectedReply_AUTH_ERROR:
			return nil, &RPCError{Xid: cl.xid, RejectStat: rpcv2.AUTH_ERROR, AuthStat: d.Stat}
		}
	}
	return nil, errors.New("nfsclient: unrecognised RPC reply")
}
