package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"golang.org/x/sys/unix"

	"bucketfs/internal/nfsclient"
)

// Data written but not yet made durable when PostgreSQL crashes (kill -9
// of all its processes) may be lost with the crash, but then the call
// that makes it durable afterwards must not say it is: an fsync through
// FUSE fails, and an NFS COMMIT answers another write verifier than the
// WRITE did (so that the client sends the data again, RFC 8881 §18.32.3).
// If either says the data is durable, it must read back whole.
func TestClusterDurabilityCallsAfterADatabaseCrashDoNotVouchForLostData(t *testing.T) {
	c := startCluster(t, clusterOptions{exportDelay: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("written before the database crashed\n"), 3000) // about 100 KB

	// The files exist, durably, before the writes.
	ff, err := os.OpenFile(filepath.Join(c.fuse().mnt, "through-fuse"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	if err := ff.Sync(); err != nil {
		t.Fatal(err)
	}
	a := c.nfsA().nfs
	root, err := a.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := a.Create(ctx, root, "through-nfs", nfsclient.OpenOptions{Mode: nfsclient.Guarded,
		Attrs: nfsclient.Attrs{}.WithMode(0o644)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, fa.FH, 0, 0); err != nil {
		t.Fatal(err)
	}

	// Written, not made durable, and the database crashes at once (its
	// log writer flushes asynchronous commits within 200 ms). The kernel
	// may hold pages written through FUSE back: sync_file_range hands them
	// to the FUSE server, without an fsync.
	if _, err := ff.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := unix.SyncFileRange(int(ff.Fd()), 0, 0,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
		t.Fatalf("sync_file_range: %v", err)
	}
	w, err := a.Write(ctx, fa, 0, data, nfsv4.UNSTABLE4)
	if err != nil || int(w.Count) != len(data) {
		t.Fatalf("unstable write through nfs-a: %+v, %v", w, err)
	}
	c.pg.Kill()
	c.pg.Start()
	b := &nfsFS{label: "nfs-b", c: c.nfsB().nfs}

	readBack := func(p string) []byte {
		got, err := bounded(opDeadline, func(ctx context.Context) ([]byte, error) { return b.readFile(ctx, p) })
		if err != nil {
			t.Fatalf("read %s through nfs-b: %v", p, err)
		}
		return got
	}
	_, ferr := bounded(opDeadline, func(context.Context) (struct{}, error) { return struct{}{}, ff.Sync() })
	if ferr == nil {
		if got := readBack("through-fuse"); !bytes.Equal(got, data) {
			t.Errorf("fsync through FUSE after the database's crash succeeded, yet the file holds %d bytes, not the %d written", len(got), len(data))
		} else {
			t.Logf("fsync through FUSE after the database's crash succeeded, and the file holds what was written")
		}
	} else {
		t.Logf("fsync through FUSE after the database's crash: %v", ferr)
	}
	verf, cerr := bounded(opDeadline, func(ctx context.Context) ([8]byte, error) { return a.Commit(ctx, fa.FH, 0, 0) })
	switch {
	case cerr != nil:
		t.Logf("COMMIT through nfs-a after the database's crash: %v", cerr)
	case verf != w.Verifier:
		t.Logf("COMMIT through nfs-a after the database's crash answers a new verifier: the client writes again")
	default:
		if got := readBack("through-nfs"); !bytes.Equal(got, data) {
			t.Errorf("COMMIT through nfs-a after the database's crash answered the WRITE's verifier, yet the file holds %d bytes, not the %d written", len(got), len(data))
		}
	}
}
