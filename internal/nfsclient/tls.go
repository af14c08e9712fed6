package nfsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// ErrTLSNotOffered is StartTLS's error when the server answers the
// AUTH_TLS probe without "STARTTLS": it does not offer RPC-with-TLS.
var ErrTLSNotOffered = errors.New("nfsclient: the server does not offer RPC-with-TLS")

// authTLS is the AUTH_TLS credential flavor (RFC 9289).
const authTLS rpcv2.AuthFlavor = 7

// StartTLS turns a fresh connection to an NFS server into an RPC-with-TLS
// one (RFC 9289): it sends the AUTH_TLS probe (a NULL call), expects the
// verifier "STARTTLS" in reply, and runs a TLS handshake on nc with cfg
// (TLS 1.3 and ALPN "sunrpc" are added if cfg leaves them out). Nothing
// else may have been sent on nc. The returned connection carries the
// further records.
func StartTLS(ctx context.Context, nc net.Conn, cfg *tls.Config) (net.Conn, error) {
	if d, ok := ctx.Deadline(); ok {
		nc.SetDeadline(d)
		defer nc.SetDeadline(time.Time{})
	}
	msg := rpcv2.RpcMsg{Xid: rand.Uint32(), Body: &rpcv2.RpcMsgBody_CALL{Cbody: rpcv2.CallBody{
		Rpcvers: rpcVersion, Prog: NFSProgram, Vers: NFSVersion, Proc: ProcNull,
		Cred: rpcv2.OpaqueAuth{Flavor: authTLS}, Verf: rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}}}}
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	msg.WriteTo(&b)
	rec := b.Bytes()
	binary.BigEndian.PutUint32(rec, uint32(len(rec)-4)|0x80000000)
	if _, err := nc.Write(rec); err != nil {
		return nil, fmt.Errorf("nfsclient: AUTH_TLS probe: %w", err)
	}
	reply, err := readRecord(nc, 64<<10)
	if err != nil {
		return nil, fmt.Errorf("nfsclient: AUTH_TLS probe: %w", err)
	}
	var rm rpcv2.RpcMsg
	if _, err := rm.ReadFrom(bytes.NewReader(reply)); err != nil {
		return nil, fmt.Errorf("nfsclient: AUTH_TLS probe reply: %w", err)
	}
	body, ok := rm.Body.(*rpcv2.RpcMsgBody_REPLY)
	if !ok || rm.Xid != msg.Xid {
		return nil, errors.New("nfsclient: AUTH_TLS probe: not a reply to the probe")
	}
	acc, ok := body.Rbody.(*rpcv2.ReplyBody_MSG_ACCEPTED)
	if !ok || string(acc.Areply.Verf.Body) != "STARTTLS" {
		return nil, ErrTLSNotOffered
	}
	cfg = cfg.Clone()
	if cfg.MinVersion < tls.VersionTLS13 {
		cfg.MinVersion = tls.VersionTLS13
	}
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"sunrpc"}
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("nfsclient: TLS handshake: %w", err)
	}
	return tc, nil
}
