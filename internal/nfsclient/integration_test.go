package nfsclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/engine"
	"bucketfs/internal/frontend/nfs4"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/nfsclient"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

// The tests in this file run the client against the real server of
// internal/frontend/nfs4 on an engine over the embedded S3 store. The
// unit tests of the package use the fake server of fakeserver_test.go.

// TestMain stops the shared S3 store and the PostgreSQL server the tests'
// stores run on with BUCKETFS_TEST_KV=postgres (package testkv) when they
// have run.
func TestMain(m *testing.M) { os.Exit(s3test.Main(pgtest.M(m))) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer runs an engine on a fresh bucket and an NFS server on a
// loopback port, both stopped at the end of the test. The root of a new
// file system belongs to root (0755 with no defaults given), so
// startServer makes /shared (0777) for the tests to work in as a user.
func startServer(t *testing.T) string {
	t.Helper()
	st, bucket := s3test.NewBucket(t)
	dir := t.TempDir()
	eng, err := engine.Open(context.Background(), engine.Config{StateDir: dir, Bucket: bucket,
		Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: st.Region,
		ExportDelay: 50 * time.Millisecond, OpTimeout: 10 * time.Second, Logger: quiet,
		KV: testkv.ForEngine(t, dir)}) // PostgreSQL if BUCKETFS_TEST_KV says so
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(func() { eng.Close() })
	srv, err := nfs4.New(context.Background(), eng.FS, nfs4.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	addr := ln.Addr().String()
	admin := dialAs(t, addr, 1, 0)
	root, err := admin.RootFH(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetAttr(context.Background(), root, nfsclient.Attrs{}.WithMode(0o755)); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Mkdir(context.Background(), root, "shared", nfsclient.Attrs{}.WithMode(0o777)); err != nil {
		t.Fatal(err)
	}
	return addr
}

// dial connects as uid and gid 1000.
func dial(t *testing.T, addr string, minor uint32) *nfsclient.Client {
	t.Helper()
	return dialAs(t, addr, minor, 1000)
}

func dialAs(t *testing.T, addr string, minor, uid uint32) *nfsclient.Client {
	t.Helper()
	c, err := nfsclient.Dial(context.Background(), addr, nfsclient.Config{MinorVersion: minor,
		Auth: nfsclient.AuthSys{MachineName: "test", UID: uid, GID: uid}})
	if err != nil {
		t.Fatalf("dial (minor version %d): %v", minor, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientDrivesTheRealServer(t *testing.T) {
	addr := startServer(t)
	for _, minor := range []uint32{0, 1, 2} {
		t.Run(map[uint32]string{0: "v4.0", 1: "v4.1", 2: "v4.2"}[minor], func(t *testing.T) {
			ctx := context.Background()
			c := dial(t, addr, minor)
			root, err := c.LookupPath(ctx, "/shared")
			if err != nil {
				t.Fatal(err)
			}
			dir, err := c.Mkdir(ctx, root, "d"+string(rune('0'+minor)), nfsclient.Attrs{}.WithMode(0o755))
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.Create(ctx, dir, "file", nfsclient.OpenOptions{Mode: nfsclient.Guarded,
				Attrs: nfsclient.Attrs{}.WithMode(0o640)})
			if err != nil {
				t.Fatal(err)
			}
			if f.Attrs.Type != nfsv4.NF4REG || f.Attrs.Mode != 0o640 || f.Attrs.Owner != "1000" {
				t.Errorf("created file attributes %+v", f.Attrs)
			}
			data := bytes.Repeat([]byte("bucketfs"), 100000)
			w, err := c.Write(ctx, f, 0, data, nfsv4.UNSTABLE4)
			if err != nil || w.Count != uint32(len(data)) {
				t.Fatalf("Write = %+v, %v", w, err)
			}
			if verf, err := c.Commit(ctx, f.FH, 0, 0); err != nil || verf != w.Verifier {
				t.Errorf("Commit = %x, %v; WRITE verifier %x", verf, err, w.Verifier)
			}
			got, eof, err := c.Read(ctx, f, 0, uint32(len(data)))
			if err != nil || !eof || !bytes.Equal(got, data) {
				t.Errorf("Read: %d bytes, eof %v, %v", len(got), eof, err)
			}
			a, err := c.GetAttr(ctx, f.FH, nfsclient.CommonAttrs())
			if err != nil || a.Size != uint64(len(data)) || a.NumLinks != 1 {
				t.Errorf("GetAttr = %+v, %v", a, err)
			}

			// Locks from a second client conflict with this one's.
			if err := c.Lock(ctx, f, nfsv4.WRITE_LT, 0, 100); err != nil {
				t.Fatalf("Lock: %v", err)
			}
			other := dial(t, addr, minor)
			g, err := other.Open(ctx, dir, "file", nfsclient.OpenOptions{Access: nfsv4.OPEN4_SHARE_ACCESS_READ})
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Lock(ctx, g, nfsv4.READ_LT, 50, 10); !errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED)) {
				t.Errorf("conflicting Lock: %v", err)
			}
			if denied, err := other.LockT(ctx, g, nfsv4.READ_LT, 0, 1); err != nil || denied == nil {
				t.Errorf("LockT = %+v, %v", denied, err)
			}
			if err := c.LockU(ctx, f, nfsv4.WRITE_LT, 0, 100); err != nil {
				t.Errorf("LockU: %v", err)
			}
			if err := other.Lock(ctx, g, nfsv4.READ_LT, 50, 10); err != nil {
				t.Errorf("Lock after unlock: %v", err)
			}
			if err := other.LockU(ctx, g, nfsv4.READ_LT, 50, 10); err != nil {
				t.Errorf("LockU: %v", err)
			}
			if err := other.CloseFile(ctx, g); err != nil {
				t.Errorf("CloseFile: %v", err)
			}

			if _, err := c.SetAttrStateid(ctx, f.FH, f.Stateid, nfsclient.Attrs{}.WithSize(10).WithMode(0o600)); err != nil {
				t.Errorf("SetAttr: %v", err)
			}
			if err := c.CloseFile(ctx, f); err != nil {
				t.Errorf("CloseFile: %v", err)
			}

			if _, err := c.Symlink(ctx, dir, "link", "file", nfsclient.Attrs{}); err != nil {
				t.Fatal(err)
			}
			lfh, err := c.Lookup(ctx, dir, "link")
			if err != nil {
				t.Fatal(err)
			}
			if target, err := c.Readlink(ctx, lfh); err != nil || target != "file" {
				t.Errorf("Readlink = %q, %v", target, err)
			}
			if err := c.Link(ctx, f.FH, dir, "hard"); err != nil {
				t.Errorf("Link: %v", err)
			}
			if err := c.Rename(ctx, dir, "hard", dir, "renamed"); err != nil {
				t.Errorf("Rename: %v", err)
			}
			entries, err := c.ReadDir(ctx, dir, nfsclient.Bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_SIZE))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name)
				if e.FileID == 0 {
					t.Errorf("entry %q without fileid", e.Name)
				}
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"file", "link", "renamed"}) {
				t.Errorf("ReadDir = %q", names)
			}
			if _, granted, err := c.Access(ctx, dir, nfsv4.ACCESS4_READ|nfsv4.ACCESS4_MODIFY); err != nil ||
				granted&nfsv4.ACCESS4_READ == 0 {
				t.Errorf("Access = %#x, %v", granted, err)
			}
			if err := c.Remove(ctx, dir, "renamed"); err != nil {
				t.Errorf("Remove: %v", err)
			}
			if _, err := c.Lookup(ctx, dir, "renamed"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Lookup after Remove: %v", err)
			}
			if minor > 0 {
				if err := c.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}
		})
	}
}

