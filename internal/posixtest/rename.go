package posixtest

// Workloads on rename: atomic replacement, moving directories, renameat2
// flags, and the loop rename must refuse.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// RenamingAFileOverAnotherReplacesItAtomically: a reader opening the
// target all through a series of renames over it never misses it nor sees
// a partial version; the target ends as the last renamed file (its inode),
// the source name is gone, and the replaced file lives on for a descriptor
// that had it open.
func RenamingAFileOverAnotherReplacesItAtomically(t testing.TB, dir string) {
	dst := filepath.Join(dir, "current")
	writeFile(t, dst, []byte("version 0"))
	old := openFile(t, dst, os.O_RDONLY, 0)

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
		tmp := filepath.Join(dir, fmt.Sprintf("tmp%d", i))
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
	if _, err := os.Lstat(filepath.Join(dir, "tmp40")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the source name survived the rename: %v", err)
	}
	// The replaced file lives on for the descriptor that had it open.
	if got, err := io.ReadAll(old); err != nil || string(got) != "version 0" {
		t.Fatalf("replaced file read through an old descriptor: %q %v", got, err)
	}
}

// RenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers: a directory
// moved to another parent keeps every inode number below it, moves one
// link from the old parent to the new, has the new parent as "..", may
// replace an empty directory and not a non-empty one.
func RenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers(t testing.TB, dir string) {
	path := func(p string) string { return filepath.Join(dir, p) }
	if err := os.MkdirAll(path("a/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir(t, path("to"), 0o755)
	writeFile(t, path("a/x"), []byte("x"))
	writeFile(t, path("a/sub/y"), []byte("y"))
	inos := map[string]uint64{}
	for _, n := range []string{"", "x", "sub", "sub/y"} {
		inos[n] = stat(t, path(filepath.Join("a", n))).Ino
	}
	rootLinks, toLinks := stat(t, dir).Nlink, stat(t, path("to")).Nlink

	if err := os.Rename(path("a"), path("to/b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path("a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name after rename: %v", err)
	}
	for n, ino := range inos {
		if got := stat(t, path(filepath.Join("to/b", n))).Ino; got != ino {
			t.Fatalf("to/b/%s has inode %d, want %d as before the rename", n, got, ino)
		}
	}
	if got := readFile(t, path("to/b/sub/y")); string(got) != "y" {
		t.Fatalf("to/b/sub/y reads %q", got)
	}
	if n := stat(t, dir).Nlink; n != rootLinks-1 {
		t.Fatalf("old parent nlink %d, want %d", n, rootLinks-1)
	}
	if n := stat(t, path("to")).Nlink; n != toLinks+1 {
		t.Fatalf("new parent nlink %d, want %d", n, toLinks+1)
	}
	if ino := stat(t, path("to/b/..")).Ino; ino != stat(t, path("to")).Ino {
		t.Fatal("the moved directory's .. is not its new parent")
	}
	// A directory may replace an empty directory, not a non-empty one
	// (syscall.Rename: os.Rename refuses a directory target by itself).
	mkdir(t, path("empty"), 0o755)
	wantErrno(t, "rename over a non-empty directory", syscall.Rename(path("empty"), path("to/b")), syscall.ENOTEMPTY)
	if err := syscall.Rename(path("to/b"), path("empty")); err != nil {
		t.Fatalf("rename over an empty directory: %v", err)
	}
	if got := stat(t, path("empty/x")).Ino; got != inos["x"] {
		t.Fatal("children did not follow a rename over an empty directory")
	}
}

// Renameat2HonoursNoReplaceAndExchange: RENAME_NOREPLACE refuses an
// existing target with EEXIST and leaves it, and moves to a free name;
// RENAME_EXCHANGE swaps a file and a directory in different parents
// (inodes, content, and the parents' link counts) and needs both names.
func Renameat2HonoursNoReplaceAndExchange(t testing.TB, dir string) {
	path := func(p string) string { return filepath.Join(dir, p) }
	for _, d := range []string{"p1", "p2", "p2/dir"} {
		mkdir(t, path(d), 0o755)
	}
	writeFile(t, path("p1/file"), []byte("file"))
	writeFile(t, path("p2/dir/child"), []byte("child"))
	writeFile(t, path("other"), []byte("other"))
	renameat2 := func(from, to string, flags uint) error {
		return unix.Renameat2(unix.AT_FDCWD, path(from), unix.AT_FDCWD, path(to), flags)
	}

	wantErrno(t, "RENAME_NOREPLACE onto an existing name", renameat2("other", "p1/file", unix.RENAME_NOREPLACE), syscall.EEXIST)
	if got := readFile(t, path("p1/file")); string(got) != "file" {
		t.Fatalf("the target of a refused rename reads %q", got)
	}
	if err := renameat2("other", "p1/other", unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE onto a free name: %v", err)
	}

	fileIno, dirIno := stat(t, path("p1/file")).Ino, stat(t, path("p2/dir")).Ino
	p1Links, p2Links := stat(t, path("p1")).Nlink, stat(t, path("p2")).Nlink
	if err := renameat2("p1/file", "p2/dir", unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE of a file and a directory: %v", err)
	}
	if st := stat(t, path("p1/file")); st.Ino != dirIno || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Fatalf("p1/file is inode %d mode %o, want the directory %d", st.Ino, st.Mode, dirIno)
	}
	if st := stat(t, path("p2/dir")); st.Ino != fileIno || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Fatalf("p2/dir is inode %d mode %o, want the file %d", st.Ino, st.Mode, fileIno)
	}
	if got := readFile(t, path("p1/file/child")); string(got) != "child" {
		t.Fatalf("the directory's child reads %q after the exchange", got)
	}
	if got := readFile(t, path("p2/dir")); string(got) != "file" {
		t.Fatalf("the file reads %q after the exchange", got)
	}
	if n := stat(t, path("p1")).Nlink; n != p1Links+1 {
		t.Fatalf("p1 nlink %d after gaining a directory, want %d", n, p1Links+1)
	}
	if n := stat(t, path("p2")).Nlink; n != p2Links-1 {
		t.Fatalf("p2 nlink %d after losing a directory, want %d", n, p2Links-1)
	}
	wantErrno(t, "RENAME_EXCHANGE with a missing target", renameat2("p1/other", "p1/missing", unix.RENAME_EXCHANGE), syscall.ENOENT)
}

// RenamingADirectoryIntoItsOwnSubtreeFails: rename of a directory to a
// name below itself answers EINVAL and changes nothing.
func RenamingADirectoryIntoItsOwnSubtreeFails(t testing.TB, dir string) {
	path := func(p string) string { return filepath.Join(dir, p) }
	if err := os.MkdirAll(path("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename a into a/b/c", os.Rename(path("a"), path("a/b/c/a")), syscall.EINVAL)
	wantErrno(t, "rename a to a/x", os.Rename(path("a"), path("a/x")), syscall.EINVAL)
	if st := stat(t, path("a/b/c")); st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Fatal("a/b/c is gone after refused renames")
	}
	if ents, err := os.ReadDir(path("a/b/c")); err != nil || len(ents) != 0 {
		t.Fatalf("a/b/c lists %v, %v after refused renames; want nothing", ents, err)
	}
}
