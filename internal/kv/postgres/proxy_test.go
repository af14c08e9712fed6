package postgres

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"
	"bucketfs/internal/pgtest"
)

// cutProxy forwards TCP connections to a PostgreSQL server. Armed with a
// command tag, it cuts the first connection whose server answers that
// command (a CommandComplete message "tag\x00"): that answer and all after
// it are dropped and both sides closed. So the server has run the command
// and the client never learns it.
type cutProxy struct {
	l      net.Listener
	target string

	mu  sync.Mutex
	tag []byte // armed when not nil
	cut int    // connections cut
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	var conns sync.WaitGroup
	t.Cleanup(func() { l.Close(); conns.Wait() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); p.serve(c) }()
		}
	}()
	return p
}

func (p *cutProxy) arm(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tag = append([]byte(tag), 0)
}

func (p *cutProxy) cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// takeCut reports whether answer from the server must be dropped, and
// disarms the proxy when it is.
func (p *cutProxy) takeCut(answer []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tag == nil || !bytes.Contains(answer, p.tag) {
		return false
	}
	p.tag = nil
	p.cut++
	return true
}

func (p *cutProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		io.Copy(server, client)
		server.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.takeCut(buf[:n]) {
				return // closes both, the answer unsent
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) url(srv *pgtest.Server, direct string) string {
	return strings.Replace(direct, srv.Addr(), p.l.Addr().String(), 1)
}

// The connection is lost after the server committed and before the client
// heard so: Update says the outcome is unknown, does not run fn again, and
// the write is there.
func TestAConnectionLostDuringCommitGivesAnUnknownOutcomeAndNoSecondRun(t *testing.T) {
	srv := pgtest.Start(t)
	direct := srv.NewDatabase(t)
	p := startCutProxy(t, srv.Addr())
	s := open(t, p.url(srv, direct), "bucketfs")
	kvtest.Set(t, s, "n", "")
	runs := 0
	p.arm("COMMIT")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Update(ctx, func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("n"))
		if err != nil {
			return err
		}
		return tx.Set([]byte("n"), append(v, '+'))
	})
	if !errors.Is(err, kv.ErrUnknownOutcome) || runs != 1 || p.cuts() != 1 {
		t.Fatalf("Update = %v after %d runs, %d cuts; want kv.ErrUnknownOutcome after one run and one cut", err, runs, p.cuts())
	}
	if got := kvtest.ViewGet(t, open(t, direct, "bucketfs"), "n"); got != "+" {
		t.Errorf("n = %q; want the one commit that landed (+)", got)
	}
}

// The connection is lost after BEGIN and a read, before COMMIT was sent:
// nothing can have committed, so Update runs fn again on another
// connection and commits once.
func TestAConnectionLostBeforeCommitRunsFnAgain(t *testing.T) {
	srv := pgtest.Start(t)
	direct := srv.NewDatabase(t)
	p := startCutProxy(t, srv.Addr())
	s := open(t, p.url(srv, direct), "bucketfs")
	// Written by another store, so that s reads them (guess.go).
	kvtest.Set(t, open(t, direct, "bucketfs"), "n", "", "m", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs := 0
	err := s.Update(ctx, func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("n"))
		if err != nil {
			return err
		}
		if runs == 1 {
			// The second read of the transaction, on the same connection,
			// is the one whose answer is cut.
			p.arm("SELECT 1")
		}
		if _, err := tx.Get([]byte("m")); err != nil {
			return err
		}
		return tx.Set([]byte("n"), append(v, '+'))
	})
	if err != nil || runs != 2 || p.cuts() != 1 {
		t.Fatalf("Update = %v after %d runs, %d cuts; want success after two runs and one cut", err, runs, p.cuts())
	}
	if got := kvtest.ViewGet(t, s, "n"); got != "+" {
		t.Errorf("n = %q; want one commit (+)", got)
	}
}
