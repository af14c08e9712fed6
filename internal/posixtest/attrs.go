package posixtest

// Workloads on attributes: mode, owner, times, extended attributes, and the
// group a set-group-id directory hands down.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ChmodChownAndUtimensChangeAttributes: chmod sets the mode with its
// special bits and does not move ctime back, chown sets the owner and
// clears the set-user-id bit, lchown changes a symlink and not its target,
// utimensat sets both times to the nanosecond, UTIME_OMIT keeps one and
// UTIME_NOW sets the current time.
func ChmodChownAndUtimensChangeAttributes(t testing.TB, dir string) {
	requireRoot(t, "it gives files to other owners")
	p := filepath.Join(dir, "f")
	writeFile(t, p, []byte("x"))
	before := stat(t, p)

	if err := syscall.Chmod(p, syscall.S_ISUID|0o750); err != nil {
		t.Fatal(err)
	}
	st := stat(t, p)
	if st.Mode != syscall.S_IFREG|syscall.S_ISUID|0o750 {
		t.Fatalf("mode %o after chmod 4750", st.Mode)
	}
	if st.Ctim.Nano() < before.Ctim.Nano() {
		t.Fatal("chmod moved ctime backwards")
	}
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	st = stat(t, p)
	if st.Uid != 1234 || st.Gid != 5678 {
		t.Fatalf("owner %d:%d after chown 1234:5678", st.Uid, st.Gid)
	}
	if st.Mode&syscall.S_ISUID != 0 {
		t.Fatalf("chown kept the set-user-id bit (mode %o)", st.Mode)
	}
	// lchown changes the link, not its target.
	l := filepath.Join(dir, "l")
	if err := os.Symlink("f", l); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(l, 42, 43); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, l); st.Uid != 42 || st.Gid != 43 {
		t.Fatalf("symlink owner %d:%d after lchown 42:43", st.Uid, st.Gid)
	}
	if st := stat(t, p); st.Uid != 1234 {
		t.Fatalf("lchown of the link changed the target's owner to %d", st.Uid)
	}

	atime := unix.Timespec{Sec: 1_000_000_000, Nsec: 123_456_789}
	mtime := unix.Timespec{Sec: 1_200_000_000, Nsec: 987_654_321}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{atime, mtime}, 0); err != nil {
		t.Fatal(err)
	}
	st = stat(t, p)
	if st.Atim.Nano() != atime.Nano() || st.Mtim.Nano() != mtime.Nano() {
		t.Fatalf("times %v %v after utimensat, want %v %v", st.Atim, st.Mtim, atime, mtime)
	}
	// UTIME_OMIT keeps one, UTIME_NOW sets the other to the current time.
	start := time.Now().Add(-time.Second)
	omit, now := unix.Timespec{Nsec: unix.UTIME_OMIT}, unix.Timespec{Nsec: unix.UTIME_NOW}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{omit, now}, 0); err != nil {
		t.Fatal(err)
	}
	st = stat(t, p)
	end := time.Now().Add(time.Second)
	if st.Atim.Nano() != atime.Nano() {
		t.Fatalf("UTIME_OMIT changed atime to %v", st.Atim)
	}
	if m := time.Unix(st.Mtim.Unix()); m.Before(start) || m.After(end) {
		t.Fatalf("UTIME_NOW set mtime to %v, want about %v", m, time.Now())
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, now}, 0); err != nil {
		t.Fatal(err)
	}
	if a := time.Unix(stat(t, p).Atim.Unix()); a.Before(start) || a.After(time.Now().Add(time.Second)) {
		t.Fatalf("UTIME_NOW set atime to %v", a)
	}
}

// UserExtendedAttributesCanBeSetListedAndRemoved: on a file and on a
// directory, user.* attributes (empty ones too) are set, sized, read,
// listed, replaced and removed, and XATTR_CREATE, XATTR_REPLACE, a short
// buffer and a missing name give EEXIST, ENODATA and ERANGE.
func UserExtendedAttributesCanBeSetListedAndRemoved(t testing.TB, dir string) {
	p, d := filepath.Join(dir, "f"), filepath.Join(dir, "d")
	writeFile(t, p, nil)
	mkdir(t, d, 0o755)
	for _, target := range []string{p, d} {
		if err := unix.Setxattr(target, "user.color", []byte("blue"), 0); err != nil {
			t.Fatalf("setxattr on %s: %v", target, err)
		}
		if err := unix.Setxattr(target, "user.empty", nil, 0); err != nil {
			t.Fatalf("setxattr of an empty value: %v", err)
		}
		if n, err := unix.Getxattr(target, "user.color", nil); err != nil || n != 4 {
			t.Fatalf("getxattr size query: %d %v, want 4", n, err)
		}
		buf := make([]byte, 64)
		n, err := unix.Getxattr(target, "user.color", buf)
		if err != nil || string(buf[:n]) != "blue" {
			t.Fatalf("getxattr: %q %v", buf[:n], err)
		}
		_, err = unix.Getxattr(target, "user.color", make([]byte, 2))
		wantErrno(t, "getxattr into a short buffer", err, syscall.ERANGE)
		n, err = unix.Listxattr(target, buf)
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
		slices.Sort(names)
		if strings.Join(names, ",") != "user.color,user.empty" {
			t.Fatalf("listxattr: %q", names)
		}
		wantErrno(t, "XATTR_CREATE of an existing name", unix.Setxattr(target, "user.color", []byte("red"), unix.XATTR_CREATE), syscall.EEXIST)
		wantErrno(t, "XATTR_REPLACE of a missing name", unix.Setxattr(target, "user.size", []byte("1"), unix.XATTR_REPLACE), syscall.ENODATA)
		if err := unix.Setxattr(target, "user.color", []byte("red"), unix.XATTR_REPLACE); err != nil {
			t.Fatalf("XATTR_REPLACE: %v", err)
		}
		if n, err := unix.Getxattr(target, "user.color", buf); err != nil || string(buf[:n]) != "red" {
			t.Fatalf("after replace: %q %v", buf[:n], err)
		}
		if err := unix.Removexattr(target, "user.color"); err != nil {
			t.Fatal(err)
		}
		_, err = unix.Getxattr(target, "user.color", buf)
		wantErrno(t, "getxattr of a removed name", err, syscall.ENODATA)
		wantErrno(t, "removexattr of a removed name", unix.Removexattr(target, "user.color"), syscall.ENODATA)
	}
}

// NewEntriesInASetGroupIDDirectoryInheritItsGroup: a file or directory made
// in a set-group-id directory takes the directory's group, and a directory
// the set-group-id bit too.
func NewEntriesInASetGroupIDDirectoryInheritItsGroup(t testing.TB, dir string) {
	requireRoot(t, "it gives a directory to another group")
	d := filepath.Join(dir, "sg")
	mkdir(t, d, 0o775)
	if err := os.Chown(d, 0, 5678); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(d, syscall.S_ISGID|0o775); err != nil {
		t.Fatal(err)
	}
	writeFile(t, d+"/file", nil)
	mkdir(t, d+"/sub", 0o755)
	if st := stat(t, d+"/file"); st.Gid != 5678 {
		t.Fatalf("file in a set-group-id directory has gid %d, want 5678", st.Gid)
	}
	if st := stat(t, d+"/sub"); st.Gid != 5678 || st.Mode&syscall.S_ISGID == 0 {
		t.Fatalf("directory in a set-group-id directory: gid %d mode %o, want 5678 with S_ISGID", st.Gid, st.Mode)
	}
}
