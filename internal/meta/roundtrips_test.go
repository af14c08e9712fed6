package meta

import (
	"context"
	"testing"
	"time"

	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/pgtest"
)

// The round trips to PostgreSQL of the operations on every path (package
// kv/postgres counts them): a lookup reads the directory, the name and the
// inode the name's entry points to in one (PrefetchRef through the entry's
// value, which begins with the inode's number), a stat one, a create two
// (its first read fetches the parent, the name and the queue's counter
// cell; the writes go with COMMIT), a write of a new file's first bytes
// two, and the inodes of a listing one however many. A change of key
// layout that breaks a prefetch shows here.
func TestRoundTripsOfLookupsCreatesAndWritesOnPostgreSQL(t *testing.T) {
	db, err := postgres.Open(context.Background(), pgtest.Start(t).NewDatabase(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	pg := db.(*postgres.Store)
	s, err := Open(context.Background(), db, Options{ExportDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cost := func(what string, want int64, fn func() error) {
		t.Helper()
		before := pg.Stats().RoundTrips
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := pg.Stats().RoundTrips - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	dir := mustCreate(t, s, RootIno, "d", 0o40755)
	var f Inode
	cost("a create", 2, func() (err error) {
		f, err = s.Create(ctx, dir.Ino, "f", Inode{Mode: 0o100644}, nil)
		return err
	})
	cost("a write of a new file's first bytes", 2, func() error {
		_, err := s.WriteData(ctx, f.Ino, []byte("hello"), 0, false, time.Now().UnixNano(), Limits{}, nil)
		return err
	})
	cost("a lookup of an existing name", 1, func() error {
		_, in, err := s.LookupIn(ctx, dir.Ino, "f")
		if err == nil && in.Ino != f.Ino {
			t.Errorf("LookupIn found inode %d, want %d", in.Ino, f.Ino)
		}
		return err
	})
	cost("a lookup without the directory", 1, func() error {
		_, err := s.Lookup(ctx, dir.Ino, "f")
		return err
	})
	cost("a stat", 1, func() error {
		_, err := s.Get(ctx, f.Ino)
		return err
	})
	cost("the inodes of a listing", 1, func() error {
		got, err := s.GetMany(ctx, []Ino{RootIno, dir.Ino, f.Ino, 999999})
		if err == nil && len(got) != 3 {
			t.Errorf("GetMany found %d inodes, want 3", len(got))
		}
		return err
	})
}
