package nfs4

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
	"bucketfs/internal/vfs"
)

// Set-id bits across NFS writes, truncates and chown (issue 21), over TCP
// with AUTH_SYS and no root squash. The rule is Linux's (vfs/setid.go), with
// CAP_FSETID given as knfsd gives it: to uid 0 only.

// setIDClient dials the server as uid:gid (4.1).
func setIDClient(t *testing.T, e *env, uid, gid uint32) (*nfsclient.Client, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := nfsclient.Dial(ctx, e.addr, nfsclient.Config{MinorVersion: 1,
		Auth: nfsclient.AuthSys{MachineName: "setid", UID: uid, GID: gid}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown(context.Background()) })
	root, err := c.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, root
}

// setIDFile (re)makes name in the root with 4 bytes, owner uid:gid and
// mode, through the engine.
func setIDFile(t *testing.T, e *env, name string, uid, gid, mode uint32) {
	t.Helper()
	ctx := t.Context()
	fs := e.eng.FS
	a, h, err := fs.Create(ctx, vfs.Root, 1, name, 0o644, syscall.O_RDWR|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, err := h.Write(ctx, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, vfs.Root, a.Ino, vfsSetOwner(uid, gid)); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetAttr(ctx, vfs.Root, a.Ino, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: mode}); err != nil {
		t.Fatal(err)
	}
}

var modeAndChange = nfsclient.Bitmap(nfsv4.FATTR4_MODE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_OWNER)

// setIDOps are the ways a client writes or truncates root/name: WRITE,
// SETATTR of the size with the open's stateid, and OPEN with a size of 0
// in the create attributes of an existing file (open with O_CREAT|O_TRUNC).
var setIDOps = []struct {
	name string
	do   func(ctx context.Context, c *nfsclient.Client, root []byte, name string) error
}{
	{"WRITE", func(ctx context.Context, c *nfsclient.Client, root []byte, name string) error {
		f, err := c.Open(ctx, root, name, nfsclient.OpenOptions{})
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, f)
		_, err = c.Write(ctx, f, 4, []byte("more"), nfsv4.UNSTABLE4)
		return err
	}},
	{"SETATTR size", func(ctx context.Context, c *nfsclient.Client, root []byte, name string) error {
		f, err := c.Open(ctx, root, name, nfsclient.OpenOptions{})
		if err != nil {
			return err
		}
		defer c.CloseFile(ctx, f)
		_, err = c.SetAttrStateid(ctx, f.FH, f.Stateid, nfsclient.Attrs{}.WithSize(1))
		return err
	}},
	{"OPEN truncating", func(ctx context.Context, c *nfsclient.Client, root []byte, name string) error {
		f, err := c.Create(ctx, root, name, nfsclient.OpenOptions{Attrs: nfsclient.Attrs{}.WithSize(0)})
		if err != nil {
			return err
		}
		return c.CloseFile(ctx, f)
	}},
}

// TestOverNFSRootKeepsSetIDBitsWhenItWritesOrTruncates: uid 0, not
// squashed, has CAP_FSETID as under knfsd: its writes and truncates leave
// set-id bits alone.
func TestOverNFSRootKeepsSetIDBitsWhenItWritesOrTruncates(t *testing.T) {
	e := newEnv(t, Options{})
	c, root := setIDClient(t, e, 0, 0)
	ctx := t.Context()
	for _, mode := range []uint32{0o4755, 0o2755, 0o6755, 0o2745} {
		for _, op := range setIDOps {
			name := fmt.Sprintf("f%o", mode)
			setIDFile(t, e, name, 1000, 1000, mode)
			if err := op.do(ctx, c, root, name); err != nil {
				t.Fatalf("%s by root on a %o file: %v", op.name, mode, err)
			}
			fh, err := c.Lookup(ctx, root, name)
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.GetAttr(ctx, fh, modeAndChange)
			if err != nil {
				t.Fatal(err)
			}
			if a.Mode != mode {
				t.Errorf("%s by root on a %o file: mode %o, want %o", op.name, mode, a.Mode, mode)
			}
		}
	}
}

