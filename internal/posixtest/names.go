package posixtest

// Workloads on the namespace: every kind of node, links, removal, names.

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// EveryKindOfNodeCanBeCreated: directories, files, fifos, character
// devices, sockets and symlinks are made with the mode asked for, a
// directory counts its links and adds one to its parent's, and an existing
// name refuses another with EEXIST.
func EveryKindOfNodeCanBeCreated(t testing.TB, dir string) {
	requireRoot(t, "it makes a character device (CAP_MKNOD)")
	path := func(p string) string { return filepath.Join(dir, p) }
	rootLinks := stat(t, dir).Nlink
	if err := os.Mkdir(path("dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("dir")); st.Mode != syscall.S_IFDIR|0o750 || st.Nlink != 2 {
		t.Fatalf("dir: mode %o nlink %d, want %o 2", st.Mode, st.Nlink, syscall.S_IFDIR|0o750)
	}
	if n := stat(t, dir).Nlink; n != rootLinks+1 {
		t.Fatalf("parent nlink %d after mkdir, want %d", n, rootLinks+1)
	}
	wantErrno(t, "mkdir of an existing name", os.Mkdir(path("dir"), 0o755), syscall.EEXIST)

	f, err := os.OpenFile(path("dir/file"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st := stat(t, path("dir/file")); st.Mode != syscall.S_IFREG|0o640 || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("file: mode %o size %d nlink %d", st.Mode, st.Size, st.Nlink)
	}
	_, err = os.OpenFile(path("dir/file"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	wantErrno(t, "O_CREAT|O_EXCL of an existing name", err, syscall.EEXIST)

	if err := unix.Mkfifo(path("fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("fifo")); st.Mode != syscall.S_IFIFO|0o640 {
		t.Fatalf("fifo: mode %o, want %o", st.Mode, syscall.S_IFIFO|0o640)
	}
	dev := unix.Mkdev(1, 3)
	if err := unix.Mknod(path("null"), syscall.S_IFCHR|0o600, int(dev)); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("null")); st.Mode != syscall.S_IFCHR|0o600 || st.Rdev != dev {
		t.Fatalf("char device: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, syscall.S_IFCHR|0o600, dev)
	}
	if err := unix.Mknod(path("plain"), syscall.S_IFREG|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("plain")); st.Mode != syscall.S_IFREG|0o600 {
		t.Fatalf("mknod S_IFREG: mode %o", st.Mode)
	}
	if err := unix.Mknod(path("sock"), syscall.S_IFSOCK|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("sock")); st.Mode != syscall.S_IFSOCK|0o600 {
		t.Fatalf("mknod S_IFSOCK: mode %o", st.Mode)
	}

	const target = "dir/file"
	if err := os.Symlink(target, path("link")); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, path("link")); st.Mode != syscall.S_IFLNK|0o777 || st.Size != int64(len(target)) {
		t.Fatalf("symlink: mode %o size %d", st.Mode, st.Size)
	}
	if got, err := os.Readlink(path("link")); err != nil || got != target {
		t.Fatalf("readlink: %q %v", got, err)
	}
	// Following the link reaches the file.
	writeFile(t, path("link"), []byte("through the link"))
	if got := readFile(t, path("dir/file")); string(got) != "through the link" {
		t.Fatalf("file written through the symlink reads %q", got)
	}
	wantErrno(t, "symlink over an existing name", os.Symlink("x", path("fifo")), syscall.EEXIST)
}

// HardLinksCountTheirNamesAndShareContent: every name of a file has its
// inode number and counts in nlink, a write through one shows through the
// others, unlinking one leaves the rest, and a directory cannot be linked.
func HardLinksCountTheirNamesAndShareContent(t testing.TB, dir string) {
	path := func(p string) string { return filepath.Join(dir, p) }
	mkdir(t, path("sub"), 0o755)
	a, b, c := path("a"), path("b"), path("sub/c")
	writeFile(t, a, []byte("shared"))
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, c); err != nil {
		t.Fatal(err)
	}
	sa, sb, sc := stat(t, a), stat(t, b), stat(t, c)
	if sa.Ino != sb.Ino || sa.Ino != sc.Ino {
		t.Fatalf("inode numbers %d %d %d differ", sa.Ino, sb.Ino, sc.Ino)
	}
	if sa.Nlink != 3 {
		t.Fatalf("nlink %d, want 3", sa.Nlink)
	}
	// A write through one name shows through the others.
	f := openFile(t, b, os.O_WRONLY, 0)
	if _, err := f.WriteAt([]byte("SH"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readFile(t, c); string(got) != "SHared" {
		t.Fatalf("sub/c reads %q after a write through b", got)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a after unlink: %v", err)
	}
	if got := readFile(t, b); string(got) != "SHared" {
		t.Fatalf("b reads %q after a was unlinked", got)
	}
	if n := stat(t, b).Nlink; n != 2 {
		t.Fatalf("nlink %d after one unlink, want 2", n)
	}
	wantErrno(t, "link to an existing name", os.Link(b, c), syscall.EEXIST)
	wantErrno(t, "link of a directory", os.Link(path("sub"), path("sub2")), syscall.EPERM)
}

// UnlinkAndRmdirRemoveOnlyWhatTheyMay: rmdir refuses a non-empty directory
// and a file, unlink refuses a directory and a missing name, an unlinked
// file stays readable through a descriptor opened before, and a directory
// emptied of its subdirectory drops back to two links and can go.
func UnlinkAndRmdirRemoveOnlyWhatTheyMay(t testing.TB, dir string) {
	path := func(p string) string { return filepath.Join(dir, p) }
	if err := os.MkdirAll(path("d/inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path("d/f"), []byte("x"))
	wantErrno(t, "rmdir of a non-empty directory", syscall.Rmdir(path("d")), syscall.ENOTEMPTY)
	wantErrno(t, "unlink of a directory", syscall.Unlink(path("d/inner")), syscall.EISDIR)
	wantErrno(t, "rmdir of a file", syscall.Rmdir(path("d/f")), syscall.ENOTDIR)
	wantErrno(t, "unlink of a missing name", syscall.Unlink(path("d/nothing")), syscall.ENOENT)

	// An unlinked file stays readable through a descriptor opened before.
	f := openFile(t, path("d/f"), os.O_RDONLY, 0)
	if err := syscall.Unlink(path("d/f")); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(f); err != nil || string(got) != "x" {
		t.Fatalf("read of an unlinked open file: %q %v", got, err)
	}
	f.Close()

	if err := syscall.Rmdir(path("d/inner")); err != nil {
		t.Fatal(err)
	}
	if n := stat(t, path("d")).Nlink; n != 2 {
		t.Fatalf("d has nlink %d after its subdirectory went, want 2", n)
	}
	if err := syscall.Rmdir(path("d")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name() == "d" {
			t.Fatal("d is still listed after rmdir")
		}
	}
}

// AFileUnlinkedWhileOpenHasNoLinksLeft: fstat of a file whose only name
// was unlinked while it was open reports nlink 0, and its content stays.
func AFileUnlinkedWhileOpenHasNoLinksLeft(t testing.TB, dir string) {
	p := filepath.Join(dir, "f")
	writeFile(t, p, []byte("x"))
	f := openFile(t, p, os.O_RDONLY, 0)
	if err := syscall.Unlink(p); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Fatalf("fstat of an unlinked open file: nlink %d, %v; want 0", st.Nlink, err)
	}
	if got, err := io.ReadAll(f); err != nil || string(got) != "x" {
		t.Fatalf("read of an unlinked open file: %q %v", got, err)
	}
}

// ANameLongerThan255BytesIsTooLong: every call that looks up a name of 256
// bytes answers ENAMETOOLONG, not ENOENT; a name of 255 bytes is fine.
func ANameLongerThan255BytesIsTooLong(t testing.TB, dir string) {
	d := filepath.Join(dir, "d")
	mkdir(t, d, 0o755)
	writeFile(t, d+"/f", []byte("x"))
	LongNamesAreRefusedIn(t, d, d+"/f")
	if err := os.WriteFile(d+"/"+strings.Repeat("n", 255), []byte("ok"), 0o644); err != nil {
		t.Fatalf("a 255-byte name: %v", err)
	}
}

// LongNamesAreRefusedIn checks that every call that looks up a 256-byte
// name in dir, which must exist, answers ENAMETOOLONG; file is an existing
// file to link and rename from, which stays where it is.
func LongNamesAreRefusedIn(t testing.TB, dir, file string) {
	t.Helper()
	p := filepath.Join(dir, strings.Repeat("n", 256))
	other := filepath.Join(filepath.Dir(file), "g")
	calls := map[string]func() error{
		"stat":        func() error { _, err := os.Lstat(p); return err },
		"open":        func() error { _, err := os.Open(p); return err },
		"create":      func() error { return os.WriteFile(p, nil, 0o644) },
		"chmod":       func() error { return os.Chmod(p, 0o600) },
		"chown":       func() error { return os.Chown(p, 1, 1) },
		"truncate":    func() error { return os.Truncate(p, 0) },
		"unlink":      func() error { return syscall.Unlink(p) },
		"rmdir":       func() error { return syscall.Rmdir(p) },
		"mkdir":       func() error { return os.Mkdir(p, 0o755) },
		"link":        func() error { return os.Link(file, p) },
		"rename":      func() error { return os.Rename(file, p) },
		"rename from": func() error { return os.Rename(p, other) },
		"symlink":     func() error { return os.Symlink("t", p) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, syscall.ENAMETOOLONG) {
			var errno syscall.Errno
			errors.As(err, &errno)
			t.Errorf("%s of a 256-byte name in %s: %v (%v), want ENAMETOOLONG", name, dir, errno, err == nil)
		}
	}
}
