package postgres

import (
	"crypto/tls"
	"errors"
	"syscall"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// errPeerClosed is why an Update's batch was not sent: its connection,
// taken from the pool, had been closed by the database already.
var errPeerClosed = errors.New("the database had closed the connection (it restarted, or ended the session)")

// peerClosed reports whether the database has closed c's connection: its
// end of stream (or a reset) waits in the socket, unread. It peeks once,
// without waiting and without taking anything from the socket.
//
// An Update whose first statement is its COMMIT batch (its reads were
// guesses, or it only writes) checks this before sending: a batch sent
// on a connection the database closed gets no answer, and without an
// answer a COMMIT's outcome is unknown (kv.ErrUnknownOutcome, an EIO to
// the caller), although nothing was ever received. Found dead here, the
// batch is not sent and the Update runs again on another connection,
// waiting for the database as a first read does (reader.read). A
// connection that closes between the peek and the send still gives an
// unknown outcome. Connections that are not sockets count as open.
func peerClosed(c *pgx.Conn) bool {
	nc := c.PgConn().Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = n == 0 && err == nil || errors.Is(err, unix.ECONNRESET)
		return true // done: never wait for the socket to be readable
	})
	return closed
}
