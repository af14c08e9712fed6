package nfs4

import (
	"context"
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// A client that learns an inode number (fileid, READDIR) or guesses one
// must not reach the file by building its handle: it would skip the
// permission checks of the directories above it. Every way of making a
// handle without the server's secret is refused, while the server's own
// handles keep working across a restart of the whole process.
func TestAHandleNobodyWasGivenIsRefused(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	fs := e.eng.FS
	owner := vfs.Cred{Uid: 1000, Gid: 1000}
	dir, err := fs.Mkdir(ctx, owner, meta.RootIno, "private", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	f, h, err := fs.Create(ctx, owner, dir.Ino, "secret", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write(ctx, []byte("for uid 1000 only"), 0); err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)

	intruder := e.dial(1, authSys(2000, 2000))
	intruder.session("intruder")
	out := intruder.do(putroot(), getfh())
	root := fhOf(t, out[1])
	// The walk the permissions allow stops at the directory.
	intruder.expect(nfsv4.NFS4ERR_ACCESS, putroot(), lookup("private"), lookup("secret"))

	fsidHash := binary.BigEndian.Uint64(root[1:9])
	forgeries := map[string][]byte{
		"version 1 (no MAC)": func() []byte {
			b := make([]byte, 17)
			b[0] = 1
			binary.BigEndian.PutUint64(b[1:], fsidHash)
			binary.BigEndian.PutUint64(b[9:], uint64(f.Ino))
			return b
		}(),
		"the root's handle with the inode swapped": func() []byte {
			b := append([]byte(nil), root...)
			binary.BigEndian.PutUint64(b[9:], uint64(f.Ino))
			return b
		}(),
		"a zero MAC": func() []byte {
			b := append([]byte(nil), root...)
			binary.BigEndian.PutUint64(b[9:], uint64(f.Ino))
			clear(b[17:])
			return b
		}(),
		"the root's handle cut short":        root[:len(root)-1],
		"the root's handle with a byte more": append(append([]byte(nil), root...), 0),
	}
	for name, fh := range forgeries {
		res := intruder.raw(intruder.seqOp(), putfh(fh), getattr(nfsv4.FATTR4_SIZE), readOp(nfsv4.Stateid4{}, 0, 100))
		if res.Status != nfsv4.NFS4ERR_BADHANDLE && res.Status != nfsv4.NFS4ERR_STALE {
			t.Errorf("%s: PUTFH of a forged handle answered %s, want NFS4ERR_BADHANDLE or NFS4ERR_STALE",
				name, nfsv4.Nfsstat4_name[res.Status])
		}
	}

	// The owner's handle, from a walk, works before and after a restart.
	c := e.dial(1, authSys(1000, 1000))
	c.session("owner")
	out = c.do(putroot(), lookup("private"), lookup("secret"), getfh())
	fh := fhOf(t, out[3])
	e.restart()
	c = e.dial(1, authSys(1000, 1000))
	c.session("owner")
	out = c.do(putfh(fh), readOp(nfsv4.Stateid4{}, 0, 100))
	if r := readOK(t, out[1]); string(r.Data) != "for uid 1000 only" {
		t.Errorf("READ through a handle from before the restart = %q", r.Data)
	}
	// And the restarted server still refuses the forgeries.
	intruder = e.dial(1, authSys(2000, 2000))
	intruder.session("intruder")
	for name, fh := range forgeries {
		if res := intruder.raw(intruder.seqOp(), putfh(fh)); res.Status == nfsv4.NFS4_OK {
			t.Errorf("%s: PUTFH of a forged handle succeeded after a restart", name)
		}
	}
}
