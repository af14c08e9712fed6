package fuse_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/heartbeat"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// sharedMounts mounts two servers of one file system, each its own
// meta.Store and vfs.FS on one kv store with a heartbeat, and returns
// their mount points. The servers have no bucket: the tests write and
// lock only, and nothing is exported.
func sharedMounts(t *testing.T) (a, b string) {
	t.Helper()
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mount := func(id uint64) string {
		m, err := meta.Open(ctx, db, meta.Options{ExportDelay: time.Minute, Server: id})
		if err != nil {
			t.Fatal(err)
		}
		beats, err := heartbeat.Start(ctx, db, id, 50*time.Millisecond, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(beats.Stop)
		fs := vfs.New(m, nil, nil, vfs.Config{Liveness: beats, SharedLockRetry: 10 * time.Millisecond})
		t.Cleanup(fs.WaitCloses) // before the store is closed
		mnt := t.TempDir()
		srv, err := bfuse.Mount(fs, mnt, bfuse.Options{Name: "bucketfs-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := srv.Unmount(); err != nil {
				t.Errorf("unmount: %v", err)
			}
		})
		return mnt
	}
	return mount(1), mount(2)
}

func fcntlLock(f *os.File, cmd int, typ int16, start, n int64) (unix.Flock_t, error) {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: n}
	err := unix.FcntlFlock(f.Fd(), cmd, &lk)
	return lk, err
}

// fcntl locks taken through the FUSE mounts of two servers of one file
// system conflict as on one: a write lock through one mount refuses
// overlapping locks through the other (even from the same process, which
// is one lock owner to each mount), F_GETLK through the other reports it,
// an F_SETLKW through the other is granted once it is unlocked, and
// closing a file releases its locks for the other mount too. flock locks
// conflict the same way.
func TestLocksThroughTwoServersMountsConflict(t *testing.T) {
	mntA, mntB := sharedMounts(t)
	writeFile(t, filepath.Join(mntA, "db"), make([]byte, 1000))
	fa := openFile(t, filepath.Join(mntA, "db"), os.O_RDWR, 0)
	fb := openFile(t, filepath.Join(mntB, "db"), os.O_RDWR, 0)

	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 100); err != nil {
		t.Fatalf("F_SETLK through a: %v", err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_RDLCK, 50, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("F_SETLK through b over a's write lock = %v, want EAGAIN", err)
	}
	lk, err := fcntlLock(fb, unix.F_GETLK, unix.F_RDLCK, 50, 10)
	if err != nil || lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 {
		t.Fatalf("F_GETLK through b = %+v, %v; want a's write lock on [0,100)", lk, err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 100, 100); err != nil {
		t.Fatalf("F_SETLK through b beside a's lock: %v", err)
	}

	granted := make(chan error, 1)
	go func() {
		_, err := fcntlLock(fb, unix.F_SETLKW, unix.F_WRLCK, 0, 10)
		granted <- err
	}()
	select {
	case err := <-granted:
		t.Fatalf("F_SETLKW through b returned %v while a held the range", err)
	default:
	}
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_UNLCK, 0, 100); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("F_SETLKW through b after a's unlock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("F_SETLKW through b still waits after a's unlock")
	}
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_RDLCK, 5, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("F_SETLK through a over b's granted lock = %v, want EAGAIN", err)
	}

	if err := unix.Flock(int(fa.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("flock through a: %v", err)
	}
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("exclusive flock through b beside a's shared one = %v, want EWOULDBLOCK", err)
	}
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("shared flock through b beside a's shared one: %v", err)
	}

	// Closing b's file drops all its locks, for a too.
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's locks to go with its close", func() bool {
		_, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 0)
		return err == nil
	})
	// b's flock goes with the RELEASE the kernel sends after the close
	// returned, not with the close itself.
	eventually(t, "b's flock to go with its release", func() bool {
		return unix.Flock(int(fa.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
	})
}
