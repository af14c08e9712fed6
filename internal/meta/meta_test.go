package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/tier"
)

func openStoreB(b *testing.B) *Store {
	b.Helper()
	db, err := testkv.Open(b, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db, Options{ExportDelay: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	t.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db, Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustCreate(t *testing.T, s *Store, parent Ino, name string, mode uint32) Inode {
	t.Helper()
	in, err := s.Create(context.Background(), parent, name, Inode{Mode: mode}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// A new file system's root takes the owner and directory mode of the
// defaults (root and 0755 when none are given); lost+found has the same
// owner and is shared as /tmp is (LostFoundMode).
func TestNewFileSystemHasTheDefaultRootAndASharedLostFound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaults *Defaults
		uid, gid uint32
		rootMode uint32
	}{
		{"standard", nil, 0, 0, 0o755},
		{"given", &Defaults{Uid: 1000, Gid: 100, FileMode: 0o600, DirMode: 0o750}, 1000, 100, 0o750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := testkv.Open(t, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			db = kvreplay.FromEnv(t, db)
			t.Cleanup(func() { db.Close() })
			ctx := context.Background()
			s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Defaults: tc.defaults})
			if err != nil {
				t.Fatal(err)
			}
			root, err := s.Get(ctx, RootIno)
			if err != nil {
				t.Fatal(err)
			}
			if root.Mode != syscall.S_IFDIR|tc.rootMode || root.Uid != tc.uid || root.Gid != tc.gid {
				t.Fatalf("root mode %o uid %d gid %d, want %o %d %d", root.Mode, root.Uid, root.Gid, syscall.S_IFDIR|tc.rootMode, tc.uid, tc.gid)
			}
			lf, err := s.Lookup(ctx, RootIno, s.LostFoundName())
			if err != nil {
				t.Fatal(err)
			}
			if lf.Mode != syscall.S_IFDIR|LostFoundMode || lf.Uid != tc.uid || lf.Gid != tc.gid || !lf.Has(NoExport) {
				t.Fatalf("lost+found mode %o uid %d gid %d flags %b", lf.Mode, lf.Uid, lf.Gid, lf.Flags)
			}
			if _, err := s.Remove(ctx, RootIno, s.LostFoundName(), true, nil); !errors.Is(err, syscall.EPERM) {
				t.Fatalf("rmdir lost+found: %v", err)
			}
			if n, _, _ := s.QueueStats(ctx); n != 0 {
				t.Fatalf("a new file system has %d queued exports", n)
			}
		})
	}
}

// What an imported object lacks shows the defaults of the run that reads
// it, and a change of defaults writes nothing: no export is queued. An
// attribute the object carried, and one the file side set, stay; the
// root of an existing file system keeps what it had.
func TestImportedAttributesFollowTheDefaultsOfEachRun(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func(d Defaults) (*Store, func()) {
		t.Helper()
		db, err := testkv.Open(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		db = kvreplay.FromEnv(t, db)
		s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Defaults: &d})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return s, func() { s.Sync(ctx); db.Close() }
	}
	first := Defaults{Uid: 1000, Gid: 1000, FileMode: 0o644, DirMode: 0o755}
	s, closeDB := open(first)
	t.Cleanup(func() { closeDB() })
	_, _, err := s.AddImported(ctx, Observation{}, RootIno, []Imported{
		{Name: "bare", Mode: syscall.S_IFREG, Defaulted: Defaulted, Obj: Object{Key: "bare", ETag: "1", VersionID: "v1", Size: 1}},
		{Name: "s3fs", Mode: syscall.S_IFREG | 0o600, Uid: 7, Gid: 8, Obj: Object{Key: "s3fs", ETag: "2", VersionID: "v2", Size: 1}},
		{Name: "modeonly", Mode: syscall.S_IFREG | 0o640, Defaulted: UidDefaulted | GidDefaulted, Obj: Object{Key: "modeonly", ETag: "3", VersionID: "v3", Size: 1}},
		{Name: "chowned", Mode: syscall.S_IFREG, Defaulted: Defaulted, Obj: Object{Key: "chowned", ETag: "4", VersionID: "v4", Size: 1}},
		{Name: "exported", Mode: syscall.S_IFREG, Defaulted: Defaulted, Obj: Object{Key: "exported", ETag: "5", VersionID: "v5", Size: 1}},
		{Name: "prefix", Mode: syscall.S_IFDIR, Defaulted: Defaulted},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	chowned, err := s.Lookup(ctx, RootIno, "chowned")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, chowned.Ino, func(in *Inode) (Change, error) {
		in.Uid = 42
		return AttrChange, nil
	}); err != nil {
		t.Fatal(err)
	}
	// An export that writes an object (a rename of a parent moves it)
	// records the attributes the file showed: they are its own now.
	exported, err := s.Lookup(ctx, RootIno, "exported")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Synced(ctx, Queued{Ino: exported.Ino}, exported.Gen, func(in *Inode) {
		in.Keys = []Object{{Key: "moved/exported", ETag: "6", VersionID: "v6", Size: 1}}
	}); err != nil {
		t.Fatal(err)
	}
	closeDB()

	second := Defaults{Uid: 2000, Gid: 3000, FileMode: 0o400, DirMode: 0o500}
	s, closeDB = open(second)
	for _, tc := range []struct {
		name          string
		mode          uint32
		uid, gid      uint32
		stillDefaults bool
	}{
		{"bare", syscall.S_IFREG | 0o400, 2000, 3000, true},
		{"s3fs", syscall.S_IFREG | 0o600, 7, 8, false},
		{"modeonly", syscall.S_IFREG | 0o640, 2000, 3000, true},
		// chown fixed all three as they were then: the export records them.
		{"chowned", syscall.S_IFREG | 0o644, 42, 1000, false},
		{"exported", syscall.S_IFREG | 0o644, 1000, 1000, false},
		{"prefix", syscall.S_IFDIR | 0o500, 2000, 3000, true},
	} {
		in, err := s.Lookup(ctx, RootIno, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if in.Mode != tc.mode || in.Uid != tc.uid || in.Gid != tc.gid || in.Flags&Defaulted != 0 != tc.stillDefaults {
			t.Errorf("%s: mode %o uid %d gid %d flags %b, want %o %d %d (defaults %v)", tc.name,
				in.Mode, in.Uid, in.Gid, in.Flags, tc.mode, tc.uid, tc.gid, tc.stillDefaults)
		}
	}
	root, err := s.Get(ctx, RootIno)
	if err != nil || root.Uid != 1000 || root.Mode != syscall.S_IFDIR|0o755 {
		t.Errorf("root of an existing file system: uid %d mode %o (%v), want what the first run made", root.Uid, root.Mode, err)
	}
	// Only the chown is queued: new defaults are no change to export.
	if n, _, err := s.QueueStats(ctx); err != nil || n != 1 {
		t.Errorf("%d queued exports (%v), want 1 (the chown)", n, err)
	}
}

func TestInodeNumbersSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	ctx := context.Background()
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := mustCreate(t, s, RootIno, "d", syscall.S_IFDIR|0o755)
	f := mustCreate(t, s, d.Ino, "f", syscall.S_IFREG|0o644)
	fsid := s.Fsid()
	s.Sync(ctx)
	db.Close()

	s2 := openStore(t, dir)
	if s2.Fsid() != fsid {
		t.Fatalf("fsid changed: %s then %s", fsid, s2.Fsid())
	}
	got, err := s2.Lookup(ctx, d.Ino, "f")
	if err != nil || got.Ino != f.Ino {
		t.Fatalf("lookup after reopen: %v, ino %d want %d", err, got.Ino, f.Ino)
	}
	g := mustCreate(t, s2, d.Ino, "g", syscall.S_IFREG|0o644)
	if g.Ino <= f.Ino {
		t.Fatalf("inode number %d reused after reopen (last was %d)", g.Ino, f.Ino)
	}
}

func TestNamespaceOperations(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	a := mustCreate(t, s, RootIno, "a", syscall.S_IFDIR|0o755)
	b := mustCreate(t, s, RootIno, "b", syscall.S_IFDIR|0o755)
	f := mustCreate(t, s, a.Ino, "f", syscall.S_IFREG|0o644)
	mustCreate(t, s, b.Ino, "sub", syscall.S_IFDIR|0o755)

	if _, err := s.Create(ctx, a.Ino, "f", Inode{Mode: syscall.S_IFREG}, nil); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("create over existing: %v", err)
	}
	if _, err := s.Link(ctx, f.Ino, b.Ino, "hard", nil); err != nil {
		t.Fatal(err)
	}
	paths, _, err := s.Paths(ctx, f.Ino)
	if err != nil || len(paths) != 2 {
		t.Fatalf("paths %v %v", paths, err)
	}
	if _, err := s.Remove(ctx, RootIno, "b", true, nil); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if _, err := s.Rename(ctx, RootIno, "a", a.Ino, "x", 0, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("rename dir into itself: %v", err)
	}
	if _, err := s.Rename(ctx, a.Ino, "f", b.Ino, "sub", 0, nil); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("rename file over dir: %v", err)
	}
	if _, err := s.Rename(ctx, RootIno, "a", b.Ino, "hard", 0, nil); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("rename dir over file: %v", err)
	}
	if _, err := s.Rename(ctx, a.Ino, "f", b.Ino, "hard", RenameNoReplace, nil); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("noreplace: %v", err)
	}
	// Renaming one name of an inode onto another name of it does nothing.
	if _, err := s.Rename(ctx, a.Ino, "f", b.Ino, "hard", 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, a.Ino, "f"); err != nil {
		t.Fatalf("rename onto own hard link removed the source: %v", err)
	}
	// Exchange a directory and a file across parents.
	if _, err := s.Rename(ctx, a.Ino, "f", b.Ino, "sub", RenameExchange, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Lookup(ctx, a.Ino, "f")
	if !got.IsDir() {
		t.Fatal("exchange did not swap")
	}
	ga, _ := s.Get(ctx, a.Ino)
	gb, _ := s.Get(ctx, b.Ino)
	if ga.Nlink != 3 || gb.Nlink != 2 {
		t.Fatalf("after exchange nlink a=%d b=%d, want 3 and 2", ga.Nlink, gb.Nlink)
	}
	// Move a whole directory: its path changes, its inode does not.
	if _, err := s.Rename(ctx, RootIno, "a", b.Ino, "a2", 0, nil); err != nil {
		t.Fatal(err)
	}
	moved, err := s.Lookup(ctx, b.Ino, "a2")
	if err != nil || moved.Ino != a.Ino {
		t.Fatalf("moved dir: %v ino %d", err, moved.Ino)
	}
	paths, _, _ = s.Paths(ctx, got.Ino)
	if len(paths) != 1 || paths[0] != "b/a2/f" {
		t.Fatalf("paths after moving the parent: %v", paths)
	}
	// Replace a file: the old target loses its last name.
	mustCreate(t, s, RootIno, "t", syscall.S_IFREG|0o644)
	victim := mustCreate(t, s, RootIno, "v", syscall.S_IFREG|0o644)
	rep, err := s.Rename(ctx, RootIno, "t", RootIno, "v", 0, nil)
	if err != nil || rep == nil || rep.Ino != victim.Ino || rep.Nlink != 0 {
		t.Fatalf("replace: %v %+v", err, rep)
	}
	ents, err := s.ReadDir(ctx, RootIno, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	want := []string{s.LostFoundName(), "b", "v"}
	if len(names) != len(want) {
		t.Fatalf("root lists %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("root lists %v, want %v", names, want)
		}
	}
	page, _ := s.ReadDir(ctx, RootIno, "b", 100)
	if len(page) != 1 || page[0].Name != "v" {
		t.Fatalf("readdir after b: %v", page)
	}
}

func TestQueueTracksQuietPeriodAndSync(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := openStoreAt(t, time.Minute, &now)
	f := mustCreate(t, s, RootIno, "f", syscall.S_IFREG|0o644)
	if due, _ := s.Due(ctx, now.Add(59*time.Second), 10); len(due) != 0 {
		t.Fatalf("due before the delay: %v", due)
	}
	now = now.Add(30 * time.Second)
	s.Update(ctx, f.Ino, func(in *Inode) (Change, error) { in.Size = 5; return DataChange, nil })
	if due, _ := s.Due(ctx, now.Add(59*time.Second), 10); len(due) != 0 {
		t.Fatalf("a write did not restart the quiet period: %v", due)
	}
	due, _ := s.Due(ctx, now.Add(time.Minute), 10)
	if len(due) != 1 || due[0].Ino != f.Ino {
		t.Fatalf("due: %v", due)
	}
	cur, _ := s.Get(ctx, f.Ino)
	// A write while the export runs keeps the inode queued and dirty.
	s.Update(ctx, f.Ino, func(in *Inode) (Change, error) { in.Size = 6; return DataChange, nil })
	in, done, err := s.Synced(ctx, due[0], cur.Gen, func(in *Inode) { in.Keys = []Object{{Key: "f"}} })
	if err != nil || done || !in.Dirty() {
		t.Fatalf("synced during a write: done=%v dirty=%v err=%v", done, in.Dirty(), err)
	}
	due, _ = s.Due(ctx, now.Add(time.Hour), 10)
	cur, _ = s.Get(ctx, f.Ino)
	in, done, err = s.Synced(ctx, due[0], cur.Gen, func(in *Inode) {})
	if err != nil || !done || in.Dirty() || in.Has(DataDirty) {
		t.Fatalf("clean sync: done=%v dirty=%v err=%v", done, in.Dirty(), err)
	}
	if n, _, _ := s.QueueStats(ctx); n != 0 {
		t.Fatalf("queue holds %d after sync", n)
	}
}

func TestImportedChildrenDoNotReplaceLocalNames(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	local := mustCreate(t, s, RootIno, "same", syscall.S_IFREG|0o600)
	n, _, err := s.AddImported(ctx, Observation{}, RootIno, []Imported{
		{Name: "same", Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "same", Size: 3}},
		{Name: "dir", Mode: syscall.S_IFDIR | 0o755},
		{Name: s.LostFoundName(), Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: s.LostFoundName()}},
	}, true)
	if err != nil || n != 1 {
		t.Fatalf("added %d, %v", n, err)
	}
	got, _ := s.Lookup(ctx, RootIno, "same")
	if got.Ino != local.Ino {
		t.Fatal("import replaced a local file")
	}
	d, _ := s.Lookup(ctx, RootIno, "dir")
	if d.Source != "dir/" || d.Has(Listed) {
		t.Fatalf("imported dir source %q flags %b", d.Source, d.Flags)
	}
	root, _ := s.Get(ctx, RootIno)
	if !root.Has(Listed) || root.Nlink != 4 {
		t.Fatalf("root flags %b nlink %d", root.Flags, root.Nlink)
	}
}

