package fuse_test

// POSIX behaviour seen through a real FUSE mount: every test drives the
// mount with the same system calls a program would use.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as a helper process for what a test must do from
// another process (fcntl locks belong to a process). The parent sets
// helperEnv; the child does its part in init, before any test machinery
// runs, and exits.
const (
	helperEnv     = "BUCKETFS_POSIX_HELPER"
	helperPathEnv = "BUCKETFS_POSIX_HELPER_PATH"
)

func init() {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "fcntl-lock":
		os.Exit(holdFcntlLock(os.Getenv(helperPathEnv)))
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// holdFcntlLock write-locks bytes [0, 100) of path, says "locked" on
// stdout, and holds the lock until stdin is closed.
func holdFcntlLock(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 100}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		fmt.Printf("error: F_SETLK: %v\n", err)
		return 1
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	f.Close()
	return 0
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func openFile(t *testing.T, path string, flag int, perm os.FileMode) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestReadsAndWritesAtArbitraryOffsetsKeepEveryByte(t *testing.T) {
	e := newEnv(t)
	p := e.path("rw")
	f := openFile(t, p, os.O_RDWR|os.O_CREATE, 0o644)
	// A model of the file, updated with each write.
	var model []byte
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		off := rng.IntN(300 << 10)
		buf := make([]byte, 1+rng.IntN(20<<10))
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + len(buf); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], buf)
		// Read back a window around the write through the same descriptor.
		lo, hi := max(0, off-100), min(len(model), off+len(buf)+100)
		got := make([]byte, hi-lo)
		if _, err := f.ReadAt(got, int64(lo)); err != nil {
			t.Fatalf("read [%d,%d): %v", lo, hi, err)
		}
		if !bytes.Equal(got, model[lo:hi]) {
			t.Fatalf("write %d at %d: read back [%d,%d) differs", i, off, lo, hi)
		}
	}
	// A read that starts inside the file and runs past its end is short.
	tail := make([]byte, 1000)
	n, err := f.ReadAt(tail, int64(len(model)-10))
	if n != 10 || err != io.EOF {
		t.Fatalf("read across the end: %d bytes, %v; want 10, EOF", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A new open does not use the kernel's page cache of the old one.
	if got := readFile(t, p); !bytes.Equal(got, model) {
		t.Fatalf("file after reopen differs from what was written (%d bytes, want %d)", len(got), len(model))
	}
}

func TestAppendsFromTwoDescriptorsInterleaveWithoutLoss(t *testing.T) {
	e := newEnv(t)
	p := e.path("log")
	writeFile(t, p, []byte("start\n"))
	const perWriter = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, who := range []string{"a", "b"} {
		f := openFile(t, p, os.O_WRONLY|os.O_APPEND, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if _, err := fmt.Fprintf(f, "%s%04d\n", who, i); err != nil {
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
	lines := strings.Split(strings.TrimSuffix(string(readFile(t, p)), "\n"), "\n")
	if len(lines) != 1+2*perWriter || lines[0] != "start" {
		t.Fatalf("file has %d lines starting %q; want %d starting \"start\"", len(lines), lines[0], 1+2*perWriter)
	}
	next := map[byte]int{}
	for _, l := range lines[1:] {
		if len(l) != 5 || (l[0] != 'a' && l[0] != 'b') {
			t.Fatalf("torn line %q", l)
		}
		if n, _ := strconv.Atoi(l[1:]); n != next[l[0]] {
			t.Fatalf("line %q out of order or duplicated; want %c%04d", l, l[0], next[l[0]])
		}
		next[l[0]]++
	}
}

func TestOpenWithTruncEmptiesAnExistingFile(t *testing.T) {
	e := newEnv(t)
	p := e.path("t")
	writeFile(t, p, bytes.Repeat([]byte("old content "), 1000))
	f := openFile(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	if st, err := f.Stat(); err != nil || st.Size() != 0 {
		t.Fatalf("size after O_TRUNC: %v %v", st.Size(), err)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readFile(t, p); string(got) != "new" {
		t.Fatalf("file is %q, want \"new\"", got)
	}
	// O_CREAT|O_TRUNC on an existing name truncates too.
	writeFile(t, p, []byte("x"))
	if got := readFile(t, p); string(got) != "x" {
		t.Fatalf("file is %q after os.WriteFile, want \"x\"", got)
	}
}

func TestFtruncateShrinksAndGrowsAndTheGrownPartReadsZeros(t *testing.T) {
	e := newEnv(t)
	p := e.path("f")
	orig := bytes.Repeat([]byte{0xab}, 10000)
	writeFile(t, p, orig)
	f := openFile(t, p, os.O_RDWR, 0)
	if err := f.Truncate(3000); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 3000 {
		t.Fatalf("size after shrink %d, want 3000", st.Size())
	}
	if err := f.Truncate(9000); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 9000 {
		t.Fatalf("size after grow %d, want 9000", st.Size())
	}
	f.Close()
	want := append(bytes.Repeat([]byte{0xab}, 3000), make([]byte, 6000)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("after shrink and grow the file is not its first 3000 bytes followed by zeros")
	}
	// truncate(2) by path.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, want[:100]) {
		t.Fatalf("after truncate to 100 the file has %d bytes", len(got))
	}
}

func TestASparseFileReadsZerosInItsHoleAndSeeksFindItsData(t *testing.T) {
	e := newEnv(t)
	p := e.path("sparse")
	const off = 10 << 20
	data := bytes.Repeat([]byte("data"), 1024)
	f := openFile(t, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	size := int64(off + len(data))
	if st, _ := f.Stat(); st.Size() != size {
		t.Fatalf("size %d, want %d", st.Size(), size)
	}
	fd := int(f.Fd())
	if pos, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil || pos != off {
		t.Fatalf("SEEK_DATA from 0: %d, %v; want %d", pos, err, off)
	}
	if pos, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || pos != 0 {
		t.Fatalf("SEEK_HOLE from 0: %d, %v; want 0", pos, err)
	}
	if pos, err := unix.Seek(fd, off+10, unix.SEEK_DATA); err != nil || pos != off+10 {
		t.Fatalf("SEEK_DATA inside the data: %d, %v; want %d", pos, err, off+10)
	}
	if pos, err := unix.Seek(fd, off, unix.SEEK_HOLE); err != nil || pos != size {
		t.Fatalf("SEEK_HOLE inside the data: %d, %v; want the end, %d", pos, err, size)
	}
	_, err := unix.Seek(fd, size, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA at the end", err, syscall.ENXIO)
	f.Close()

	got := readFile(t, p)
	if int64(len(got)) != size {
		t.Fatalf("read %d bytes, want %d", len(got), size)
	}
	if i := bytes.IndexFunc(got[:off], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("the hole has a non-zero byte at %d", i)
	}
	if !bytes.Equal(got[off:], data) {
		t.Fatal("the data after the hole differs")
	}
}

func TestFallocateGrowsKeepsTheSizeOrPunchesAHole(t *testing.T) {
	e := newEnv(t)
	p := e.path("fa")
	writeFile(t, p, bytes.Repeat([]byte{'a'}, 8192))
	f := openFile(t, p, os.O_RDWR, 0)
	fd := int(f.Fd())
	size := func() int64 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if err := unix.Fallocate(fd, 0, 8192, 8192); err != nil {
		t.Fatalf("fallocate mode 0: %v", err)
	}
	if s := size(); s != 16384 {
		t.Fatalf("size after fallocate mode 0 is %d, want 16384", s)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 16384, 1<<20); err != nil {
		t.Fatalf("fallocate KEEP_SIZE: %v", err)
	}
	if s := size(); s != 16384 {
		t.Fatalf("size after fallocate KEEP_SIZE is %d, want 16384", s)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1000, 2000); err != nil {
		t.Fatalf("fallocate PUNCH_HOLE: %v", err)
	}
	if s := size(); s != 16384 {
		t.Fatalf("size after punching a hole is %d, want 16384", s)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	f.Close()
	want := bytes.Repeat([]byte{'a'}, 8192)
	clear(want[1000:3000])
	want = append(want, make([]byte, 8192)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("file differs from 'a's with [1000,3000) punched, followed by 8192 allocated zeros")
	}
	// A directory can be fsync'ed too.
	d := openFile(t, e.mnt, os.O_RDONLY, 0)
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of the root directory: %v", err)
	}
}

func TestEveryKindOfNodeCanBeCreated(t *testing.T) {
	e := newEnv(t)
	rootLinks := stat(t, e.mnt).Nlink
	if err := os.Mkdir(e.path("dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("dir")); st.Mode != syscall.S_IFDIR|0o750 || st.Nlink != 2 {
		t.Fatalf("dir: mode %o nlink %d, want %o 2", st.Mode, st.Nlink, syscall.S_IFDIR|0o750)
	}
	if n := stat(t, e.mnt).Nlink; n != rootLinks+1 {
		t.Fatalf("root nlink %d after mkdir, want %d", n, rootLinks+1)
	}
	wantErrno(t, "mkdir of an existing name", os.Mkdir(e.path("dir"), 0o755), syscall.EEXIST)

	f, err := os.OpenFile(e.path("dir/file"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st := stat(t, e.path("dir/file")); st.Mode != syscall.S_IFREG|0o640 || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("file: mode %o size %d nlink %d", st.Mode, st.Size, st.Nlink)
	}
	_, err = os.OpenFile(e.path("dir/file"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	wantErrno(t, "O_CREAT|O_EXCL of an existing name", err, syscall.EEXIST)

	if err := unix.Mkfifo(e.path("fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("fifo")); st.Mode != syscall.S_IFIFO|0o640 {
		t.Fatalf("fifo: mode %o, want %o", st.Mode, syscall.S_IFIFO|0o640)
	}
	dev := unix.Mkdev(1, 3)
	if err := unix.Mknod(e.path("null"), syscall.S_IFCHR|0o600, int(dev)); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("null")); st.Mode != syscall.S_IFCHR|0o600 || st.Rdev != dev {
		t.Fatalf("char device: mode %o rdev %#x, want %o %#x", st.Mode, st.Rdev, syscall.S_IFCHR|0o600, dev)
	}
	if err := unix.Mknod(e.path("plain"), syscall.S_IFREG|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("plain")); st.Mode != syscall.S_IFREG|0o600 {
		t.Fatalf("mknod S_IFREG: mode %o", st.Mode)
	}
	if err := unix.Mknod(e.path("sock"), syscall.S_IFSOCK|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("sock")); st.Mode != syscall.S_IFSOCK|0o600 {
		t.Fatalf("mknod S_IFSOCK: mode %o", st.Mode)
	}

	const target = "dir/file"
	if err := os.Symlink(target, e.path("link")); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("link")); st.Mode != syscall.S_IFLNK|0o777 || st.Size != int64(len(target)) {
		t.Fatalf("symlink: mode %o size %d", st.Mode, st.Size)
	}
	if got, err := os.Readlink(e.path("link")); err != nil || got != target {
		t.Fatalf("readlink: %q %v", got, err)
	}
	// Following the link reaches the file.
	writeFile(t, e.path("link"), []byte("through the link"))
	if got := readFile(t, e.path("dir/file")); string(got) != "through the link" {
		t.Fatalf("file written through the symlink reads %q", got)
	}
	wantErrno(t, "symlink over an existing name", os.Symlink("x", e.path("fifo")), syscall.EEXIST)
}

func TestHardLinksCountTheirNamesAndShareContent(t *testing.T) {
	e := newEnv(t)
	if err := os.Mkdir(e.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b, c := e.path("a"), e.path("b"), e.path("sub/c")
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
	wantErrno(t, "link of a directory", os.Link(e.path("sub"), e.path("sub2")), syscall.EPERM)
}

func TestUnlinkAndRmdirRemoveOnlyWhatTheyMay(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.path("d/inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("d/f"), []byte("x"))
	wantErrno(t, "rmdir of a non-empty directory", syscall.Rmdir(e.path("d")), syscall.ENOTEMPTY)
	wantErrno(t, "unlink of a directory", syscall.Unlink(e.path("d/inner")), syscall.EISDIR)
	wantErrno(t, "rmdir of a file", syscall.Rmdir(e.path("d/f")), syscall.ENOTDIR)
	wantErrno(t, "unlink of a missing name", syscall.Unlink(e.path("d/nothing")), syscall.ENOENT)

	// An unlinked file stays readable through a descriptor opened before.
	f := openFile(t, e.path("d/f"), os.O_RDONLY, 0)
	if err := syscall.Unlink(e.path("d/f")); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(f); err != nil || string(got) != "x" {
		t.Fatalf("read of an unlinked open file: %q %v", got, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Fatalf("fstat of an unlinked open file: nlink %d, %v; want 0", st.Nlink, err)
	}
	f.Close()

	if err := syscall.Rmdir(e.path("d/inner")); err != nil {
		t.Fatal(err)
	}
	if n := stat(t, e.path("d")).Nlink; n != 2 {
		t.Fatalf("d has nlink %d after its subdirectory went, want 2", n)
	}
	if err := syscall.Rmdir(e.path("d")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		if de.Name() == "d" {
			t.Fatal("d is still listed after rmdir")
		}
	}
}

func TestRenamingAFileOverAnotherReplacesItAtomically(t *testing.T) {
	e := newEnv(t)
	dst := e.path("current")
	writeFile(t, dst, []byte("version 0"))
	old := openFile(t, dst, os.O_RDONLY, 0)

	// A reader opens the target throughout; it must never miss it or see
	// a partial version.
	stop := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		defer close(readerErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(dst)
			if err != nil {
				readerErr <- err
				return
			}
			if !bytes.HasPrefix(b, []byte("version ")) {
				readerErr <- fmt.Errorf("reader saw %q", b)
				return
			}
		}
	}()
	var lastIno uint64
	for i := 1; i <= 40; i++ {
		tmp := e.path(fmt.Sprintf("tmp%d", i))
		writeFile(t, tmp, []byte(fmt.Sprintf("version %d", i)))
		lastIno = stat(t, tmp).Ino
		if err := os.Rename(tmp, dst); err != nil {
			close(stop)
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-readerErr; err != nil {
		t.Fatalf("reader during renames: %v", err)
	}
	if got := readFile(t, dst); string(got) != "version 40" {
		t.Fatalf("target reads %q, want \"version 40\"", got)
	}
	if ino := stat(t, dst).Ino; ino != lastIno {
		t.Fatalf("target has inode %d, want the renamed file's %d", ino, lastIno)
	}
	if _, err := os.Lstat(e.path("tmp40")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the source name survived the rename: %v", err)
	}
	// The replaced file lives on for the descriptor that had it open.
	if got, err := io.ReadAll(old); err != nil || string(got) != "version 0" {
		t.Fatalf("replaced file read through an old descriptor: %q %v", got, err)
	}
}

func TestRenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.path("a/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.path("to"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("a/x"), []byte("x"))
	writeFile(t, e.path("a/sub/y"), []byte("y"))
	inos := map[string]uint64{}
	for _, n := range []string{"", "x", "sub", "sub/y"} {
		inos[n] = stat(t, e.path(filepath.Join("a", n))).Ino
	}
	rootLinks, toLinks := stat(t, e.mnt).Nlink, stat(t, e.path("to")).Nlink

	if err := os.Rename(e.path("a"), e.path("to/b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.path("a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name after rename: %v", err)
	}
	for n, ino := range inos {
		if got := stat(t, e.path(filepath.Join("to/b", n))).Ino; got != ino {
			t.Fatalf("to/b/%s has inode %d, want %d as before the rename", n, got, ino)
		}
	}
	if got := readFile(t, e.path("to/b/sub/y")); string(got) != "y" {
		t.Fatalf("to/b/sub/y reads %q", got)
	}
	if n := stat(t, e.mnt).Nlink; n != rootLinks-1 {
		t.Fatalf("old parent nlink %d, want %d", n, rootLinks-1)
	}
	if n := stat(t, e.path("to")).Nlink; n != toLinks+1 {
		t.Fatalf("new parent nlink %d, want %d", n, toLinks+1)
	}
	if ino := stat(t, e.path("to/b/..")).Ino; ino != stat(t, e.path("to")).Ino {
		t.Fatal("the moved directory's .. is not its new parent")
	}
	// A directory may replace an empty directory, not a non-empty one
	// (syscall.Rename: os.Rename refuses a directory target by itself).
	if err := os.Mkdir(e.path("empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename over a non-empty directory", syscall.Rename(e.path("empty"), e.path("to/b")), syscall.ENOTEMPTY)
	if err := syscall.Rename(e.path("to/b"), e.path("empty")); err != nil {
		t.Fatalf("rename over an empty directory: %v", err)
	}
	if got := stat(t, e.path("empty/x")).Ino; got != inos["x"] {
		t.Fatal("children did not follow a rename over an empty directory")
	}
}

func TestRenameat2HonoursNoReplaceAndExchange(t *testing.T) {
	e := newEnv(t)
	for _, d := range []string{"p1", "p2", "p2/dir"} {
		if err := os.Mkdir(e.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, e.path("p1/file"), []byte("file"))
	writeFile(t, e.path("p2/dir/child"), []byte("child"))
	writeFile(t, e.path("other"), []byte("other"))
	renameat2 := func(from, to string, flags uint) error {
		return unix.Renameat2(unix.AT_FDCWD, e.path(from), unix.AT_FDCWD, e.path(to), flags)
	}

	wantErrno(t, "RENAME_NOREPLACE onto an existing name", renameat2("other", "p1/file", unix.RENAME_NOREPLACE), syscall.EEXIST)
	if got := readFile(t, e.path("p1/file")); string(got) != "file" {
		t.Fatalf("the target of a refused rename reads %q", got)
	}
	if err := renameat2("other", "p1/other", unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE onto a free name: %v", err)
	}

	fileIno, dirIno := stat(t, e.path("p1/file")).Ino, stat(t, e.path("p2/dir")).Ino
	p1Links, p2Links := stat(t, e.path("p1")).Nlink, stat(t, e.path("p2")).Nlink
	if err := renameat2("p1/file", "p2/dir", unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE of a file and a directory: %v", err)
	}
	if st := stat(t, e.path("p1/file")); st.Ino != dirIno || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Fatalf("p1/file is inode %d mode %o, want the directory %d", st.Ino, st.Mode, dirIno)
	}
	if st := stat(t, e.path("p2/dir")); st.Ino != fileIno || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Fatalf("p2/dir is inode %d mode %o, want the file %d", st.Ino, st.Mode, fileIno)
	}
	if got := readFile(t, e.path("p1/file/child")); string(got) != "child" {
		t.Fatalf("the directory's child reads %q after the exchange", got)
	}
	if got := readFile(t, e.path("p2/dir")); string(got) != "file" {
		t.Fatalf("the file reads %q after the exchange", got)
	}
	if n := stat(t, e.path("p1")).Nlink; n != p1Links+1 {
		t.Fatalf("p1 nlink %d after gaining a directory, want %d", n, p1Links+1)
	}
	if n := stat(t, e.path("p2")).Nlink; n != p2Links-1 {
		t.Fatalf("p2 nlink %d after losing a directory, want %d", n, p2Links-1)
	}
	wantErrno(t, "RENAME_EXCHANGE with a missing target", renameat2("p1/other", "p1/missing", unix.RENAME_EXCHANGE), syscall.ENOENT)
}

func TestRenamingADirectoryIntoItsOwnSubtreeFails(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.path("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename a into a/b/c", os.Rename(e.path("a"), e.path("a/b/c/a")), syscall.EINVAL)
	wantErrno(t, "rename a to a/x", os.Rename(e.path("a"), e.path("a/x")), syscall.EINVAL)
	if st := stat(t, e.path("a/b/c")); st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Fatal("a/b/c is gone after refused renames")
	}
	if ents, err := os.ReadDir(e.path("a/b/c")); err != nil || len(ents) != 0 {
		t.Fatalf("a/b/c lists %v, %v after refused renames; want nothing", ents, err)
	}
}

func TestChmodChownAndUtimensChangeAttributes(t *testing.T) {
	e := newEnv(t)
	p := e.path("f")
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
	if err := os.Symlink("f", e.path("l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(e.path("l"), 42, 43); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, e.path("l")); st.Uid != 42 || st.Gid != 43 {
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

func TestUserExtendedAttributesCanBeSetListedAndRemoved(t *testing.T) {
	e := newEnv(t)
	p := e.path("f")
	writeFile(t, p, nil)
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{p, e.path("d")} {
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

func TestFlockLocksConflictBetweenOpenFileDescriptions(t *testing.T) {
	e := newEnv(t)
	p := e.path("lockfile")
	writeFile(t, p, []byte("x"))
	f1 := openFile(t, p, os.O_RDONLY, 0)
	f2 := openFile(t, p, os.O_RDONLY, 0)
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
	case <-time.After(10 * time.Second):
		t.Fatal("blocking LOCK_EX not granted after the holder closed its file")
	}
	// Now a third open file description is the one shut out.
	f3 := openFile(t, p, os.O_RDONLY, 0)
	wantErrno(t, "LOCK_SH while another holds LOCK_EX", unix.Flock(int(f3.Fd()), unix.LOCK_SH|unix.LOCK_NB), syscall.EWOULDBLOCK)
}

func TestFcntlLocksConflictBetweenProcesses(t *testing.T) {
	e := newEnv(t)
	p := e.path("db")
	writeFile(t, p, make([]byte, 1000))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"=fcntl-lock", helperPathEnv+"="+p)
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "locked\n" {
			t.Fatalf("helper said %q (stderr %q)", s, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("helper did not take its lock (stderr %q)", stderr.String())
	}

	f := openFile(t, p, os.O_RDWR, 0)
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: 50, Len: 10}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 || int(lk.Pid) != cmd.Process.Pid {
		t.Fatalf("F_GETLK: %+v; want the helper's write lock on [0,100) with pid %d", lk, cmd.Process.Pid)
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
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v (stderr %q)", err, stderr.String())
	}
	exited = true
	eventually(t, "the helper's lock to go with it", func() bool {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 100}
		return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk) == nil
	})
}

func TestPermissionsAreEnforcedForAnUnprivilegedUser(t *testing.T) {
	e := newEnv(t)
	const nobody = 65534
	// The unprivileged child must be able to reach the mount point.
	if err := os.Chmod(filepath.Dir(e.mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	secret, private := e.path("secret"), e.path("private")
	writeFile(t, secret, []byte("hush\n"))
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.path("private/inside"), []byte("in"))

	// run runs a command as nobody and returns its output and error.
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	denied := func(what, out string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("%s as nobody: %v %q; want permission denied", what, err, out)
		}
	}
	allowed := func(what, out string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as nobody: %v %q", what, err, out)
		}
	}

	// A 0700 root: nobody cannot even look in.
	if err := os.Chmod(e.mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := run("/bin/ls", e.mnt)
	denied("ls of the 0700 root", out, err)
	if err := os.Chmod(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}

	out, err = run("/bin/cat", secret)
	denied("cat of a 0600 file", out, err)
	out, err = run("/bin/ls", private)
	denied("ls of a 0700 directory", out, err)
	out, err = run("/usr/bin/touch", e.path("private/new"))
	denied("create in a 0700 directory", out, err)
	// The kernel knows private/inside from root's write: a cached name
	// must not let nobody through a directory it may not search.
	out, err = run("/bin/cat", e.path("private/inside"))
	denied("cat through a 0700 directory", out, err)
	out, err = run("/usr/bin/touch", e.path("new"))
	denied("create in a 0755 root-owned directory", out, err)
	out, err = run("/bin/chmod", "0666", secret)
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("chmod of root's file as nobody: %v %q; want operation not permitted", err, out)
	}

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o777); err != nil {
		t.Fatal(err)
	}
	out, err = run("/bin/cat", secret)
	allowed("cat of a 0644 file", out, err)
	if out != "hush\n" {
		t.Fatalf("cat as nobody printed %q", out)
	}
	out, err = run("/bin/sh", "-c", "echo more >> "+secret)
	denied("append to a 0644 file of root", out, err)
	out, err = run("/bin/ls", private)
	allowed("ls of a 0777 directory", out, err)
	if out != "inside\n" {
		t.Fatalf("ls as nobody printed %q", out)
	}
	out, err = run("/usr/bin/touch", e.path("private/new"))
	allowed("create in a 0777 directory", out, err)
	if st := stat(t, e.path("private/new")); st.Uid != nobody || st.Gid != nobody {
		t.Fatalf("file created by nobody is owned by %d:%d", st.Uid, st.Gid)
	}
	if got := readFile(t, secret); string(got) != "hush\n" {
		t.Fatalf("secret changed to %q", got)
	}

	// access(2) asks the engine.
	if _, err := run("/bin/sh", "-c", "test -r "+secret); err != nil {
		t.Fatalf("access(R_OK) of a 0644 file as nobody: %v", err)
	}
	if _, err := run("/bin/sh", "-c", "test -w "+secret); err == nil {
		t.Fatal("access(W_OK) of root's 0644 file as nobody succeeded")
	}
	// A file anyone may write can be rewritten in a directory nobody may
	// not write; its times may be set to now, not to an explicit time.
	open := e.path("open")
	writeFile(t, open, []byte("old"))
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	out, err = run("/bin/sh", "-c", "echo new > "+open)
	allowed("rewrite of a 0666 file in a 0755 directory", out, err)
	if got := readFile(t, open); string(got) != "new\n" {
		t.Fatalf("0666 file reads %q after nobody rewrote it", got)
	}
	out, err = run("/usr/bin/touch", open)
	allowed("touch (UTIME_NOW) of a writable file", out, err)
	out, err = run("/usr/bin/touch", "-d", "2001-01-01", open)
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("explicit times on root's file as nobody: %v %q; want operation not permitted", err, out)
	}
	out, err = run("/usr/bin/truncate", "-s", "0", secret)
	denied("truncate of root's 0644 file", out, err)
	out, err = run("/bin/chown", "65534", secret)
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("chown of root's file as nobody: %v %q", err, out)
	}

	// In a sticky directory only the owner of an entry may remove it.
	tmp := e.path("tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(tmp, syscall.S_ISVTX|0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, tmp+"/roots", nil)
	if err := os.Chmod(tmp+"/roots", 0o666); err != nil {
		t.Fatal(err)
	}
	out, err = run("/bin/rm", "-f", tmp+"/roots")
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("rm of root's file in a sticky directory as nobody: %v %q", err, out)
	}
	out, err = run("/bin/sh", "-c", "echo mine > "+tmp+"/mine && rm "+tmp+"/mine")
	allowed("create and remove an own file in a sticky directory", out, err)
}

func TestEverythingMadeOnTheMountIsExportedToTheBucket(t *testing.T) {
	e := newEnv(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(os.MkdirAll(e.path("dir/sub"), 0o755))
	writeFile(t, e.path("dir/a.txt"), []byte("alpha"))
	writeFile(t, e.path("dir/sub/b.txt"), []byte("beta"))
	writeFile(t, e.path("big"), big)
	writeFile(t, e.path("linked"), []byte("one inode, two names"))
	must(os.Link(e.path("linked"), e.path("dir/also-linked")))
	must(os.Symlink("dir/a.txt", e.path("sym")))
	must(unix.Mkfifo(e.path("fifo"), 0o640))
	writeFile(t, e.path("doomed"), []byte("soon gone"))
	must(os.Mkdir(e.path("emptydir"), 0o700))
	e.flush()

	wantObject := func(key string, body []byte) map[string]string {
		t.Helper()
		got, md, ok := e.get(key)
		if !ok {
			t.Fatalf("%s is not in the bucket", key)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("%s holds %d bytes %.40q, want %d bytes %.40q", key, len(got), got, len(body), body)
		}
		return md
	}
	wantGone := func(key string) {
		t.Helper()
		if _, _, ok := e.get(key); ok {
			t.Fatalf("%s is still in the bucket", key)
		}
	}
	wantObject("dir/a.txt", []byte("alpha"))
	wantObject("dir/sub/b.txt", []byte("beta"))
	wantObject("big", big)
	wantObject("linked", []byte("one inode, two names"))
	wantObject("dir/also-linked", []byte("one inode, two names"))
	if md := wantObject("sym", []byte("dir/a.txt")); md["mode"] != fmt.Sprint(syscall.S_IFLNK|0o777) {
		t.Fatalf("symlink object mode %q, want %d", md["mode"], syscall.S_IFLNK|0o777)
	}
	md := wantObject("fifo", nil)
	if mode, err := strconv.ParseUint(md["mode"], 10, 32); err != nil || mode&syscall.S_IFMT != syscall.S_IFIFO || mode&0o777 != 0o640 {
		t.Fatalf("fifo object mode %q, want S_IFIFO|0640", md["mode"])
	}
	if md := wantObject("emptydir/", nil); md["mode"] != fmt.Sprint(syscall.S_IFDIR|0o700) {
		t.Fatalf("empty directory marker mode %q", md["mode"])
	}

	// Changes after the first export: a directory renamed, a file removed,
	// a hard link's content changed.
	must(os.Rename(e.path("dir"), e.path("moved")))
	must(os.Remove(e.path("doomed")))
	f := openFile(t, e.path("linked"), os.O_WRONLY, 0)
	_, err := f.WriteAt([]byte("ONE"), 0)
	must(err)
	must(f.Close())
	e.flush()

	wantObject("moved/a.txt", []byte("alpha"))
	wantObject("moved/sub/b.txt", []byte("beta"))
	wantObject("moved/also-linked", []byte("ONE inode, two names"))
	wantObject("linked", []byte("ONE inode, two names"))
	wantGone("dir/a.txt")
	wantGone("dir/sub/b.txt")
	wantGone("dir/also-linked")
	wantGone("doomed")
}

func TestANameReusedAfterItsObjectWasExportedIsExportedAgain(t *testing.T) {
	e := newEnv(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, e.path("replaced"), []byte("first"))
	writeFile(t, e.path("recreated"), []byte("first"))
	must(os.Mkdir(e.path("dir"), 0o755))
	writeFile(t, e.path("dir/f"), []byte("first"))
	e.flush()
	// Replace by rename, as editors save; remove and create again; move a
	// directory away and make a new one in its place.
	writeFile(t, e.path("replacement"), []byte("second"))
	must(os.Rename(e.path("replacement"), e.path("replaced")))
	must(os.Remove(e.path("recreated")))
	writeFile(t, e.path("recreated"), []byte("second"))
	must(os.Rename(e.path("dir"), e.path("old-dir")))
	must(os.Mkdir(e.path("dir"), 0o755))
	writeFile(t, e.path("dir/f"), []byte("second"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.eng.Exporter.Flush(ctx); err != nil {
		t.Errorf("flush: %v", err)
	}
	for key, want := range map[string]string{"replaced": "second", "recreated": "second", "dir/f": "second", "old-dir/f": "first"} {
		if b, _, ok := e.get(key); !ok || string(b) != want {
			t.Errorf("%s in the bucket: %q (present %v), want %q", key, b, ok, want)
		}
	}
	if _, _, ok := e.get("replacement"); ok {
		t.Error("the renamed-away name is still in the bucket")
	}
}

func TestShrinkingGrowingAndExtendingAnImportedFileReadsAndExportsZeros(t *testing.T) {
	e := newEnv(t)
	sizes := []int{512 << 10, 3 << 20} // fetched on demand; streamed
	objects := map[int][]byte{}
	for _, size := range sizes {
		orig := make([]byte, size)
		for i := range orig {
			orig[i] = byte(i*13 + 1)
		}
		objects[size] = orig
		// Both before the first listing, so neither waits for an import.
		e.put(fmt.Sprintf("imported-%d", size), orig, nil)
	}
	for _, size := range sizes {
		key, orig := fmt.Sprintf("imported-%d", size), objects[size]
		f := openFile(t, e.path(key), os.O_RDWR, 0)
		if err := f.Truncate(1000); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		tail := []byte("tail")
		if _, err := f.WriteAt(tail, int64(size+100_000)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		want := append(append([]byte{}, orig[:1000]...), make([]byte, size+100_000-1000)...)
		want = append(want, tail...)
		if got := readFile(t, e.path(key)); !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: %d bytes read, want %d; first difference at %d", key, len(got), len(want), i)
		}
		e.flush()
		if got, _, _ := e.get(key); !bytes.Equal(got, want) {
			t.Fatalf("%s: the exported object (%d bytes) differs from the file", key, len(got))
		}
	}
}

func TestASharedWritableMappingReachesTheFile(t *testing.T) {
	e := newEnv(t)
	p := e.path("mapped")
	writeFile(t, p, make([]byte, 3*4096))
	f := openFile(t, p, os.O_RDWR, 0)
	m, err := unix.Mmap(int(f.Fd()), 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(m[4096+10:], "through the mapping")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := readFile(t, p)
	if string(got[4096+10:4096+29]) != "through the mapping" || len(got) != 3*4096 {
		t.Fatalf("after msync the file holds %q at 4106 (%d bytes)", got[4096+10:4096+29], len(got))
	}
}

func TestNewEntriesInASetGroupIDDirectoryInheritItsGroup(t *testing.T) {
	e := newEnv(t)
	d := e.path("sg")
	if err := os.Mkdir(d, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 0, 5678); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(d, syscall.S_ISGID|0o775); err != nil {
		t.Fatal(err)
	}
	writeFile(t, d+"/file", nil)
	if err := os.Mkdir(d+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, d+"/file"); st.Gid != 5678 {
		t.Fatalf("file in a set-group-id directory has gid %d, want 5678", st.Gid)
	}
	if st := stat(t, d+"/sub"); st.Gid != 5678 || st.Mode&syscall.S_ISGID == 0 {
		t.Fatalf("directory in a set-group-id directory: gid %d mode %o, want 5678 with S_ISGID", st.Gid, st.Mode)
	}
}

// TestANameLongerThan255BytesIsTooLong: every call that looks up a name of
// 256 bytes or more answers ENAMETOOLONG, as a local file system does,
// not ENOENT (issue 11), in a listed directory and in one only the bucket
// knows; a name of 255 bytes is fine.
func TestANameLongerThan255BytesIsTooLong(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("n", 256)
	e.put("unlisted/x", []byte("x"), nil)
	mkdir(t, e.path("d"))
	writeFile(t, e.path("d/f"), []byte("x"))
	for _, dir := range []string{"d", "unlisted"} {
		p := e.path(dir + "/" + long)
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
			"link":        func() error { return os.Link(e.path("d/f"), p) },
			"rename":      func() error { return os.Rename(e.path("d/f"), p) },
			"rename from": func() error { return os.Rename(p, e.path("d/g")) },
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
	if err := os.WriteFile(e.path("d/"+long[:255]), []byte("ok"), 0o644); err != nil {
		t.Fatalf("a 255-byte name: %v", err)
	}
}

// TestAWriteByAnotherUserClearsSetIDBits: someone who may write a set-uid
// or set-gid file but does not own it writes, truncates or opens it with
// O_TRUNC: the call succeeds and clears the set-uid bit, and the set-gid
// bit where group execute is set or the writer is not in the file's group
// (in it, set-gid without group execute marks mandatory locking and
// stays), as Linux since 6.2 does on a local disk (issues 11 and 21). An
// explicit chmod by them stays refused.
func TestAWriteByAnotherUserClearsSetIDBits(t *testing.T) {
	e := newEnv(t)
	const nobody = 65534
	if err := os.Chmod(filepath.Dir(e.mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f := e.path("f")
	asNobody := func(script string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script, "sh", f)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s as nobody: %v %q", script, err, out)
		}
	}
	for _, tc := range []struct {
		script   string
		gid      int
		from, to uint32
		size     int64
	}{
		{`printf x >> "$1"`, 0, 0o6777, 0o777, 5},
		{`truncate -s 2 "$1"`, 0, 0o4777, 0o777, 2},
		{`: > "$1"`, 0, 0o6777, 0o777, 0},
		{`printf x >> "$1"`, nobody, 0o2666, 0o2666, 5}, // set-gid without group execute stays in the writer's group
		{`printf x >> "$1"`, 0, 0o2666, 0o666, 5},       // and goes outside it
	} {
		writeFile(t, f, []byte("data"))
		if err := os.Chown(f, 0, tc.gid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(f, tc.from); err != nil {
			t.Fatal(err)
		}
		asNobody(tc.script)
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != tc.to {
			t.Errorf("%s on a %o file: mode %o, want %o", tc.script, tc.from, got, tc.to)
		}
		if st.Size != tc.size {
			t.Errorf("%s: size %d, want %d", tc.script, st.Size, tc.size)
		}
	}
	if err := syscall.Chmod(f, 0o4777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/chmod", "u-s", f)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("chmod u-s of root's file as nobody succeeded: %q", out)
	}
}
