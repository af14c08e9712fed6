package posixtest

// Workloads on advisory locks: flock between open file descriptions, fcntl
// record locks between processes.

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FlockLocksConflictBetweenOpenFileDescriptions: flock locks of two opens
// of one file share when both are shared and exclude otherwise, a lock
// upgrades when no one else holds one, and a blocked LOCK_EX is granted
// when the holder closes its file. The files are open for writing: the
// Linux NFS client makes flock a whole-file fcntl lock on the server, and
// refuses (EBADF) an exclusive one on a descriptor open for reading only,
// as it refuses F_WRLCK there.
func FlockLocksConflictBetweenOpenFileDescriptions(t testing.TB, dir string) {
	p := filepath.Join(dir, "lockfile")
	writeFile(t, p, []byte("x"))
	f1 := openFile(t, p, os.O_RDWR, 0)
	f2 := openFile(t, p, os.O_RDWR, 0)
	fd1, fd2 := int(f1.Fd()), int(f2.Fd())

	if err := unix.Flock(fd1, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd2, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	wantErrno(t, "LOCK_EX beside a shared lock", unix.Flock(fd2, unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK)
	if err := unix.Flock(fd2, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd1, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("upgrade to exclusive with no other holder: %v", err)
	}
	wantErrno(t, "LOCK_SH beside an exclusive lock", unix.Flock(fd2, unix.LOCK_SH|unix.LOCK_NB), syscall.EWOULDBLOCK)
	wantErrno(t, "LOCK_EX beside an exclusive lock", unix.Flock(fd2, unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK)

	// A blocking request is granted once the holder closes its file.
	granted := make(chan error, 1)
	go func() { granted <- unix.Flock(fd2, unix.LOCK_EX) }()
	f1.Close()
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("blocking LOCK_EX: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("blocking LOCK_EX not granted after the holder closed its file")
	}
	// Now a third open file description is the one shut out.
	f3 := openFile(t, p, os.O_RDWR, 0)
	wantErrno(t, "LOCK_SH while another holds LOCK_EX", unix.Flock(int(f3.Fd()), unix.LOCK_SH|unix.LOCK_NB), syscall.EWOULDBLOCK)
}

// FcntlLocksConflictBetweenProcesses: F_GETLK shows another process's
// write lock with its range and pid, F_SETLK over it answers EAGAIN, a
// range beside it is free, and the lock goes when its process exits.
func FcntlLocksConflictBetweenProcesses(t testing.TB, dir string) {
	p := filepath.Join(dir, "db")
	writeFile(t, p, make([]byte, 1000))
	holder := holdFcntlLockElsewhere(t, p)

	f := openFile(t, p, os.O_RDWR, 0)
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: 50, Len: 10}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 || int(lk.Pid) != holder.pid() {
		t.Fatalf("F_GETLK: %+v; want the helper's write lock on [0,100) with pid %d", lk, holder.pid())
	}
	lk = unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: 50, Len: 10}
	wantErrno(t, "F_SETLK over the helper's lock", unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk), syscall.EAGAIN)
	// A range beside the helper's is free.
	lk = unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 100, Len: 100}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatalf("F_SETLK beside the helper's lock: %v", err)
	}
	lk = unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type != unix.F_WRLCK {
		t.Fatalf("F_GETLK of the whole file: %+v %v", lk, err)
	}

	// The helper's exit releases its lock.
	holder.release(t)
	eventually(t, "the helper's lock to go with it", func() bool {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 100}
		return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk) == nil
	})
}
