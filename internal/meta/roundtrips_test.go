package meta

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/pgtest"
)

// The round trips to PostgreSQL of the operations on every path (package
// kv/postgres counts them): a lookup reads the directory, the name and the
// inode the name's entry points to in one (PrefetchRef through the entry's
// value, which begins with the inode's number), a stat one, and the
// inodes of a listing one however many. An Update whose reads this server
// made shortly before takes them from its guesses and checks them with
// its writes and COMMIT (kv/postgres guess.go): so a create after the
// kernel's lookup of the missing name is one round trip, a create of a
// name nobody looked up two (its first read fetches the parent and the
// name; the writes go with COMMIT), and a write of a new file's first
// bytes one (it reads the inode and the queue's key that its create
// wrote), the status's sum of the queue's pending bytes one for the queue
// and one per 256 inodes. A change of key layout that breaks a prefetch or a guess shows
// here.
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
	cost("a create of a name nobody looked up", 2, func() error {
		_, err := s.Create(ctx, dir.Ino, "e", Inode{Mode: 0o100644}, nil)
		return err
	})
	cost("a lookup of a missing name", 1, func() error {
		if _, _, err := s.LookupIn(ctx, dir.Ino, "f"); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("LookupIn of a missing name: %v, want ENOENT", err)
		}
		return nil
	})
	var f Inode
	cost("its create", 1, func() (err error) {
		f, err = s.Create(ctx, dir.Ino, "f", Inode{Mode: 0o100644}, nil)
		return err
	})
	cost("a write of a new file's first bytes", 1, func() error {
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
	cost("the bytes the export queue's files will upload", 2, func() error {
		// The queue (d, e, f and the root) in a page; their inodes in one.
		n, _, err := s.PendingBytes(ctx, 100)
		if err == nil && n != 5 {
			t.Errorf("PendingBytes = %d, want 5", n)
		}
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
