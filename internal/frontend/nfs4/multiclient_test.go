package nfs4

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
)

// dialClient connects an NFSv4.1 client of package nfsclient as uid/gid
// 1000 (the harness opens the root to everyone).
func dialClient(t *testing.T, e *env, owner string) *nfsclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nfsclient.Dial(ctx, e.addr, nfsclient.Config{MinorVersion: 1, OwnerID: owner,
		Auth: nfsclient.AuthSys{MachineName: owner, UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown(context.Background()) })
	return c
}

// appendLine opens name, reads its size and writes line at the end, as a
// client does for O_APPEND (NFS has no append operation), then closes.
func appendLine(ctx context.Context, c *nfsclient.Client, root []byte, name, line string) error {
	f, err := c.Create(ctx, root, name, nfsclient.OpenOptions{Mode: nfsclient.Unchecked,
		Attrs: nfsclient.Attrs{}.WithMode(0o666)})
	if err != nil {
		return err
	}
	a, err := c.GetAttr(ctx, f.FH, nfsclient.Bitmap(nfsv4.FATTR4_SIZE))
	if err != nil {
		return err
	}
	if _, err := c.Write(ctx, f, a.Size, []byte(line), nfsv4.FILE_SYNC4); err != nil {
		return err
	}
	return c.CloseFile(ctx, f)
}

func readAll(ctx context.Context, t *testing.T, c *nfsclient.Client, root []byte, name string) []byte {
	t.Helper()
	f, err := c.Open(ctx, root, name, nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseFile(ctx, f)
	var out []byte
	for {
		b, eof, err := c.Read(ctx, f, uint64(len(out)), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		if eof || len(b) == 0 {
			return out
		}
	}
}

func TestTwoClientsSeeEachOthersChangesAtOpen(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	a, b := dialClient(t, e, "client-a"), dialClient(t, e, "client-b")
	rootA, err := a.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rootB, err := b.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Create(ctx, rootA, "shared.txt", nfsclient.OpenOptions{Mode: nfsclient.Guarded,
		Attrs: nfsclient.Attrs{}.WithMode(0o666)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, f, 0, []byte("from a"), nfsv4.UNSTABLE4); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseFile(ctx, f); err != nil {
		t.Fatal(err)
	}
	if got := readAll(ctx, t, b, rootB, "shared.txt"); string(got) != "from a" {
		t.Fatalf("client b opened %q after a closed", got)
	}
	g, err := b.Open(ctx, rootB, "shared.txt", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, g, 0, []byte("FROM B, longer"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseFile(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := readAll(ctx, t, a, rootA, "shared.txt"); string(got) != "FROM B, longer" {
		t.Fatalf("client a opened %q after b closed", got)
	}
	// And the bucket gets the last close's content.
	e.flush()
	if got, ok := e.get("shared.txt"); !ok || string(got) != "FROM B, longer" {
		t.Fatalf("bucket holds %q", got)
	}
}

// The seed 002 experiment over the wire: two clients append lines to one
// file in turn, each append a separate open, size check, write and close,
// as O_APPEND works over NFS. The turns make the appends not overlap (as
// the experiment's 200 ms spacing did); what is tested is that each client
// sees the other's last append when it opens the file, so no line is lost.
// (Appends that overlap in time race on NFS without locks, on any server.)
func TestAppendsFromTwoClientsInterleaveWithoutLoss(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	clients := []*nfsclient.Client{dialClient(t, e, "writer1"), dialClient(t, e, "writer2")}
	turns := []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	turns[0] <- struct{}{}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w, c := range clients {
		root, err := c.RootFH(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 5; i++ {
				<-turns[w]
				err := appendLine(ctx, c, root, "concurrent.txt", fmt.Sprintf("writer%d-line%d\n", w+1, i))
				turns[1-w] <- struct{}{}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	root, _ := clients[0].RootFH(ctx)
	got := strings.Split(strings.TrimSuffix(string(readAll(ctx, t, clients[0], root, "concurrent.txt")), "\n"), "\n")
	var want []string
	for i := 1; i <= 5; i++ {
		want = append(want, fmt.Sprintf("writer1-line%d", i), fmt.Sprintf("writer2-line%d", i))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("file holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestHundredsOfConnectionsStayBounded(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	const n = 300
	conns := make([]*nfsclient.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := nfsclient.DialConn(ctx, e.addr, nfsclient.ConnOptions{Auth: nfsclient.AuthSys{UID: 1000, GID: 1000}})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Null(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := connCount(e.srv); got != n {
		t.Fatalf("server tracks %d connections, want %d", got, n)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for connCount(e.srv) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("server still tracks %d connections after the clients closed", connCount(e.srv))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func connCount(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
