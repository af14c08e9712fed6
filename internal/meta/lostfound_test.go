package meta

import (
	"context"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
)

// A file system made before lost+found was shared has it 0700: the first
// start gives it the shared mode, durably and once. Neither another run's
// defaults nor an import touch it afterwards, and a mode its owner sets
// later stays over restarts.
func TestAnOldPrivateLostFoundIsSharedOnceAtStart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func(d *Defaults) (*Store, func()) {
		t.Helper()
		db, err := testkv.Open(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		db = kvreplay.FromEnv(t, db)
		s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Defaults: d})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return s, func() { db.Close() }
	}
	lostFound := func(s *Store) Inode {
		t.Helper()
		lf, err := s.Lookup(ctx, RootIno, s.LostFoundName())
		if err != nil {
			t.Fatal(err)
		}
		return lf
	}

	// A file system as earlier versions made it: lost+found 0700, owned
	// by the defaults' owner of that run.
	s, closeDB := open(&Defaults{Uid: 7, Gid: 8, FileMode: 0o644, DirMode: 0o755})
	if err := s.kv.Update(ctx, func(tx kv.Txn) error {
		lf, err := s.getInode(tx, s.lostFound)
		if err != nil {
			return err
		}
		lf.Mode = syscall.S_IFDIR | 0o700
		if err := s.putInode(tx, &lf); err != nil {
			return err
		}
		return tx.Delete(keyLostFoundShared)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	closeDB()

	s, closeDB = open(&Defaults{Uid: 1000, Gid: 1000, FileMode: 0o600, DirMode: 0o700})
	lf := lostFound(s)
	if lf.Mode != syscall.S_IFDIR|LostFoundMode || lf.Uid != 7 || lf.Gid != 8 {
		t.Fatalf("lost+found after the start: mode %o uid %d gid %d, want %o 7 8", lf.Mode, lf.Uid, lf.Gid, syscall.S_IFDIR|LostFoundMode)
	}
	// An import of the root's listing leaves it alone (the bucket may
	// even hold an object of its name).
	if _, _, err := s.AddImported(ctx, Observation{}, RootIno, []Imported{
		{Name: s.LostFoundName(), Mode: syscall.S_IFDIR, Defaulted: Defaulted},
		{Name: "a", Mode: syscall.S_IFREG, Defaulted: Defaulted, Obj: Object{Key: "a", ETag: "1", VersionID: "v1", Size: 1}},
	}, true); err != nil {
		t.Fatal(err)
	}
	if lf := lostFound(s); lf.Mode != syscall.S_IFDIR|LostFoundMode {
		t.Fatalf("an import made lost+found %o", lf.Mode)
	}
	// Its owner chooses another mode; the next start keeps it.
	if _, err := s.Update(ctx, lf.Ino, func(in *Inode) (Change, error) {
		in.Mode = syscall.S_IFDIR | 0o700
		return AttrChange, nil
	}); err != nil {
		t.Fatal(err)
	}
	closeDB()
	s, closeDB = open(nil)
	defer closeDB()
	if lf := lostFound(s); lf.Mode != syscall.S_IFDIR|0o700 {
		t.Fatalf("a restart changed the mode its owner set to %o", lf.Mode)
	}
}
