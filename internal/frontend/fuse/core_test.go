package fuse_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// With no owner or modes given, a new file system's root is root's, 0755
// (the command line gives the user running it: see owner_test.go).
func TestNewFileSystemHasRootOwnedRootSharedLostFoundAndHugeSize(t *testing.T) {
	e := newEnv(t)
	st, err := os.Stat(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Perm() != 0o755 || sys.Uid != 0 || sys.Gid != 0 {
		t.Fatalf("root is %v uid %d gid %d, want drwxr-xr-x root root", st.Mode(), sys.Uid, sys.Gid)
	}
	lf := e.path(e.eng.Meta.LostFoundName())
	lst, err := os.Stat(lf)
	if err != nil || !lst.IsDir() || lst.Mode()&(os.ModePerm|os.ModeSticky) != os.ModeSticky|0o777 {
		t.Fatalf("lost+found: %v %v", lst, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(e.mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	if size := sfs.Blocks * uint64(sfs.Bsize); size < 1<<62 {
		t.Fatalf("df size %d, want about 8 EiB", size)
	}
	// Nothing under lost+found is ever exported.
	writeFile(t, lf+"/kept", []byte("local only"))
	writeFile(t, e.path("exported"), []byte("x"))
	e.flush()
	if _, _, ok := e.get("exported"); !ok {
		t.Fatal("a file at the root was not exported")
	}
	if _, _, ok := e.get(e.eng.Meta.LostFoundName() + "/kept"); ok {
		t.Fatal("a file in lost+found was exported")
	}
}

func TestWritesAreExportedAfterTheQuietPeriodWithAttributes(t *testing.T) {
	e := newEnv(t)
	data := []byte("hello bucket\n")
	writeFile(t, e.path("hello.txt"), data)
	if err := os.Chmod(e.path("hello.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.path("empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	eventually(t, "export of hello.txt", func() bool {
		b, md, ok := e.get("hello.txt")
		return ok && bytes.Equal(b, data) && md["mode"] == fmt.Sprint(syscall.S_IFREG|0o640)
	})
	eventually(t, "marker of the empty directory", func() bool {
		_, md, ok := e.get("empty/")
		return ok && md["mode"] == fmt.Sprint(syscall.S_IFDIR|0o750)
	})
	_, md, _ := e.get("hello.txt")
	if md["uid"] != "0" || md["gid"] != "0" || md["mtime"] == "" {
		t.Fatalf("metadata %v lacks uid/gid/mtime", md)
	}
	// chmod of an exported file updates its metadata in place.
	if err := os.Chmod(e.path("hello.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "metadata update after chmod", func() bool {
		b, md, ok := e.get("hello.txt")
		return ok && bytes.Equal(b, data) && md["mode"] == fmt.Sprint(syscall.S_IFREG|0o600)
	})
	// unlink deletes the object.
	if err := os.Remove(e.path("hello.txt")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delete of hello.txt", func() bool { _, _, ok := e.get("hello.txt"); return !ok })
}

func TestNamespaceIsImportedFromTheBucket(t *testing.T) {
	e := newEnv(t)
	e.put("top.txt", []byte("top"), map[string]string{"mode": fmt.Sprint(syscall.S_IFREG | 0o600), "uid": "1234", "gid": "99", "mtime": "1700000000"})
	e.put("plain", []byte("no metadata"), nil)
	e.put("a/b/c.txt", []byte("deep"), nil)
	e.put("emptydir/", nil, nil)
	e.put("link", []byte("top.txt"), map[string]string{"mode": fmt.Sprint(syscall.S_IFLNK | 0o777)})
	// Keys that cannot be paths are tested against gofakes3 in package
	// sync: the embedded store keeps objects as files and refuses them.
	// A directory of more than one listing page.
	for i := 0; i < 1005; i++ {
		e.put(fmt.Sprintf("many/f%04d", i), []byte("m"), nil)
	}

	names := func(dir string) []string {
		ents, err := os.ReadDir(e.path(dir))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, de := range ents {
			out = append(out, de.Name())
		}
		sort.Strings(out)
		return out
	}
	got := strings.Join(names(""), ",")
	want := strings.Join([]string{e.eng.Meta.LostFoundName(), "a", "emptydir", "link", "many", "plain", "top.txt"}, ",")
	if got != want {
		t.Fatalf("root lists\n %s\nwant\n %s", got, want)
	}
	if n := len(names("many")); n != 1005 {
		t.Fatalf("many/ lists %d entries, want 1005", n)
	}
	if b := readFile(t, e.path("a/b/c.txt")); string(b) != "deep" {
		t.Fatalf("a/b/c.txt = %q", b)
	}
	st, err := os.Stat(e.path("top.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Perm() != 0o600 || sys.Uid != 1234 || sys.Gid != 99 || st.ModTime().Unix() != 1700000000 {
		t.Fatalf("top.txt attrs %v uid %d gid %d mtime %v", st.Mode(), sys.Uid, sys.Gid, st.ModTime())
	}
	st, _ = os.Stat(e.path("plain"))
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("object without metadata has mode %v, want 0644", st.Mode())
	}
	if target, err := os.Readlink(e.path("link")); err != nil || target != "top.txt" {
		t.Fatalf("readlink: %q %v", target, err)
	}
	if n := len(names("emptydir")); n != 0 {
		t.Fatalf("emptydir lists %d entries", n)
	}
}

func TestSmallFilesAreServedFromTheTierAndLargeOnesStream(t *testing.T) {
	e := newEnv(t)
	small := make([]byte, 10<<10)
	large := make([]byte, 5<<20+123)
	rand.Read(small)
	rand.Read(large)
	e.put("small", small, nil)
	e.put("large", large, nil)
	if !bytes.Equal(readFile(t, e.path("small")), small) {
		t.Fatal("small file content differs")
	}
	ino := func(name string) uint64 {
		st, err := os.Stat(e.path(name))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	if n := e.cached(ino("small")); n != int64(len(small)) {
		t.Fatalf("small file: %d bytes in the tier, want all %d", n, len(small))
	}
	// A second read is served by the tier: no GET reaches the bucket.
	before := e.eng.Bucket.Stats()
	if !bytes.Equal(readFile(t, e.path("small")), small) {
		t.Fatal("small file content differs on second read")
	}
	if after := e.eng.Bucket.Stats(); after.BytesRead != before.BytesRead {
		t.Fatalf("second read of a small file read %d bytes from the bucket", after.BytesRead-before.BytesRead)
	}
	if !bytes.Equal(readFile(t, e.path("large")), large) {
		t.Fatal("large file content differs")
	}
	if n := e.cached(ino("large")); n != 0 {
		t.Fatalf("a large file read put %d bytes into the tier; it should stream", n)
	}
}

func TestWritingIntoALargeObjectUploadsOnlyWhatChanged(t *testing.T) {
	e := newEnv(t)
	size := 40 << 20
	orig := make([]byte, size)
	rand.Read(orig)
	e.put("big", orig, nil)
	f, err := os.OpenFile(e.path("big"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte("PATCHED")
	off := int64(size / 2)
	if _, err := f.WriteAt(patch, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	before := e.eng.Bucket.Stats()
	e.flush()
	after := e.eng.Bucket.Stats()
	want := append([]byte{}, orig...)
	copy(want[off:], patch)
	got, _, ok := e.get("big")
	if !ok || !bytes.Equal(got, want) {
		t.Fatal("exported object differs from the patched file")
	}
	if up := after.BytesWritten - before.BytesWritten; up > uint64(size/2) {
		t.Fatalf("export uploaded %d bytes of a %d-byte file after a 7-byte write", up, size)
	}
	if rd := after.BytesRead - before.BytesRead; rd > uint64(size/2) {
		t.Fatalf("export downloaded %d bytes of a %d-byte file", rd, size)
	}
}

func TestLookingUpOneNameDoesNotListItsDirectory(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 1200; i++ {
		e.put(fmt.Sprintf("big/k%04d", i), []byte(fmt.Sprint(i)), nil)
	}
	e.put("big/sub/inner", []byte("in"), nil)
	before := e.eng.Bucket.Stats()
	if b := readFile(t, e.path("big/k0700")); string(b) != "700" {
		t.Fatalf("big/k0700 = %q", b)
	}
	if b := readFile(t, e.path("big/sub/inner")); string(b) != "in" {
		t.Fatalf("big/sub/inner = %q", b)
	}
	if _, err := os.Stat(e.path("big/nothere")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	after := e.eng.Bucket.Stats()
	// Each name costs a HEAD and a one-key LIST; listing big would cost
	// a LIST page and a HEAD per object.
	if lists, heads := after.List-before.List, after.Head-before.Head; lists > 5 || heads > 5 {
		t.Fatalf("five lookups sent %d LISTs and %d HEADs", lists, heads)
	}
	// A full listing later shows everything once, the looked-up names too.
	ents, err := os.ReadDir(e.path("big"))
	if err != nil || len(ents) != 1201 {
		t.Fatalf("big lists %d entries, %v", len(ents), err)
	}
}
