package nfs4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// RPC-with-TLS (RFC 9289). A client asks for TLS with a NULL call whose
// credential has the AUTH_TLS flavor (7); a server that will speak TLS
// answers it with the verifier "STARTTLS" (flavor AUTH_NONE), after which
// the client starts a TLS handshake on the same connection and every
// further record travels inside TLS. This is what the Linux client's
// `xprtsec=tls` mount option (with tlshd) does. TLS 1.3 only, ALPN
// "sunrpc", as the RFC requires.
//
// A server without a certificate answers the probe with an empty
// verifier: the client learns that TLS is not offered. With
// Options.TLSRequired, every call on a connection that has not started
// TLS, other than the probe, is refused with AUTH_ERROR/AUTH_TOOWEAK, so
// no file system traffic ever crosses the network in the clear.

// authTLS is the AUTH_TLS credential flavor (RFC 9289 4.1).
const authTLS rpcv2.AuthFlavor = 7

// tlsHandshakeTimeout bounds a client's TLS handshake.
const tlsHandshakeTimeout = 30 * time.Second

// ServerTLSConfig is the TLS configuration RFC 9289 asks of an RPC
// server: TLS 1.3 or later and ALPN "sunrpc", with the given certificate.
func ServerTLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		NextProtos: []string{"sunrpc"}}
}

// tlsProbe reports whether rec is an RPC NULL call with the AUTH_TLS
// credential, and its xid.
func tlsProbe(rec []byte) (xid uint32, ok bool) {
	// A call's header is xid, message type (0), RPC version, program,
	// version, procedure, then the credential's flavor: look at those
	// words before decoding anything, as this runs for every record.
	if len(rec) < 28 || binary.BigEndian.Uint32(rec[4:]) != 0 || binary.BigEndian.Uint32(rec[20:]) != 0 ||
		rpcv2.AuthFlavor(binary.BigEndian.Uint32(rec[24:])) != authTLS {
		return 0, false
	}
	var msg rpcv2.RpcMsg
	if _, err := msg.ReadFrom(bytes.NewReader(rec)); err != nil {
		return 0, false
	}
	call, isCall := msg.Body.(*rpcv2.RpcMsgBody_CALL)
	if !isCall || call.Cbody.Cred.Flavor != authTLS || call.Cbody.Proc != 0 {
		return 0, false
	}
	return msg.Xid, true
}

// startTLS answers a client's AUTH_TLS probe (xid) and, if the server has
// a certificate, runs the TLS handshake on the connection. buffered holds
// bytes the reader took from the connection after the probe (the start of
// the handshake, if the client did not wait for the reply). It returns
// the reader for the connection's further records; an error closes it.
// The caller has no other call of this connection in progress.
func (c *conn) startTLS(xid uint32, buffered *bufio.Reader) (*bufio.Reader, error) {
	cfg := c.s.opts.TLS
	if cfg == nil || c.tls.Load() {
		// Not offered (or already on): a plain success, no STARTTLS.
		return buffered, c.write(accepted(xid, &rpcv2.AcceptedReplyData_SUCCESS{}, nil))
	}
	reply := replyWithVerifier(xid, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE, Body: []byte("STARTTLS")})
	if err := c.write(reply); err != nil {
		return nil, err
	}
	raw := c.raw
	if n := buffered.Buffered(); n > 0 {
		early, _ := buffered.Peek(n)
		raw = &prefixedConn{Conn: raw, r: io.MultiReader(bytes.NewReader(bytes.Clone(early)), raw)}
	}
	tc := tls.Server(raw, cfg)
	ctx, cancel := context.WithTimeout(c.ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	c.wmu.Lock()
	c.nc = tc
	c.wmu.Unlock()
	c.tls.Store(true)
	return bufio.NewReaderSize(tc, readBufSize), nil
}

// write sends one record-marked reply on the connection.
func (c *conn) write(reply []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write(reply)
	return err
}

// replyWithVerifier is an accepted, successful reply to a NULL call with
// verifier v.
func replyWithVerifier(xid uint32, v rpcv2.OpaqueAuth) []byte {
	return reply(xid, &rpcv2.ReplyBody_MSG_ACCEPTED{Areply: rpcv2.AcceptedReply{
		Verf: v, ReplyData: &rpcv2.AcceptedReplyData_SUCCESS{}}}, nil)
}

// tlsRefusalLogEvery is how often a client address refused for not
// starting TLS is logged at most; tlsRefusalLogCap bounds the addresses
// remembered for it.
const (
	tlsRefusalLogEvery = time.Minute
	tlsRefusalLogCap   = 4096
)

// refusalLog rate-limits the log line of a client refused for not
// starting TLS. Invariant: an address is logged at most once per
// tlsRefusalLogEvery, however many calls and connections it makes, and at
// most tlsRefusalLogCap addresses are remembered; while that many were
// logged within the interval, further new addresses go unlogged rather than
// flood the log. The zero value is ready to use.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]time.Time // client address (no port) -> when last logged
}

// due reports whether the refusal of a client at host should be logged
// now, and if so notes it.
func (r *refusalLog) due(host string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.last[host]; ok && now.Sub(at) < tlsRefusalLogEvery {
		return false
	}
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if len(r.last) >= tlsRefusalLogCap {
		for h, at := range r.last {
			if now.Sub(at) >= tlsRefusalLogEvery {
				delete(r.last, h)
			}
		}
		if len(r.last) >= tlsRefusalLogCap {
			return false
		}
	}
	r.last[host] = now
	return true
}

// noteTLSRefused logs that a call on c was refused because the connection
// did not start TLS while Options.TLSRequired, rate-limited per client
// address (refusalLog).
func (s *Server) noteTLSRefused(c *conn) {
	if c == nil {
		return
	}
	host, _, err := net.SplitHostPort(c.raw.RemoteAddr().String())
	if err != nil {
		host = c.raw.RemoteAddr().String()
	}
	if s.tlsRefusals.due(host, time.Now()) {
		s.log.Info("call refused: the client did not start RPC-with-TLS, which this server requires (mount with -o xprtsec=tls, tlshd running)",
			"client", host, "next_report_after", tlsRefusalLogEvery)
	}
}

// prefixedConn is a connection whose first bytes were read already.
type prefixedConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixedConn) Read(b []byte) (int, error) { return p.r.Read(b) }