func TestInodeEncodingRoundTrips(t *testing.T) {
	in := Inode{Ino: 7, Mode: syscall.S_IFLNK | 0o777, Uid: 1000, Gid: 100, Nlink: 1, Size: -1,
		Mtime: -5, Target: "x/y", Gen: 3, ExportedGen: 2, Flags: Listed | DataDirty, Backed: 5, Cached: 4096,
		Unexported: 1000, Base: Object{Key: "k", ETag: "e", VersionID: "v", Size: 9},
		Keys: []Object{{Key: "a"}, {Key: "b", ETag: "t"}}, Source: "p/", UnfinishedWrite: 1 << 40}
	out, err := decodeInode(in.Ino, in.encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	if out.Target != in.Target || out.Size != in.Size || len(out.Keys) != 2 || out.Keys[1].ETag != "t" ||
		out.Base != in.Base || out.Source != in.Source || out.Flags != in.Flags || out.Mtime != in.Mtime ||
		out.Backed != in.Backed || out.Cached != in.Cached || out.Unexported != in.Unexported ||
		out.UnfinishedWrite != in.UnfinishedWrite {
		t.Fatalf("round trip: %+v", out)
	}
	// Version 2 records an earlier bucketfs wrote end before
	// UnfinishedWrite, or before Unexported too.
	full := in.encodeV2(nil)
	noUnfinished := len(full) - len(binary.AppendVarint(nil, in.UnfinishedWrite))
	legacy := noUnfinished - len(binary.AppendVarint(nil, in.Unexported))
	if out, err := decodeInode(in.Ino, full[:noUnfinished]); err != nil || out.UnfinishedWrite != 0 || out.Unexported != in.Unexported {
		t.Fatalf("a record without UnfinishedWrite: %+v, %v", out, err)
	}
	for i := 0; i < len(full); i++ {
		if _, err := decodeInode(in.Ino, full[:i]); err == nil && i != legacy && i != noUnfinished {
			t.Fatalf("truncated record of %d bytes decoded", i)
		}
	}
}

// A record from before unexported bytes were counted by block: a dirty
// file counted all its cached bytes as unexported, and goes on doing so
// until its export (the blocks carry no stamps to tell), so that the
// tier's usage counters stay in step; a clean file counts none.
func TestARecordWithoutUnexportedCountsAsItDidBefore(t *testing.T) {
	for _, dirty := range []bool{true, false} {
		in := Inode{Ino: 8, Mode: syscall.S_IFREG | 0o644, Nlink: 1, Size: 8192, Gen: 3, ExportedGen: 3, Cached: 8192}
		if dirty {
			in.Gen = 4
		}
		enc := in.encodeV2(nil)
		// Without Unexported and UnfinishedWrite (both 0 here, a byte each).
		out, err := decodeInode(in.Ino, enc[:len(enc)-2*len(binary.AppendVarint(nil, 0))])
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case dirty && (out.Unexported != in.Cached || !out.Has(unstamped)):
			t.Errorf("an old record of a dirty file decodes with %d unexported bytes, flags %b", out.Unexported, out.Flags)
		case !dirty && (out.Unexported != 0 || out.Has(unstamped)):
			t.Errorf("an old record of a clean file decodes with %d unexported bytes, flags %b", out.Unexported, out.Flags)
		}
	}
}