func TestRetransmittedCreateIsAnsweredFromTheServersReplyCache(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	c := dial(t, addr, 1)
	root, err := c.LookupPath(ctx, "/shared")
	if err != nil {
		t.Fatal(err)
	}
	mkdir := &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: &nfsv4.Createtype4_default{Type: nfsv4.NF4DIR}, Objname: "once",
		Createattrs: nfsv4.Fattr4{Attrmask: []uint32{}, AttrVals: []byte{}}}}
	first, err := c.DoCompound(ctx, &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: root}}, mkdir)
	if err != nil || first.Status != nfsv4.NFS4_OK {
		t.Fatalf("CREATE: %+v, %v", first, err)
	}
	replay, err := c.Retransmit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if replay.Status != nfsv4.NFS4_OK {
		t.Fatalf("retransmitted CREATE: %s, want the cached NFS4_OK", nfsv4.Nfsstat4_name[replay.Status])
	}
}

func TestSeekAllocateDeallocateOnMinorVersion2(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	c := dial(t, addr, 2)
	root, err := c.LookupPath(ctx, "/shared")
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Create(ctx, root, "sparse", nfsclient.OpenOptions{Attrs: nfsclient.Attrs{}.WithMode(0o644)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, f, 0, bytes.Repeat([]byte{1}, 8192), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := c.Allocate(ctx, f, 0, 1<<20); err != nil {
		t.Errorf("Allocate: %v", err)
	}
	if err := c.Deallocate(ctx, f, 0, 4096); err != nil {
		t.Errorf("Deallocate: %v", err)
	}
	if off, _, err := c.Seek(ctx, f, 0, nfsv4.NFS4_CONTENT_DATA); err != nil || off >= 1<<20 {
		t.Errorf("Seek(DATA) = %d, %v", off, err)
	}
	if err := c.CloseFile(ctx, f); err != nil {
		t.Errorf("CloseFile: %v", err)
	}
}

func TestConcurrentCallsShareTheSessionSlots(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	c := dial(t, addr, 1)
	dir, err := c.LookupPath(ctx, "/shared")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 32)
	for i := range 32 {
		go func() {
			name := "f" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			f, err := c.Create(ctx, dir, name, nfsclient.OpenOptions{Attrs: nfsclient.Attrs{}.WithMode(0o644)})
			if err == nil {
				_, err = c.Write(ctx, f, 0, []byte(name), nfsv4.FILE_SYNC4)
			}
			if err == nil {
				err = c.CloseFile(ctx, f)
			}
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	entries, err := c.ReadDir(ctx, dir, nfsclient.Bitmap(nfsv4.FATTR4_SIZE))
	if err != nil || len(entries) != 32 {
		t.Fatalf("ReadDir: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if e.Attrs.Size != uint64(len(e.Name)) {
			t.Errorf("%s has size %d", e.Name, e.Attrs.Size)
		}
	}
}
