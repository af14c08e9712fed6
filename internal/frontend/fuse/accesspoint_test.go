package fuse_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"bucketfs/internal/accesspoint"
	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/meta"
	"bucketfs/internal/s3test"
	"bucketfs/internal/vfs"
)

// apFile makes a file in dir through vfs, as root, with an owner and mode.
func apFile(t *testing.T, e *env, dir vfs.Ino, name, content string, uid, gid, mode uint32) {
	t.Helper()
	ctx := context.Background()
	a, h, err := e.eng.FS.Create(ctx, vfs.Root, dir, name, mode, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, err := h.Write(ctx, []byte(content), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.FS.SetAttr(ctx, vfs.Root, a.Ino, vfs.SetAttrIn{Valid: vfs.SetUid | vfs.SetGid, Uid: uid, Gid: gid}); err != nil {
		t.Fatal(err)
	}
}

func ownerOf(t *testing.T, path string) (uid, gid, mode uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid, st.Mode
}

// A mount of an access point shows its root (made with the access point's
// owner and mode) and nothing else of the file system, and every request,
// root's or another user's, runs as the access point's uid, gid and
// groups: what it makes is theirs, and it may read what they may, no more.
func TestAnAccessPointMountShowsItsRootAndRunsAsItsIdentity(t *testing.T) {
	ap, err := accesspoint.Parse("team-a=/teams/a,uid=2001,gid=3001,groups=4001,mode=0750")
	if err != nil {
		t.Fatal(err)
	}
	srv, bucket := s3test.NewBucket(t)
	e := newEnvMounted(t, srv, bucket, bfuse.Options{Name: "bucketfs-test", AccessPoint: &ap})
	ctx := context.Background()

	if uid, gid, mode := ownerOf(t, e.mnt); uid != 2001 || gid != 3001 || mode != syscall.S_IFDIR|0o750 {
		t.Errorf("the mount's root is %d:%d mode %o, want the access point's root 2001:3001 %o", uid, gid, mode, syscall.S_IFDIR|0o750)
	}
	teams, err := e.eng.FS.Lookup(ctx, vfs.Root, meta.RootIno, "teams")
	if err != nil {
		t.Fatal(err)
	}
	root, err := e.eng.FS.Lookup(ctx, vfs.Root, teams.Ino, "a")
	if err != nil {
		t.Fatal(err)
	}
	apFile(t, e, meta.RootIno, "outside", "not in the access point", 0, 0, 0o644)
	apFile(t, e, root.Ino, "private", "uid 5000 only", 5000, 5000, 0o600)
	apFile(t, e, root.Ino, "shared", "group 4001", 5000, 4001, 0o640)

	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ent := range ents {
		names = append(names, ent.Name())
	}
	if !slices.Equal(names, []string{"private", "shared"}) {
		t.Errorf("the mount lists %q, want the access point's root: [private shared]", names)
	}

	// This test runs as root.
	writeFile(t, e.path("mine"), []byte("x"))
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"mine", "d"} {
		if uid, gid, _ := ownerOf(t, e.path(p)); uid != 2001 || gid != 3001 {
			t.Errorf("root made %s owned by %d:%d, want 2001:3001", p, uid, gid)
		}
	}
	if _, err := os.ReadFile(e.path("private")); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("root read uid 5000's private file through the access point: %v", err)
	}
	if err := os.Chown(e.path("mine"), 0, 0); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("root gave a file away through the access point: %v", err)
	}
	if got := readFile(t, e.path("shared")); string(got) != "group 4001" {
		t.Errorf("the access point's group file reads %q", got)
	}

	// Another user (uid 2000, not in group 4001) is the access point too.
	if err := os.Chmod(filepath.Dir(e.mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runAs(member, "sh", "-c", "cat "+e.path("shared")+" && echo x > "+e.path("by-member"))
	if err != nil || out != "group 4001" {
		t.Errorf("uid 2000 through the access point: %q, %v", out, err)
	}
	if uid, gid, _ := ownerOf(t, e.path("by-member")); uid != 2001 || gid != 3001 {
		t.Errorf("uid 2000 made a file owned by %d:%d, want 2001:3001", uid, gid)
	}
	if out, err := runAs(member, "cat", e.path("private")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 2000 read uid 5000's private file: %q, %v", out, err)
	}

	// ".." at the mount's root is the kernel's: the directory the mount
	// point is in, not the file system's root.
	var above, mntParent syscall.Stat_t
	if err := syscall.Stat(e.mnt+"/..", &above); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Dir(e.mnt), &mntParent); err != nil {
		t.Fatal(err)
	}
	if above.Ino != mntParent.Ino || above.Dev != mntParent.Dev {
		t.Error(`".." at the access point's mount is not the mount point's parent`)
	}
}

// A mount whose access point's root cannot be made fails, without
// mounting.
func TestAnAccessPointMountWhoseRootIsAFileFails(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("file"), []byte("x"))
	ap, err := accesspoint.Parse("bad=/file/below,uid=1,gid=1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bfuse.Mount(e.eng.FS, t.TempDir(), bfuse.Options{AccessPoint: &ap})
	if err == nil {
		srv.Unmount()
		t.Fatal("mounted an access point whose root is below a file")
	}
	if !strings.Contains(err.Error(), "/file") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q, want one line naming /file", err)
	}
}
