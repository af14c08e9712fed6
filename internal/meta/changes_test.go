package meta

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
)

// twoLoggingServers opens two Stores with the change log on one kv store, as two
// servers sharing a database are; now is both servers' clock.
func twoLoggingServers(t *testing.T, now *time.Time) (a, b *Store) {
	t.Helper()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := func() time.Time { return *now }
	open := func(server uint64) *Store {
		s, err := Open(context.Background(), db, Options{ExportDelay: time.Minute, Now: clock,
			ChangeLog: true, Server: server, ChangeRetention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return open(1), open(2)
}

func hasEntry(c Changes, parent Ino, name string) bool {
	return slices.Contains(c.Entries, EntryName{Parent: parent, Name: name})
}

// Every change one server commits to the namespace reaches the other
// server's follower (created, written, renamed, removed: the inodes and
// the names), once, and never the follower's own changes.
func TestAChangeThroughOneServerReachesTheOtherServersFollowerOnce(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	fa, fb := a.NewChangeFollower(), b.NewChangeFollower()

	now = now.Add(time.Millisecond)
	f := mustCreate(t, a, RootIno, "f", syscall.S_IFREG|0o644)
	if _, err := a.WriteData(ctx, f.Ino, []byte("hello"), 0, false, now.UnixNano(), Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Rename(ctx, RootIno, "f", RootIno, "g", 0, nil); err != nil {
		t.Fatal(err)
	}
	c, err := fb.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Inodes, f.Ino) || !hasEntry(c, RootIno, "f") || !hasEntry(c, RootIno, "g") || c.All {
		t.Fatalf("server b was told %+v; want inode %d and the names f and g", c, f.Ino)
	}
	if c, err := fb.Poll(ctx); err != nil || len(c.Inodes)+len(c.Entries) != 0 {
		t.Fatalf("a second poll delivered %+v, %v; want nothing again", c, err)
	}
	if c, err := fa.Poll(ctx); err != nil || len(c.Inodes)+len(c.Entries) != 0 {
		t.Fatalf("server a was told of its own changes: %+v, %v", c, err)
	}

	now = now.Add(time.Millisecond)
	if _, err := b.Remove(ctx, RootIno, "g", false, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := fa.Poll(ctx); err != nil || !hasEntry(c, RootIno, "g") {
		t.Fatalf("server a was told %+v, %v; want the name g removed", c, err)
	}
}

// A record stamped before the follower's cursor (its transaction committed
// late, or its server's clock is behind) is still delivered while it is
// within the window; a follower that fell behind the trimmed part of the
// log is told to drop everything.
func TestALateRecordWithinTheWindowIsDeliveredAndAFollowerPastTheTrimDropsAll(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	fb := b.NewChangeFollower()

	now = now.Add(time.Second)
	mustCreate(t, a, RootIno, "on-time", syscall.S_IFREG|0o644)
	if c, err := fb.Poll(ctx); err != nil || !hasEntry(c, RootIno, "on-time") {
		t.Fatalf("poll: %+v, %v", c, err)
	}
	now = now.Add(-a.changeWindow / 2) // a's clock half a window behind
	mustCreate(t, a, RootIno, "late", syscall.S_IFREG|0o644)
	if c, err := fb.Poll(ctx); err != nil || !hasEntry(c, RootIno, "late") || hasEntry(c, RootIno, "on-time") {
		t.Fatalf("poll after a late record: %+v, %v; want only the late name", c, err)
	}

	now = now.Add(10 * time.Minute)
	mustCreate(t, a, RootIno, "after", syscall.S_IFREG|0o644)
	if err := a.TrimChanges(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := fb.Poll(ctx); err != nil || !c.All {
		t.Fatalf("poll of a follower behind the trim: %+v, %v; want All", c, err)
	}
}