func TestTheUploadJournalKeepsUploadsUntilTheyEndAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	ctx := context.Background()
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ups, err := s.Uploads(ctx); err != nil || len(ups) != 0 {
		t.Fatalf("a new file system records uploads %v, %v", ups, err)
	}
	for id, key := range map[string]string{"id-1": "dir/big", "id-2": "other", "id-3": "dir/big"} {
		if err := s.BeginUpload(ctx, id, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndUpload(ctx, "id-2"); err != nil {
		t.Fatal(err)
	}
	if err := s.EndUpload(ctx, "never-recorded"); err != nil {
		t.Fatalf("ending an upload with no record: %v", err)
	}
	db.Close()

	s = openStore(t, dir)
	ups, err := s.Uploads(ctx)
	want := []Upload{{ID: "id-1", Key: "dir/big"}, {ID: "id-3", Key: "dir/big"}}
	if err != nil || len(ups) != len(want) || ups[0] != want[0] || ups[1] != want[1] {
		t.Fatalf("after reopen the journal holds %v, %v; want %v", ups, err, want)
	}
	// The records sit beside the namespace without disturbing it.
	if n, _, _ := s.QueueStats(ctx); n != 0 {
		t.Fatalf("%d queued exports", n)
	}
}

// A namespace written before file data moved into the store (inode records
// of version 1, the data kept in STATE_DIR/tier) is refused with a message
// that says what to do, never read as files without their data.
func TestANamespaceOfTheOldFormatIsRefusedWithAMessage(t *testing.T) {
	dir := t.TempDir()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	ctx := context.Background()
	s, err := Open(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Make every inode record look like one of version 1.
	err = db.Update(ctx, func(tx kv.Txn) error {
		var recs [][2][]byte
		if err := tx.Scan([]byte{pInode}, kv.PrefixEnd([]byte{pInode}), func(k, v []byte) bool {
			recs = append(recs, [2][]byte{append([]byte(nil), k...), append([]byte{1}, v[1:]...)})
			return true
		}); err != nil {
			return err
		}
		for _, r := range recs {
			if err := tx.Set(r[0], r[1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s
	if _, err := Open(ctx, db, Options{}); !errors.Is(err, ErrOldFormat) {
		t.Fatalf("opening an old namespace: %v, want ErrOldFormat", err)
	}
	db.Close()
}

// Found by the crash checker: a writer stalled between two pieces of one
// large write(2) (the kernel hands it over 1 MiB at a time) for longer than
// the export delay, and the bucket received the state between the pieces.
// A write that fills a whole piece, ending on a page boundary, is most
// likely followed by another, and its quiet period is PieceGrace longer;
// the piece that ends the write(2) brings the export back to the delay.
func TestAPieceOfASplitWriteGetsAGraceBeforeExport(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	const delay = time.Second
	s := openStoreAt(t, delay, &now)
	f := mustCreate(t, s, RootIno, "f", syscall.S_IFREG|0o644)
	dueAt := func() time.Time {
		t.Helper()
		due, err := s.Due(ctx, now.Add(time.Hour), 10)
		if err != nil || len(due) != 1 {
			t.Fatalf("queue: %v, %v", due, err)
		}
		return time.Unix(0, due[0].Due)
	}
	piece := make([]byte, WritePiece)
	// The first piece of a write(2) at offset 100: up to the next piece
	// boundary of pages.
	if _, err := s.WriteData(ctx, f.Ino, piece[:WritePiece-100], 100, false, 0, Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := dueAt(), now.Add(delay+PieceGrace); !got.Equal(want) {
		t.Fatalf("after a first piece, due %v, want %v", got, want)
	}
	now = now.Add(100 * time.Millisecond)
	if _, err := s.WriteData(ctx, f.Ino, piece, WritePiece, false, 0, Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := dueAt(), now.Add(delay+PieceGrace); !got.Equal(want) {
		t.Fatalf("after a middle piece, due %v, want %v", got, want)
	}
	now = now.Add(100 * time.Millisecond)
	if _, err := s.WriteData(ctx, f.Ino, piece[:5000], 2*WritePiece, false, 0, Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := dueAt(), now.Add(delay); !got.Equal(want) {
		t.Fatalf("after the last piece, due %v, want %v", got, want)
	}
	// Writes that are not pieces of a larger one: small, short of a piece,
	// or a piece's length not ending on a page boundary.
	for _, w := range []struct{ off, n int64 }{{0, 4096}, {0, WritePiece - 4096}, {100, WritePiece}, {4096, WritePiece - 100}} {
		now = now.Add(time.Second)
		if _, err := s.WriteData(ctx, f.Ino, piece[:w.n], w.off, false, 0, Limits{}, nil); err != nil {
			t.Fatal(err)
		}
		if got, want := dueAt(), now.Add(delay); !got.Equal(want) {
			t.Fatalf("after a write of [%d,+%d), due %v, want %v", w.off, w.n, got, want)
		}
	}
}

// openStoreAt opens a store with the given export delay whose clock reads
// *now.
func openStoreAt(t *testing.T, delay time.Duration, now *time.Time) *Store {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db = kvreplay.FromEnv(t, db)
	t.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db, Options{ExportDelay: delay, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A change of names (rename, link, unlink) always writes a new queue token,
// even right after a write: it leaves Gen alone, so the token is all that
// tells an export under way that the names it read are gone (found by a
// file unlinked while its first upload was in flight: the export recorded
// its key, left the queue and forgot the inode, and the object stayed).
func TestANameChangeAlwaysMovesTheQueueToken(t *testing.T) {
	const delay = 64 * time.Second
	now := time.Unix(1_000_000, 0)
	s := openStoreAt(t, delay, &now)
	ctx := context.Background()
	token := func() int64 {
		t.Helper()
		due, err := s.Due(ctx, now.Add(time.Hour), 10)
		if err != nil || len(due) != 1 {
			t.Fatalf("queue: %v, %v", due, err)
		}
		return due[0].Due
	}
	f, err := s.Create(ctx, RootIno, "a", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, change := range []func() error{
		func() error { _, err := s.Rename(ctx, RootIno, "a", RootIno, "b", 0, nil); return err },
		func() error { _, err := s.Link(ctx, f.Ino, RootIno, "c", nil); return err },
		func() error { _, err := s.Remove(ctx, RootIno, "c", false, nil); return err },
		func() error { _, err := s.Remove(ctx, RootIno, "b", false, nil); return err },
	} {
		before := token()
		now = now.Add(time.Millisecond) // well within delay/64 of the last change
		if err := change(); err != nil {
			t.Fatal(err)
		}
		if token() == before {
			t.Fatalf("name change %d left the queue token as it was", i)
		}
	}
}

// An import resolves its parent directory before its transaction; a
// directory removed in between (an rmdir, or the import that drops an
// emptied directory) must not gain the child: a name inside a directory
// that has no name of its own has no path, and its export would fail for
// ever. The import answers EAGAIN and the caller resolves the key again.
// (Found by the differential sync test: "path of 4: no such file or
// directory", retried every 64 s.)
func TestAnImportIntoADirectoryRemovedMeanwhileIsRefused(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	d, err := s.Create(ctx, RootIno, "d", Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, RootIno, "d", true, nil); err != nil {
		t.Fatal(err)
	}
	it := Imported{Name: "x", Mode: syscall.S_IFREG | 0o644, Obj: Object{Key: "d/x", ETag: "e", VersionID: "v", Size: 1}}
	_, err = s.ImportObject(ctx, Observation{}, d.Ino, nil, "x", nil, it)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("import into a removed directory: %v, want EAGAIN", err)
	}
	if _, err := s.Lookup(ctx, d.Ino, "x"); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the removed directory holds x after the import: %v", err)
	}
}

// A rename into a directory removed meanwhile fails with ENOENT, as on a
// local disk: the file would otherwise have no path, be out of reach and
// never exported.
func TestARenameIntoARemovedDirectoryFails(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	d, err := s.Create(ctx, RootIno, "d", Inode{Mode: syscall.S_IFDIR | 0o755}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, RootIno, "x", Inode{Mode: syscall.S_IFREG | 0o644}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, RootIno, "d", true, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rename(ctx, RootIno, "x", d.Ino, "x", 0, nil); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("rename into a removed directory: %v, want ENOENT", err)
	}
	if _, err := s.Lookup(ctx, RootIno, "x"); err != nil {
		t.Fatalf("x is gone from the root after the refused rename: %v", err)
	}
}

// Within follows every name of an inode up to the root: a directory moved
// out of a subtree is no longer within it, a file with a second name
// inside still is, and a removed file is within nothing.
func TestWithinFollowsEveryNameOfAnInodeUpward(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	top := mustCreate(t, s, RootIno, "top", syscall.S_IFDIR|0o755)
	sub := mustCreate(t, s, top.Ino, "sub", syscall.S_IFDIR|0o755)
	f := mustCreate(t, s, sub.Ino, "f", syscall.S_IFREG|0o644)
	out := mustCreate(t, s, RootIno, "out", syscall.S_IFDIR|0o755)
	g := mustCreate(t, s, out.Ino, "g", syscall.S_IFREG|0o644)

	within := func(ino, dir Ino) bool {
		t.Helper()
		ok, err := s.Within(ctx, ino, dir)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, c := range []struct {
		what     string
		ino, dir Ino
		want     bool
	}{
		{"a directory within itself", top.Ino, top.Ino, true},
		{"a file two levels down", f.Ino, top.Ino, true},
		{"everything within the root", g.Ino, RootIno, true},
		{"a sibling's file", g.Ino, top.Ino, false},
		{"a parent within its child", top.Ino, sub.Ino, false},
	} {
		if got := within(c.ino, c.dir); got != c.want {
			t.Errorf("%s: Within = %v, want %v", c.what, got, c.want)
		}
	}

	// A second name inside is enough.
	if _, err := s.Link(ctx, g.Ino, sub.Ino, "g2", nil); err != nil {
		t.Fatal(err)
	}
	if !within(g.Ino, top.Ino) {
		t.Error("a file hard-linked into the subtree is not within it")
	}
	// A directory moved out takes its files with it.
	if _, err := s.Rename(ctx, top.Ino, "sub", out.Ino, "sub", 0, nil); err != nil {
		t.Fatal(err)
	}
	if within(sub.Ino, top.Ino) || within(f.Ino, top.Ino) {
		t.Error("a directory moved out of the subtree (or its file) is still within it")
	}
	// A file without names is within nothing.
	if _, err := s.Remove(ctx, out.Ino, "g", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, sub.Ino, "g2", false, nil); err != nil {
		t.Fatal(err)
	}
	if within(g.Ino, RootIno) {
		t.Error("a removed file is within the root")
	}
}

// PendingBytes adds up the sizes of the queued files whose bytes changed,
// in one read, up to a bound past which it says the sum is partial; a
// file whose attributes alone changed, and a directory, add nothing.
func TestPendingBytesSumsTheQueuedDataChangesUpToABound(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	for i, size := range []int{3, 5, 7} {
		in := mustCreate(t, s, RootIno, fmt.Sprint("f", i), syscall.S_IFREG|0o644)
		if _, err := s.WriteData(ctx, in.Ino, make([]byte, size), 0, false, 1, Limits{}, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.EndWrite(ctx, in.Ino); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, s, RootIno, "d", syscall.S_IFDIR|0o755)
	mustCreate(t, s, RootIno, "empty", syscall.S_IFREG|0o644)
	n, partial, err := s.PendingBytes(ctx, 100)
	if err != nil || n != 15 || partial {
		t.Fatalf("PendingBytes = %d, partial %v, %v; want 15, whole", n, partial, err)
	}
	if _, partial, err := s.PendingBytes(ctx, 2); err != nil || !partial {
		t.Fatalf("PendingBytes over 2 of the queue: partial %v, %v; want partial", partial, err)
	}
}

// The blocks of a deleted file are dropped in transactions of at most
// dropBatch blocks, each leaving the file's Cached and Unexported, and the
// tier's usage counters, equal to what its blocks hold; at the end none is
// left and the counters are back where they were before the file.
func TestAReclaimedFilesBlocksAreDroppedInBoundedTransactions(t *testing.T) {
	old := dropBatch
	dropBatch = 7
	t.Cleanup(func() { dropBatch = old })
	for _, how := range []string{"reclaim", "forget"} {
		t.Run(how, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			ctx := context.Background()
			before, err := s.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			in := mustCreate(t, s, RootIno, "big", syscall.S_IFREG|0o644)
			const blocks = 50
			data := bytes.Repeat([]byte("data of a big file, "), blocks*tier.BlockSize/20) // not zeros: a zero block holds nothing
			if _, err := s.WriteData(ctx, in.Ino, data, 0, false, 1, Limits{}, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.EndWrite(ctx, in.Ino); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Remove(ctx, RootIno, "big", false, nil); err != nil {
				t.Fatal(err)
			}
			var most int
			s.kv = countDeletes{Store: s.kv, most: &most}
			if how == "reclaim" {
				err = s.ReclaimData(ctx, in.Ino)
			} else {
				err = s.Forget(ctx, in.Ino)
			}
			if err != nil {
				t.Fatal(err)
			}
			if most > dropBatch+8 { // a batch, and the few records the last transaction deletes
				t.Errorf("a transaction deleted %d keys; the batch is %d blocks", most, dropBatch)
			}
			left := 0
			s.kv.View(ctx, func(r kv.Reader) error {
				p := kv.AppendUint64([]byte{'b'}, uint64(in.Ino))
				return r.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool { left++; return true })
			})
			if left != 0 {
				t.Errorf("%d blocks left", left)
			}
			if after, err := s.Usage(ctx); err != nil || after != before {
				t.Errorf("usage %+v after, %+v before the file (%v)", after, before, err)
			}
			if how == "reclaim" {
				got, err := s.Get(ctx, in.Ino)
				if err != nil || got.Cached != 0 || got.Unexported != 0 {
					t.Errorf("the reclaimed file holds %d (%d unexported), %v", got.Cached, got.Unexported, err)
				}
			}
		})
	}
}

// countDeletes records the most keys one Update of the store deletes.
type countDeletes struct {
	kv.Store
	most *int
}

func (c countDeletes) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return c.UpdateSized(ctx, 0, fn)
}

func (c countDeletes) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	return c.Store.UpdateSized(ctx, size, func(tx kv.Txn) error {
		ct := &deleteCountingTxn{Txn: tx}
		err := fn(ct)
		if err == nil && ct.n > *c.most {
			*c.most = ct.n
		}
		return err
	})
}

type deleteCountingTxn struct {
	kv.Txn
	n int
}

func (t *deleteCountingTxn) Delete(k []byte) error { t.n++; return t.Txn.Delete(k) }

// DeleteRange counts the keys it deletes.
func (t *deleteCountingTxn) DeleteRange(lower, upper []byte) error {
	if err := t.Txn.Scan(lower, upper, func(k, v []byte) bool { t.n++; return true }); err != nil {
		return err
	}
	return t.Txn.DeleteRange(lower, upper)
}

// A file system records the metadata format it is written in; a bucketfs
// refuses one at a newer format (ErrNewerFormat) with both numbers, and
// one made before formats were recorded is brought to MetaFormat.
func TestAFileSystemAtANewerMetadataFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := testkv.Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := Open(ctx, db, Options{}); err != nil {
		t.Fatal(err)
	}
	format := func() uint64 {
		var v []byte
		if err := db.View(ctx, func(r kv.Reader) (err error) { v, err = r.Get(keyFormat); return err }); err != nil {
			t.Fatal(err)
		}
		return kv.Uint64(v)
	}
	if got := format(); got != MetaFormat {
		t.Fatalf("a new file system is at format %d, want %d", got, MetaFormat)
	}
	set := func(v []byte) {
		t.Helper()
		if err := db.Update(ctx, func(tx kv.Txn) error {
			if v == nil {
				return tx.Delete(keyFormat)
			}
			return tx.Set(keyFormat, v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	set(kv.AppendUint64(nil, MetaFormat+1))
	_, err = Open(ctx, db, Options{})
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", MetaFormat+1)) {
		t.Fatalf("Open of a file system at format %d: %v, want ErrNewerFormat naming it", MetaFormat+1, err)
	}
	set(nil)
	if _, err := Open(ctx, db, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := format(); got != MetaFormat {
		t.Fatalf("a file system from before formats were recorded is at %d after Open, want %d", got, MetaFormat)
	}
}
