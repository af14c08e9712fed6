package engine

import (
	"context"
	"os"
	"syscall"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// A write by a user without CAP_FSETID clears the file's set-id bits in
// the transaction of the write, and says whether it did (FUSE then drops
// the kernel's cached mode). When that transaction runs again (kv's rule:
// fn may run more than once) after a chmod took the bits away between
// the runs, the write that commits cleared nothing, and the answer says
// so: the answer is the committed run's, not an earlier run's.
func TestAWriteSaysItClearedSetIDBitsOnlyIfTheRunThatCommittedDid(t *testing.T) {
	ctx := context.Background()
	var rs *kvreplay.Store
	e := openEngineCfg(t, func(c *Config) {
		c.WrapKV = func(db kv.Store) kv.Store {
			rs = kvreplay.New(db, kvreplay.Options{})
			return rs
		}
	})
	user := vfs.Cred{Uid: 1000, Gid: 1000}
	a, h, err := e.FS.Create(ctx, vfs.Root, 1, "setuid", 0o777, uint32(os.O_WRONLY))
	if err != nil {
		t.Fatal(err)
	}
	h.Release(ctx)
	if _, err := e.FS.SetAttr(ctx, vfs.Root, a.Ino, vfs.SetAttrIn{Valid: vfs.SetMode, Mode: syscall.S_ISUID | 0o777}); err != nil {
		t.Fatal(err)
	}
	w, err := e.FS.Open(ctx, user, a.Ino, uint32(os.O_WRONLY))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Release(ctx) })
	chmodded := false
	rs.BetweenRuns(func(ctx context.Context) {
		rs.BetweenRuns(nil)
		_, err := e.Meta.Update(ctx, a.Ino, func(in *meta.Inode) (meta.Change, error) {
			in.Mode = in.Type() | 0o777
			return meta.AttrChange, nil
		})
		if err != nil {
			t.Error(err)
		}
		chmodded = true
	})
	n, cleared, err := w.WriteClearingSetID(ctx, user, []byte("x"), 0)
	if err != nil || n != 1 {
		t.Fatalf("write: %d, %v", n, err)
	}
	if !chmodded {
		t.Fatal("the write's transaction was not run again after a chmod")
	}
	if cleared {
		t.Fatal("the write says it cleared set-id bits that a chmod had taken away before its transaction committed")
	}
	if in, err := e.Meta.Get(ctx, a.Ino); err != nil || in.Mode&0o7777 != 0o777 {
		t.Fatalf("mode after the write: %o, %v; want 777", in.Mode, err)
	}
}
