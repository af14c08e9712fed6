package fuse_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// The command line's --uid, --gid, --file-mode and --dir-mode (issue 13).
var (
	someDefaults  = meta.Defaults{Uid: 1234, Gid: 5678, FileMode: 0o640, DirMode: 0o750}
	otherDefaults = meta.Defaults{Uid: 4321, Gid: 8765, FileMode: 0o604, DirMode: 0o705}
)

// wantOwner fails the test unless path has the owner and permission bits
// given.
func wantOwner(t *testing.T, path string, uid, gid uint32, perm os.FileMode) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != uid || st.Gid != gid || os.FileMode(st.Mode&0o7777) != perm {
		t.Errorf("%s: uid %d gid %d mode %04o, want %d %d %04o", path, st.Uid, st.Gid, st.Mode&0o7777, uid, gid, perm)
	}
}

// allVersions lists every object version and delete marker of the bucket.
func (e *env) allVersions() []string {
	e.t.Helper()
	var out []string
	e.eachVersion(func(key, id string, marker bool) {
		out = append(out, fmt.Sprintf("%s@%s marker=%v", key, id, marker))
	})
	slices.Sort(out)
	return out
}

// A new file system's root and lost+found belong to --uid and --gid; the
// root has --dir-mode, lost+found is 01777 (shared as /tmp is).
func TestANewFileSystemsRootHasTheGivenOwnerAndDirMode(t *testing.T) {
	e := newEnv(t, withDefaults(someDefaults))
	wantOwner(t, e.mnt, 1234, 5678, 0o750)
	wantOwner(t, e.path(e.eng.Meta.LostFoundName()), 1234, 5678, 0o1777)
}

// Objects another tool put in the bucket without bucketfs's attributes,
// and the directories of key prefixes, show --uid, --gid, --file-mode and
// --dir-mode; an object that carries attributes (s3fs's names) keeps its
// own, and so does an attribute it carries alone.
func TestObjectsWithoutAttributesShowTheGivenOwnerAndModes(t *testing.T) {
	e := newEnv(t, withDefaults(someDefaults))
	e.put("bare.txt", []byte("from another tool"), nil)
	e.put("prefix/inner.txt", []byte("inner"), nil)
	e.put("s3fs.txt", []byte("from s3fs"), map[string]string{
		"mode": fmt.Sprint(syscall.S_IFREG | 0o600), "uid": "42", "gid": "43", "mtime": "1700000000"})
	e.put("modeonly.txt", []byte("mode only"), map[string]string{"mode": "420"}) // 0644
	wantOwner(t, e.path("bare.txt"), 1234, 5678, 0o640)
	wantOwner(t, e.path("prefix"), 1234, 5678, 0o750)
	wantOwner(t, e.path("prefix/inner.txt"), 1234, 5678, 0o640)
	wantOwner(t, e.path("s3fs.txt"), 42, 43, 0o600)
	wantOwner(t, e.path("modeonly.txt"), 1234, 5678, 0o644)
}

