package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"golang.org/x/sys/unix"

	"bucketfs/internal/nfsclient"
)

// leaseTime is the servers' lease: a dead server's locks stop counting
// once it has not renewed its heartbeat for this long (README, "Locks").
const leaseTime = 10 * time.Second

// setlk takes (typ F_WRLCK or F_RDLCK) or releases (F_UNLCK) a POSIX
// record lock on f without waiting (F_SETLK).
func setlk(f *os.File, typ int16, off, n int64) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: n}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
}

// nfsDenied reports whether err is NFS4ERR_DENIED, a lock held by
// another owner.
func nfsDenied(err error) bool {
	return errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED))
}

// A byte-range lock is one lock whichever server it is asked through: a
// lock held through one NFS server conflicts with one asked through the
// other and with a POSIX lock through the FUSE mount (and the reverse),
// ranges that do not overlap do not conflict, and an unlock releases it
// for the others at once. When the server holding it is killed -9, it is
// released for the others after the lease time, and not before.
func TestClusterLocksConflictAcrossServers(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	a, b := c.nfsA().nfs, c.nfsB().nfs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := (&nfsFS{label: "nfs-a", c: a}).writeFile(ctx, "lockf", []byte("locked bytes\n"), true); err != nil {
		t.Fatal(err)
	}
	root := func(c *nfsclient.Client) []byte {
		fh, err := c.RootFH(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fh
	}
	fa, err := a.Open(ctx, root(a), "lockf", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.Open(ctx, root(b), "lockf", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ff, err := os.OpenFile(filepath.Join(c.fuse().mnt, "lockf"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()

	// Held through nfs-a: bytes 0-99.
	if err := a.Lock(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatalf("lock through nfs-a: %v", err)
	}
	if err := b.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !nfsDenied(err) {
		t.Fatalf("a lock through nfs-b over nfs-a's = %v, want NFS4ERR_DENIED", err)
	}
	denied, err := b.LockT(ctx, fb, nfsv4.READ_LT, 90, 20)
	if err != nil || denied == nil || denied.Offset != 0 || denied.Length != 100 || denied.Locktype != nfsv4.WRITE_LT {
		t.Fatalf("LOCKT through nfs-b over nfs-a's lock = %+v, %v; want nfs-a's write lock of 0-99", denied, err)
	}
	if err := setlk(ff, unix.F_WRLCK, 0, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("fcntl lock through FUSE over nfs-a's = %v, want EAGAIN", err)
	}
	if err := setlk(ff, unix.F_RDLCK, 99, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("fcntl read lock through FUSE over nfs-a's write lock = %v, want EAGAIN", err)
	}
	if err := b.Lock(ctx, fb, nfsv4.WRITE_LT, 100, 10); err != nil {
		t.Fatalf("a lock through nfs-b beside nfs-a's: %v", err)
	}
	if err := setlk(ff, unix.F_WRLCK, 200, 10); err != nil {
		t.Fatalf("fcntl lock through FUSE beside the others: %v", err)
	}

	// nfs-a unlocks: nfs-b takes bytes 50-59 at once, FUSE holds 200-209,
	// and each then conflicts with the other.
	if err := a.LockU(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); err != nil {
		t.Fatalf("a lock through nfs-b after nfs-a's unlock: %v", err)
	}
	if err := setlk(ff, unix.F_WRLCK, 55, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("fcntl lock through FUSE over nfs-b's = %v, want EAGAIN", err)
	}
	if err := a.Lock(ctx, fa, nfsv4.READ_LT, 205, 1); !nfsDenied(err) {
		t.Fatalf("a lock through nfs-a over FUSE's = %v, want NFS4ERR_DENIED", err)
	}
	if err := setlk(ff, unix.F_UNLCK, 200, 10); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(ctx, fa, nfsv4.WRITE_LT, 200, 10); err != nil {
		t.Fatalf("a lock through nfs-a after FUSE's unlock: %v", err)
	}
	if err := b.LockU(ctx, fb, nfsv4.WRITE_LT, 50, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.LockU(ctx, fb, nfsv4.WRITE_LT, 100, 10); err != nil {
		t.Fatal(err)
	}

	// nfs-a holds 200-209 and now 0-99 again, and dies.
	if err := a.Lock(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatalf("lock through nfs-a again: %v", err)
	}
	killed := time.Now()
	c.nfsA().kill9()
	if err := b.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !nfsDenied(err) {
		t.Fatalf("right after nfs-a's death, a lock through nfs-b over its lock = %v, want NFS4ERR_DENIED", err)
	}
	if err := setlk(ff, unix.F_WRLCK, 0, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("right after nfs-a's death, an fcntl lock through FUSE over its lock = %v, want EAGAIN", err)
	}
	if early := time.Since(killed); early >= leaseTime {
		t.Fatalf("the checks right after the kill took %v, past the lease time: the machine is too slow for this test", early)
	}
	var nfsFree, fuseFree time.Duration
	deadline := killed.Add(3 * leaseTime)
	for nfsFree == 0 || fuseFree == 0 {
		if nfsFree == 0 {
			switch err := b.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); {
			case err == nil:
				nfsFree = time.Since(killed)
			case !nfsDenied(err):
				t.Fatalf("lock through nfs-b after nfs-a's death: %v", err)
			}
		}
		if fuseFree == 0 {
			switch err := setlk(ff, unix.F_WRLCK, 200, 10); {
			case err == nil:
				fuseFree = time.Since(killed)
			case !errors.Is(err, syscall.EAGAIN):
				t.Fatalf("fcntl lock through FUSE after nfs-a's death: %v", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nfs-a's locks still bind the others %v after its death (nfs-b free: %v, FUSE free: %v)",
				time.Since(killed), nfsFree, fuseFree)
		}
		time.Sleep(50 * time.Millisecond) // polling: nothing tells the others that a lease ran out
	}
	t.Logf("nfs-a's locks were released for nfs-b %v and for FUSE %v after its death (lease time %v)",
		nfsFree.Round(time.Millisecond), fuseFree.Round(time.Millisecond), leaseTime)
	// "After the lease time" as the others see it: from the last heartbeat
	// they saw, which may be up to a renewal interval (a quarter of the
	// lease) older than the kill, and which they may have seen late.
	for _, d := range []time.Duration{nfsFree, fuseFree} {
		if d < leaseTime/2 {
			t.Errorf("a dead server's lock was released %v after its death, before its lease (%v) had run out", d, leaseTime)
		}
		if d > leaseTime*2 {
			t.Errorf("a dead server's lock was released only %v after its death (lease time %v)", d, leaseTime)
		}
	}
	// And the survivors' locks conflict with each other again.
	if err := setlk(ff, unix.F_WRLCK, 55, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("fcntl lock through FUSE over nfs-b's after the failover = %v, want EAGAIN", err)
	}
}
