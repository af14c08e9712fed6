package fuse_test

// POSIX behaviour seen through a real FUSE mount. The rules that need only
// a path and system calls are workloads of package posixtest, which the
// kernelnfs guest also runs through the Linux NFS client and which hold on
// a local directory; each test of that kind here runs them on the root of
// a fresh mount. The tests that also look at the bucket are written here.

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bucketfs/internal/posixtest"
)

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
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

// sourceDir is the package's directory, where go test starts the binary:
// taken before the embedded store changes the working directory.
var sourceDir, sourceDirErr = os.Getwd()

// TestEveryPOSIXWorkloadRunsThroughFUSE: each workload of posixtest is
// called by a test of this package, so none added there goes unchecked on
// FUSE.
func TestEveryPOSIXWorkloadRunsThroughFUSE(t *testing.T) {
	if sourceDirErr != nil {
		t.Fatal(sourceDirErr)
	}
	files, err := filepath.Glob(filepath.Join(sourceDir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "posixtest" {
					called[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	for _, w := range posixtest.Workloads {
		if !called[w.Name] {
			t.Errorf("no test of the FUSE mount calls posixtest.%s", w.Name)
		}
	}
}

func TestReadsAndWritesAtArbitraryOffsetsKeepEveryByte(t *testing.T) {
	posixtest.ReadsAndWritesAtArbitraryOffsetsKeepEveryByte(t, newEnv(t).mnt)
}

func TestAppendsFromTwoDescriptorsInterleaveWithoutLoss(t *testing.T) {
	posixtest.AppendsFromTwoDescriptorsInterleaveWithoutLoss(t, newEnv(t).mnt)
}

func TestOpenWithTruncEmptiesAnExistingFile(t *testing.T) {
	posixtest.OpenWithTruncEmptiesAnExistingFile(t, newEnv(t).mnt)
}

func TestFtruncateShrinksAndGrowsAndTheGrownPartReadsZeros(t *testing.T) {
	posixtest.FtruncateShrinksAndGrowsAndTheGrownPartReadsZeros(t, newEnv(t).mnt)
}

func TestASparseFileReadsZerosInItsHoleAndSeeksFindItsData(t *testing.T) {
	posixtest.ASparseFileReadsZerosInItsHole(t, newEnv(t).mnt)
	posixtest.SeekDataAndSeekHoleFindTheDataOfASparseFile(t, newEnv(t).mnt)
}

func TestFallocateGrowsKeepsTheSizeOrPunchesAHole(t *testing.T) {
	posixtest.FallocateGrowsAFileAndPunchesAHole(t, newEnv(t).mnt)
	posixtest.FallocateWithKeepSizeLeavesTheSizeAlone(t, newEnv(t).mnt)
}

func TestEveryKindOfNodeCanBeCreated(t *testing.T) {
	posixtest.EveryKindOfNodeCanBeCreated(t, newEnv(t).mnt)
}

func TestHardLinksCountTheirNamesAndShareContent(t *testing.T) {
	posixtest.HardLinksCountTheirNamesAndShareContent(t, newEnv(t).mnt)
}

func TestUnlinkAndRmdirRemoveOnlyWhatTheyMay(t *testing.T) {
	posixtest.UnlinkAndRmdirRemoveOnlyWhatTheyMay(t, newEnv(t).mnt)
	posixtest.AFileUnlinkedWhileOpenHasNoLinksLeft(t, newEnv(t).mnt)
}

func TestRenamingAFileOverAnotherReplacesItAtomically(t *testing.T) {
	posixtest.RenamingAFileOverAnotherReplacesItAtomically(t, newEnv(t).mnt)
}

func TestRenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers(t *testing.T) {
	posixtest.RenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers(t, newEnv(t).mnt)
}

func TestRenameat2HonoursNoReplaceAndExchange(t *testing.T) {
	posixtest.Renameat2HonoursNoReplaceAndExchange(t, newEnv(t).mnt)
}

func TestRenamingADirectoryIntoItsOwnSubtreeFails(t *testing.T) {
	posixtest.RenamingADirectoryIntoItsOwnSubtreeFails(t, newEnv(t).mnt)
}

func TestChmodChownAndUtimensChangeAttributes(t *testing.T) {
	posixtest.ChmodChownAndUtimensChangeAttributes(t, newEnv(t).mnt)
}

func TestUserExtendedAttributesCanBeSetListedAndRemoved(t *testing.T) {
	posixtest.UserExtendedAttributesCanBeSetListedAndRemoved(t, newEnv(t).mnt)
}

func TestFlockLocksConflictBetweenOpenFileDescriptions(t *testing.T) {
	posixtest.FlockLocksConflictBetweenOpenFileDescriptions(t, newEnv(t).mnt)
}

func TestFcntlLocksConflictBetweenProcesses(t *testing.T) {
	posixtest.FcntlLocksConflictBetweenProcesses(t, newEnv(t).mnt)
}

func TestPermissionsAreEnforcedForAnUnprivilegedUser(t *testing.T) {
	e := newEnv(t)
	// The unprivileged user must be able to reach the mount point.
	if err := os.Chmod(filepath.Dir(e.mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	posixtest.PermissionsAreEnforcedForAnUnprivilegedUser(t, e.mnt)
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
	posixtest.ASharedWritableMappingReachesTheFile(t, newEnv(t).mnt)
}

func TestNewEntriesInASetGroupIDDirectoryInheritItsGroup(t *testing.T) {
	posixtest.NewEntriesInASetGroupIDDirectoryInheritItsGroup(t, newEnv(t).mnt)
}

// TestANameLongerThan255BytesIsTooLong: every call that looks up a name of
// 256 bytes or more answers ENAMETOOLONG, as a local file system does,
// not ENOENT (issue 11), in a listed directory and in one only the bucket
// knows; a name of 255 bytes is fine.
func TestANameLongerThan255BytesIsTooLong(t *testing.T) {
	e := newEnv(t)
	e.put("unlisted/x", []byte("x"), nil)
	writeFile(t, e.path("f"), []byte("x"))
	posixtest.LongNamesAreRefusedIn(t, e.path("unlisted"), e.path("f"))
	posixtest.ANameLongerThan255BytesIsTooLong(t, e.mnt)
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