// Defaults are shown, never stored as the file's own: a restart with other
// defaults shows those, and writes nothing to the bucket, not even on an
// export cycle. The root of an existing file system keeps what it was
// given. A file changed on the file side is exported with the attributes
// it showed then, and keeps them.
func TestChangedDefaultsRewriteNothingInTheBucket(t *testing.T) {
	e := newEnv(t, withDefaults(someDefaults))
	e.put("bare.txt", []byte("from another tool"), nil)
	e.put("changed.txt", []byte("from another tool"), nil)
	e.put("prefix/inner.txt", []byte("inner"), nil)
	wantOwner(t, e.path("bare.txt"), 1234, 5678, 0o640)
	wantOwner(t, e.path("prefix/inner.txt"), 1234, 5678, 0o640)
	before := e.allVersions()

	e.stop()
	e.cfg.Defaults = &otherDefaults
	e.start()
	wantOwner(t, e.mnt, 1234, 5678, 0o750) // made by the first run
	wantOwner(t, e.path("bare.txt"), 4321, 8765, 0o604)
	wantOwner(t, e.path("prefix"), 4321, 8765, 0o705)
	wantOwner(t, e.path("prefix/inner.txt"), 4321, 8765, 0o604)
	if got := string(readFile(t, e.path("bare.txt"))); got != "from another tool" {
		t.Fatalf("bare.txt reads %q", got)
	}
	e.flush()
	if after := e.allVersions(); !slices.Equal(before, after) {
		t.Fatalf("new defaults wrote to the bucket:\nbefore %q\nafter  %q", before, after)
	}
	if _, md, _ := e.get("bare.txt"); len(md) != 0 {
		t.Fatalf("bare.txt gained metadata %v", md)
	}

	// A change is exported with the attributes the file shows, which
	// are its own from then on.
	f, err := os.OpenFile(e.path("changed.txt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(", changed"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e.flush()
	body, md, _ := e.get("changed.txt")
	if string(body) != "from another tool, changed" || md["uid"] != "4321" || md["gid"] != "8765" ||
		md["mode"] != fmt.Sprint(syscall.S_IFREG|0o604) {
		t.Fatalf("changed.txt exported as %q with %v, want the attributes it showed (4321, 8765, 0604)", body, md)
	}
	e.stop()
	e.cfg.Defaults = &someDefaults
	e.start()
	wantOwner(t, e.path("changed.txt"), 4321, 8765, 0o604)
	wantOwner(t, e.path("bare.txt"), 1234, 5678, 0o640)
}

// mountOptions returns the options /proc/mounts shows for mountpoint.
func mountOptions(t *testing.T, mountpoint string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == mountpoint {
			return strings.Split(f[3], ",")
		}
	}
	t.Fatalf("%s is not in /proc/mounts", mountpoint)
	return nil
}

// --read-only: the mount is ro to the kernel, every change fails with
// EROFS (in the kernel, and in vfs, which every front end goes through),
// bucket-side changes still show, and nothing reaches the bucket: not the
// changes an earlier read-write run left pending, which wait, and are
// exported by the next read-write start.
func TestAReadOnlyMountRefusesChangesAndExportsNothing(t *testing.T) {
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	e.put("bare.txt", []byte("in the bucket"), nil)
	e.put("dir/inner.txt", []byte("inner"), nil)
	readFile(t, e.path("bare.txt"))
	readFile(t, e.path("dir/inner.txt"))
	writeFile(t, e.path("pending.txt"), []byte("written before, not exported yet"))
	e.stop()
	e.cfg.ReadOnly = true
	e.start()
	forwardEvents(e)

	if opts := mountOptions(t, e.mnt); !slices.Contains(opts, "ro") {
		t.Errorf("/proc/mounts shows %v for the mount, want ro", opts)
	}
	erofs := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a read-only mount: %v, want EROFS", what, err)
		}
	}
	erofs("write", os.WriteFile(e.path("bare.txt"), []byte("x"), 0o644))
	_, err := os.OpenFile(e.path("new.txt"), os.O_CREATE|os.O_WRONLY, 0o644)
	erofs("create", err)
	erofs("mkdir", os.Mkdir(e.path("newdir"), 0o755))
	erofs("unlink", os.Remove(e.path("bare.txt")))
	erofs("rmdir", os.Remove(e.path("dir")))
	erofs("rename", os.Rename(e.path("bare.txt"), e.path("moved.txt")))
	erofs("chmod", os.Chmod(e.path("bare.txt"), 0o600))
	erofs("chown", os.Chown(e.path("bare.txt"), 1, 1))
	erofs("utimes", os.Chtimes(e.path("bare.txt"), time.Now(), time.Now()))
	erofs("setxattr", unix.Setxattr(e.path("bare.txt"), "user.test", []byte("v"), 0))
	erofs("truncate", os.Truncate(e.path("bare.txt"), 0))
	erofs("symlink", os.Symlink("bare.txt", e.path("link")))
	erofs("link", os.Link(e.path("bare.txt"), e.path("hard")))

	// The kernel refuses most of that before asking: vfs refuses it too,
	// for NFS and for anything the kernel lets through.
	ctx := context.Background()
	fs := e.eng.FS
	bare, err := fs.Lookup(ctx, vfs.Root, meta.RootIno, "bare.txt")
	if err != nil {
		t.Fatal(err)
	}
	vfsErr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("vfs %s on a read-only file system: %v, want EROFS", what, err)
		}
	}
	_, err = fs.Open(ctx, vfs.Root, bare.Ino, syscall.O_WRONLY)
	vfsErr("open for writing", err)
	_, err = fs.Open(ctx, vfs.Root, bare.Ino, syscall.O_RDONLY|syscall.O_TRUNC)
	vfsErr("open with O_TRUNC", err)
	_, _, err = fs.Create(ctx, vfs.Root, meta.RootIno, "new.txt", 0o644, syscall.O_WRONLY)
	vfsErr("create", err)
	_, err = fs.Mkdir(ctx, vfs.Root, meta.RootIno, "newdir", 0o755)
	vfsErr("mkdir", err)
	_, err = fs.Mknod(ctx, vfs.Root, meta.RootIno, "fifo", syscall.S_IFIFO|0o644, 0)
	vfsErr("mknod", err)
	_, err = fs.Symlink(ctx, vfs.Root, meta.RootIno, "link", "bare.txt")
	vfsErr("symlink", err)
	_, err = fs.Link(ctx, vfs.Root, bare.Ino, meta.RootIno, "hard")
	vfsErr("link", err)
	vfsErr("unlink", fs.Unlink(ctx, vfs.Root, meta.RootIno, "bare.txt"))
	vfsErr("rmdir", fs.Rmdir(ctx, vfs.Root, meta.RootIno, "dir"))
	vfsErr("rename", fs.Rename(ctx, vfs.Root, meta.RootIno, "bare.txt", meta.RootIno, "moved.txt", 0))
	_, err = fs.SetAttr(ctx, vfs.Root, bare.Ino, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: 0o600})
	vfsErr("chmod", err)
	_, err = fs.SetAttr(ctx, vfs.Root, bare.Ino, vfs.SetAttrIn{Valid: vfs.SetAtimeNow})
	vfsErr("atime update", err)
	vfsErr("setxattr", fs.SetXattr(ctx, vfs.Root, bare.Ino, "user.test", []byte("v"), 0))
	vfsErr("removexattr", fs.RemoveXattr(ctx, vfs.Root, bare.Ino, "user.test"))
	vfsErr("access for writing", fs.Access(ctx, vfs.Root, bare.Ino, 2))
	// Reading is as ever, and so is opening an existing file through a
	// create without write access (open(2) with O_CREAT).
	if got := string(readFile(t, e.path("bare.txt"))); got != "in the bucket" {
		t.Fatalf("bare.txt reads %q", got)
	}
	_, h, err := fs.Create(ctx, vfs.Root, meta.RootIno, "bare.txt", 0o644, syscall.O_RDONLY)
	if err != nil {
		t.Fatalf("create (open) of an existing file read-only: %v", err)
	}
	h.Release(ctx)

	// Bucket-side changes still show.
	e.put("fresh.txt", []byte("put while read-only"), nil)
	eventually(t, "the bucket's new object on the read-only mount", func() bool {
		return readsAs(e.path("fresh.txt"), []byte("put while read-only"))
	})
	e.put("bare.txt", []byte("overwritten in the bucket"), nil)
	eventually(t, "the bucket's overwrite on the read-only mount", func() bool {
		return readsAs(e.path("bare.txt"), []byte("overwritten in the bucket"))
	})
	before := e.allVersions()

	// Nothing is exported: flush is refused, the exporter cannot write,
	// and the change of the read-write run stays pending.
	rec := httptest.NewRecorder()
	e.eng.SocketHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/flush", nil))
	if body, _ := io.ReadAll(rec.Body); rec.Code != http.StatusConflict || !strings.Contains(string(body), "read-only") ||
		!strings.Contains(string(body), "1 pending export waits for a start without --read-only") {
		t.Errorf("flush of a read-only file system: %d %q", rec.Code, body)
	}
	flushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.eng.Exporter.Flush(flushCtx); err == nil {
		t.Errorf("the exporter flushed a read-only file system")
	}
	if after := e.allVersions(); !slices.Equal(before, after) {
		t.Fatalf("a read-only file system wrote to the bucket:\nbefore %q\nafter  %q", before, after)
	}
	if n, _, err := e.eng.Meta.QueueStats(ctx); err != nil || n != 1 {
		t.Errorf("%d exports pending (%v), want the read-write run's one", n, err)
	}

	// The next read-write start exports it.
	e.stop()
	e.cfg.ReadOnly = false
	e.start()
	e.flush()
	if body, _, ok := e.get("pending.txt"); !ok || string(body) != "written before, not exported yet" {
		t.Fatalf("pending.txt after a read-write start: %q %v", body, ok)
	}
}