// TestOverNFSAnotherUserClearsSetIDBitsAndTheChangeAttributeMoves: the
// owner, uid 1000, writes or truncates their set-id file: the set-user-id
// bit goes, and the set-group-id bit where group execute is set or they
// are not in the file's group; GETATTR right after shows the new mode,
// and the change attribute has moved, so a client refreshes what it
// cached.
func TestOverNFSAnotherUserClearsSetIDBitsAndTheChangeAttributeMoves(t *testing.T) {
	e := newEnv(t, Options{})
	c, root := setIDClient(t, e, 1000, 1000)
	ctx := t.Context()
	for _, tc := range []struct {
		gid, from, to uint32
	}{
		{1000, 0o4755, 0o755},
		{1000, 0o2755, 0o755},
		{1000, 0o6755, 0o755},
		{1000, 0o2745, 0o2745}, // in the group, no group execute: stays
		{0, 0o2745, 0o745},     // not in the group: goes
	} {
		for _, op := range setIDOps {
			name := fmt.Sprintf("f%o-%d", tc.from, tc.gid)
			setIDFile(t, e, name, 1000, tc.gid, tc.from)
			fh, err := c.Lookup(ctx, root, name)
			if err != nil {
				t.Fatal(err)
			}
			before, err := c.GetAttr(ctx, fh, modeAndChange)
			if err != nil {
				t.Fatal(err)
			}
			if err := op.do(ctx, c, root, name); err != nil {
				t.Fatalf("%s by the owner on a %o file of group %d: %v", op.name, tc.from, tc.gid, err)
			}
			after, err := c.GetAttr(ctx, fh, modeAndChange)
			if err != nil {
				t.Fatal(err)
			}
			if after.Mode != tc.to {
				t.Errorf("%s by the owner on a %o file of group %d: mode %o, want %o", op.name, tc.from, tc.gid, after.Mode, tc.to)
			}
			if after.Change == before.Change {
				t.Errorf("%s by the owner on a %o file: the change attribute stayed at %d", op.name, tc.from, after.Change)
			}
		}
	}
}

// TestOverNFSChownClearsSetIDBitsEvenForRoot: a SETATTR of the owner, even
// to the owner the file has, clears set-user-id whoever sends it; root
// keeps set-group-id without group execute.
func TestOverNFSChownClearsSetIDBitsEvenForRoot(t *testing.T) {
	e := newEnv(t, Options{})
	c, root := setIDClient(t, e, 0, 0)
	ctx := t.Context()
	for _, tc := range []struct{ from, to uint32 }{
		{0o6755, 0o755},
		{0o4755, 0o755},
		{0o2745, 0o2745},
	} {
		name := fmt.Sprintf("f%o", tc.from)
		setIDFile(t, e, name, 1000, 1000, tc.from)
		fh, err := c.Lookup(ctx, root, name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.GetAttr(ctx, fh, modeAndChange)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SetAttr(ctx, fh, nfsclient.Attrs{}.WithOwner(a.Owner)); err != nil {
			t.Fatal(err)
		}
		if a, err = c.GetAttr(ctx, fh, modeAndChange); err != nil {
			t.Fatal(err)
		}
		if a.Mode != tc.to {
			t.Errorf("chown of a %o file to its own owner by root: mode %o, want %o", tc.from, a.Mode, tc.to)
		}
	}
}

// TestOverNFSASquashedRootClearsSetIDBits: with root squash, uid 0 runs as
// nobody, without CAP_FSETID, and its write clears set-id bits of a file
// nobody may write.
func TestOverNFSASquashedRootClearsSetIDBits(t *testing.T) {
	e := newEnv(t, Options{RootSquash: true})
	c, root := setIDClient(t, e, 0, 0)
	ctx := t.Context()
	setIDFile(t, e, "f", 1000, 1000, 0o6777)
	if err := setIDOps[0].do(ctx, c, root, "f"); err != nil {
		t.Fatal(err)
	}
	fh, err := c.Lookup(ctx, root, "f")
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.GetAttr(ctx, fh, modeAndChange)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != 0o777 {
		t.Errorf("WRITE by a squashed root on a 6777 file: mode %o, want 777", a.Mode)
	}
}
