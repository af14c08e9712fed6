package nfs4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"bucketfs/internal/nfsclient"
	"bucketfs/internal/testcert"
)

// testCert makes a self-signed certificate for 127.0.0.1 and the pool
// that trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	c := testcert.New(t)
	return c.TLS, c.Pool
}

// tappedListener records every byte the server reads, to check what
// crosses the network.
type tappedListener struct {
	net.Listener
	mu   sync.Mutex
	seen bytes.Buffer
}

func (l *tappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tappedConn{Conn: c, l: l}, nil
}

func (l *tappedListener) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.seen.Bytes())
}

type tappedConn struct {
	net.Conn
	l *tappedListener
}

func (c *tappedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.mu.Lock()
	c.l.seen.Write(b[:n])
	c.l.mu.Unlock()
	return n, err
}

// serveOn starts another NFS server with opts on e's engine, behind a
// tapped listener.
func serveOn(t *testing.T, e *env, opts Options) (addr string, tap *tappedListener) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	srv, err := New(context.Background(), e.eng.FS, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap = &tappedListener{Listener: ln}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, tap)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return ln.Addr().String(), tap
}

// RPC-with-TLS (issue 12; RFC 9289): a client that probes with AUTH_TLS
// gets STARTTLS and then talks TLS on the same connection; nothing it
// writes crosses the network in the clear; with TLS required, a client
// that does not start TLS is refused; a client that does not trust the
// server's certificate does not get through.
func TestRPCWithTLSEncryptsTheSessionAndRefusesPlainClients(t *testing.T) {
	e := newEnv(t, Options{})
	cert, pool := testCert(t)
	addr, tap := serveOn(t, e, Options{TLS: ServerTLSConfig(cert), TLSRequired: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	auth := nfsclient.AuthSys{MachineName: "tls", UID: 1000, GID: 1000}

	c, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1, Auth: auth,
		TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	if err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	defer c.Shutdown(context.Background())
	root, err := c.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("confidential payroll ", 50)
	if err := appendLine(ctx, c, root, "over-tls", secret); err != nil {
		t.Fatal(err)
	}
	if got := readAll(ctx, t, c, root, "over-tls"); string(got) != secret {
		t.Errorf("read back %d bytes, want the %d written", len(got), len(secret))
	}
	seen := tap.bytes()
	if len(seen) < len(secret) {
		t.Fatalf("the server read only %d bytes", len(seen))
	}
	if bytes.Contains(seen, []byte("confidential payroll")) || bytes.Contains(seen, []byte("over-tls")) {
		t.Errorf("file data or names crossed the network in the clear")
	}

	// A plain client is refused at its first call.
	_, err = nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1, Auth: auth})
	var rpcErr *nfsclient.RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Accepted || rpcErr.AuthStat != rpcv2.AUTH_TOOWEAK {
		t.Errorf("a plain client against --tls-required: %v, want an RPC authentication error", err)
	}
	// The raw test client too, on 4.0.
	plain := &tclient{t: t, cred: userCred}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	plain.nc, plain.br = nc, bufio.NewReader(nc)
	body, _ := plain.rpc(nfsProgram, 4, 1, encodeArgs("plain", 0, []nfsv4.NfsArgop4{putroot()}))
	if d, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok {
		t.Errorf("a plain COMPOUND against --tls-required was answered %T", body)
	} else if a, ok := d.Rreply.(*rpcv2.RejectedReply_AUTH_ERROR); !ok || a.Stat != rpcv2.AUTH_TOOWEAK {
		t.Errorf("a plain COMPOUND against --tls-required was refused with %#v, want AUTH_TOOWEAK", d.Rreply)
	}

	// A client that does not trust the certificate stops at the handshake.
	_, other := testCert(t)
	if _, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1, Auth: auth,
		TLS: &tls.Config{RootCAs: other, ServerName: "127.0.0.1"}}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client with another CA: %v, want a certificate error", err)
	}
}

// A server without a certificate answers the probe without STARTTLS, and
// plain clients work as before.
func TestAServerWithoutACertificateDoesNotOfferTLS(t *testing.T) {
	e := newEnv(t, Options{})
	_, pool := testCert(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := nfsclient.Dial(ctx, e.addr, nfsclient.Config{MinorVersion: 1,
		TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	if !errors.Is(err, nfsclient.ErrTLSNotOffered) {
		t.Errorf("TLS against a server without a certificate: %v, want ErrTLSNotOffered", err)
	}
	c := e.dial(1, userCred)
	c.session("plain")
	c.do(putroot(), getfh())
}

func (l *lockedBuffer) lines(re string) []string {
	match := regexp.MustCompile(re)
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if match.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

// A client refused for not starting TLS leaves a log line naming its
// address (issue 22), once per address however many calls and connections
// it makes, so that a misconfigured client is seen without flooding the
// log; another address gets its own line.
func TestAClientRefusedForNotStartingTLSIsLoggedOncePerAddress(t *testing.T) {
	e := newEnv(t, Options{})
	cert, _ := testCert(t)
	var log lockedBuffer
	addr, _ := serveOn(t, e, Options{TLS: ServerTLSConfig(cert), TLSRequired: true,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	refusedFrom := func(local string) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		plain := &tclient{t: t, cred: userCred, nc: nc, br: bufio.NewReader(nc)}
		for range 3 {
			body, _ := plain.rpc(nfsProgram, 4, 1, encodeArgs("plain", 0, []nfsv4.NfsArgop4{putroot()}))
			if _, ok := body.(*rpcv2.ReplyBody_MSG_DENIED); !ok {
				t.Fatalf("a plain COMPOUND from %s against TLSRequired was answered %T", local, body)
			}
		}
	}
	refusedFrom("127.0.0.1")
	refusedFrom("127.0.0.1") // another connection, same address
	refusedFrom("127.0.0.2")
	const what = "did not start RPC-with-TLS"
	first, second := log.lines(`client=127\.0\.0\.1\b`), log.lines(`client=127\.0\.0\.2\b`)
	if len(first) != 1 || !strings.Contains(first[0], what) || len(second) != 1 || !strings.Contains(second[0], what) {
		t.Errorf("log lines for 127.0.0.1: %q\nfor 127.0.0.2: %q\nwant one each saying the client %s", first, second, what)
	}
}
