package nfs4

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
)

// The package's Go NFSv4 client (internal/nfsclient), written apart from
// this server, against every minor version.
func TestTheGoClientRoundTripsFilesOnEveryMinorVersion(t *testing.T) {
	e := newEnv(t, Options{})
	for _, minor := range []uint32{0, 1, 2} {
		t.Run(fmt.Sprintf("4.%d", minor), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			c, err := nfsclient.Dial(ctx, e.addr, nfsclient.Config{MinorVersion: minor})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			root, err := c.RootFH(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dir, err := c.Mkdir(ctx, root, fmt.Sprintf("v%d", minor), nfsclient.Attrs{}.WithMode(0o755))
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Create(ctx, dir, "file", nfsclient.OpenOptions{Attrs: nfsclient.Attrs{}.WithMode(0o644)})
			if err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{byte(minor + 'a')}, 300000)
			if _, err := c.Write(ctx, f, 0, data, nfsv4.UNSTABLE4); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Commit(ctx, f.FH, 0, 0); err != nil {
				t.Fatal(err)
			}
			got, _, err := c.Read(ctx, f, 0, 1<<20)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes: %v", len(got), err)
			}
			if err := c.Lock(ctx, f, nfsv4.WRITE_LT, 0, 10); err != nil {
				t.Fatal(err)
			}
			if err := c.LockU(ctx, f, nfsv4.WRITE_LT, 0, 10); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseFile(ctx, f); err != nil {
				t.Fatal(err)
			}
			if err := c.Rename(ctx, dir, "file", dir, "renamed"); err != nil {
				t.Fatal(err)
			}
			ents, err := c.ReadDir(ctx, dir, nil)
			if err != nil || len(ents) != 1 || ents[0].Name != "renamed" {
				t.Fatalf("ReadDir = %v, %v", ents, err)
			}
			if err := c.Remove(ctx, dir, "renamed"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Debian's libnfs tools speak NFSv4.0: a client nobody here wrote.
func TestLibnfsToolsListReadAndWrite(t *testing.T) {
	if _, err := exec.LookPath("nfs-ls"); err != nil {
		t.Fatal("nfs-ls not found: install libnfs-utils (.ci/run does)")
	}
	e := newEnv(t, Options{})
	e.put("dir/hello.txt", []byte("hello libnfs\n"))
	big := bytes.Repeat([]byte("0123456789"), 50000)
	e.put("dir/big.bin", big)
	_, port, _ := net.SplitHostPort(e.addr)
	url := func(p string) string { return "nfs://127.0.0.1" + p + "?version=4&nfsport=" + port }
	run := func(name string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return out
	}
	if out := run("nfs-ls", url("/dir")); !strings.Contains(string(out), "hello.txt") || !strings.Contains(string(out), "big.bin") {
		t.Errorf("nfs-ls:\n%s", out)
	}
	if out := run("nfs-cat", url("/dir/hello.txt")); string(out) != "hello libnfs\n" {
		t.Errorf("nfs-cat = %q", out)
	}
	if out := run("nfs-cat", url("/dir/big.bin")); !bytes.Equal(out, big) {
		t.Errorf("nfs-cat of %d bytes returned %d", len(big), len(out))
	}
	local := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(local, []byte("uploaded by libnfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("nfs-cp", local, url("/dir/up.txt"))
	e.flush()
	if got, ok := e.get("dir/up.txt"); !ok || string(got) != "uploaded by libnfs" {
		t.Errorf("bucket holds %q (found %v)", got, ok)
	}
}

func TestHundredsOfConnectionsStayCheap(t *testing.T) {
	e := newEnv(t, Options{})
	before := runtime.NumGoroutine()
	const n = 300
	conns := make([]*tclient, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i := range conns {
		conns[i] = e.dial(1, userCred)
	}
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := c.rpc(nfsProgram, 4, 0, nil)
			if body == nil {
				mu.Lock()
				failures = append(failures, "no reply")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(failures)
	}
	// One reader goroutine per idle connection, nothing else left over.
	if g := runtime.NumGoroutine() - before; g > n+20 {
		t.Errorf("%d goroutines for %d idle connections", g, n)
	}
	for _, c := range conns {
		c.nc.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine() - before; g > 20 {
		t.Errorf("%d goroutines left after the connections closed", g)
	}
}
