package meta

import (
	"context"
	"slices"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/locks"
)

// What one server publishes of its locks, the others read back as it was
// (record and flock locks, owners, pids, a range to EOF); a dead server's
// records are left out, and deleted by the next transaction that shares
// locks on the inode; DropServerState forgets a server's locks and opens.
func TestPublishedLocksReadBackWholeAndADeadServersAreDropped(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	a, b := twoLoggingServers(t, &now)
	alive := map[uint64]bool{1: true, 2: true, 3: true}
	isAlive := func(s uint64) bool { return alive[s] }
	held := locks.Held{
		Records: []locks.Lock{
			{Start: 0, End: 9, Kind: locks.Read, Owner: locks.Owner{ID: 7, Client: 3}, Pid: 1234},
			{Start: 100, End: locks.ToEOF, Kind: locks.Write, Owner: locks.Owner{ID: 1 << 60}, Pid: 1<<32 - 1},
		},
		Flocks: []locks.Lock{{Start: 0, End: locks.ToEOF, Kind: locks.Write, Owner: locks.Owner{ID: 9}}},
	}
	if ok, err := a.ShareLocks(ctx, 42, 1, isAlive, held, nil); err != nil || !ok {
		t.Fatalf("ShareLocks = %v, %v", ok, err)
	}
	if ok, err := a.ShareLocks(ctx, 43, 3, isAlive, held, nil); err != nil || !ok { // server 3, soon dead
		t.Fatalf("ShareLocks = %v, %v", ok, err)
	}
	got, err := b.OthersLocks(ctx, 42, 2, isAlive)
	if err != nil || !slices.Equal(got.Records, held.Records) || !slices.Equal(got.Flocks, held.Flocks) {
		t.Fatalf("OthersLocks = %+v, %v; want %+v", got, err, held)
	}
	if got, _ := b.OthersLocks(ctx, 42, 1, isAlive); !got.Empty() {
		t.Fatalf("a server's own locks are counted as another's: %+v", got)
	}
	blocked := func(theirs locks.Held) bool { return !theirs.Empty() }
	if ok, err := b.ShareLocks(ctx, 43, 2, isAlive, held, blocked); err != nil || ok {
		t.Fatalf("ShareLocks over a live server's locks = %v, %v; want refused", ok, err)
	}
	alive[3] = false
	if ok, err := b.ShareLocks(ctx, 43, 2, isAlive, held, blocked); err != nil || !ok {
		t.Fatalf("ShareLocks over a dead server's locks = %v, %v; want granted", ok, err)
	}
	alive[3] = true // back under the same id: its old records are gone
	if got, _ := a.OthersLocks(ctx, 43, 1, isAlive); len(got.Records) != 2 || len(got.Flocks) != 1 {
		t.Fatalf("inode 43 holds %+v; want only server 2's locks", got)
	}

	if err := a.MarkOpen(ctx, 42, 1, true); err != nil {
		t.Fatal(err)
	}
	if open, err := b.OpenElsewhere(ctx, 42, 2, isAlive); err != nil || !open {
		t.Fatalf("OpenElsewhere = %v, %v; want open", open, err)
	}
	if err := a.DropServerState(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if open, _ := b.OpenElsewhere(ctx, 42, 2, isAlive); open {
		t.Fatal("the dropped server's open is still seen")
	}
	if got, _ := b.OthersLocks(ctx, 42, 2, isAlive); !got.Empty() {
		t.Fatalf("the dropped server's locks are still seen: %+v", got)
	}
	if got, _ := a.OthersLocks(ctx, 43, 1, isAlive); got.Empty() {
		t.Fatal("dropping server 1 dropped server 2's locks")
	}
}

// The records of an earlier run of a server (Options.EarlierRun) do not
// bind it and are not deleted by it while that run counts as alive: the
// other servers still read them. Once it is dead they are deleted as any
// dead server's.
func TestAnEarlierRunsRecordsBindOnlyTheOtherServers(t *testing.T) {
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	open := func(server uint64, earlier func(uint64) bool) *Store {
		s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Server: server, EarlierRun: earlier})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Server 3 is an earlier run of server 1; server 2 is another.
	alive := map[uint64]bool{1: true, 2: true, 3: true}
	isAlive := func(s uint64) bool { return alive[s] }
	old, now, other := open(3, nil), open(1, func(s uint64) bool { return s == 3 }), open(2, nil)
	held := locks.Held{Records: []locks.Lock{{Start: 0, End: 9, Kind: locks.Write, Owner: locks.Owner{ID: 7, Client: 3}}}}
	if ok, err := old.ShareLocks(ctx, 42, 3, isAlive, held, nil); err != nil || !ok {
		t.Fatalf("ShareLocks = %v, %v", ok, err)
	}
	if err := old.MarkOpen(ctx, 42, 3, true); err != nil {
		t.Fatal(err)
	}
	blocked := func(theirs locks.Held) bool { return !theirs.Empty() }
	if ok, err := now.ShareLocks(ctx, 42, 1, isAlive, held, blocked); err != nil || !ok {
		t.Fatalf("ShareLocks by the new run over its earlier run's lock = %v, %v; want granted", ok, err)
	}
	if open, err := now.OpenElsewhere(ctx, 42, 1, isAlive); err != nil || open {
		t.Fatalf("OpenElsewhere for the new run = %v, %v; want its earlier run not counted", open, err)
	}
	got, err := other.OthersLocks(ctx, 42, 2, isAlive)
	if err != nil || len(got.Records) != 2 {
		t.Fatalf("another server reads %+v, %v; want the earlier run's lock and the new run's", got, err)
	}
	alive[3] = false
	if ok, err := now.ShareLocks(ctx, 42, 1, isAlive, locks.Held{}, nil); err != nil || !ok {
		t.Fatalf("ShareLocks = %v, %v", ok, err)
	}
	alive[3] = true
	if got, _ := other.OthersLocks(ctx, 42, 2, isAlive); !got.Empty() {
		t.Fatalf("inode 42 holds %+v after the earlier run died and the new one released; want nothing", got)
	}
}

// A dead NFS server's locks that another server drops leave a mark for its
// NFS identity on the inode; a later run of the same NFS server leaves
// them, and a dead server that was no NFS server leaves no mark. The
// later run's DropEarlierRunLocks deletes the earlier runs' locks without
// marks, and ForgetDroppedLocks the marks.
func TestLocksOfADeadNFSServerDroppedByAnotherLeaveAMarkForItsIdentity(t *testing.T) {
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	open := func(server uint64) *Store {
		s, err := Open(ctx, db, Options{ExportDelay: time.Minute, Server: server})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Runs 1 and 3 are runs of NFS server 7, run 2 is NFS server 8's, run
	// 4 serves no NFS, run 5 is a live copy of NFS server 7.
	run1, run2, run3, run4, run5 := open(1), open(2), open(3), open(4), open(5)
	for _, n := range []struct {
		s        *Store
		identity uint64
	}{{run1, 7}, {run2, 8}, {run3, 7}, {run5, 7}} {
		if err := n.s.NameNFSRun(ctx, n.identity); err != nil {
			t.Fatal(err)
		}
	}
	alive := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	isAlive := func(s uint64) bool { return alive[s] }
	held := locks.Held{Records: []locks.Lock{{Start: 0, End: 9, Kind: locks.Write, Owner: locks.Owner{ID: 1}}}}
	share := func(s *Store, ino Ino, self uint64) {
		t.Helper()
		if ok, err := s.ShareLocks(ctx, ino, self, isAlive, held, func(theirs locks.Held) bool { return !theirs.Empty() }); err != nil || !ok {
			t.Fatalf("ShareLocks on %d by %d = %v, %v", ino, self, ok, err)
		}
	}
	marked := func(ino Ino, identity uint64) bool {
		t.Helper()
		m, err := run2.LocksDropped(ctx, ino, identity)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	share(run1, 10, 1)
	share(run1, 11, 1)
	share(run1, 12, 1)
	share(run4, 13, 4)
	share(run5, 14, 5)
	alive[1], alive[4] = false, false
	share(run2, 10, 2) // drops run 1's on 10
	share(run3, 11, 3) // run 1's own later run leaves them on 11
	share(run2, 13, 2) // drops run 4's on 13
	if !marked(10, 7) || marked(11, 7) || marked(12, 7) || marked(13, 7) || marked(10, 8) {
		t.Fatalf("marks of 7 on 10..13: %v %v %v %v, of 8 on 10: %v; want on 10 alone",
			marked(10, 7), marked(11, 7), marked(12, 7), marked(13, 7), marked(10, 8))
	}
	// Another server drops them on 11 (it asks about no conflict: run 3
	// holds its own lock there).
	if _, err := run2.ShareLocks(ctx, 11, 2, isAlive, held, nil); err != nil {
		t.Fatal(err)
	}
	if !marked(11, 7) {
		t.Fatal("run 1's locks on 11, left by its later run, were dropped by another server without a mark")
	}

	if err := run3.DropEarlierRunLocks(ctx, 7, isAlive); err != nil {
		t.Fatal(err)
	}
	if held, err := run2.HoldsLocks(ctx, 1); err != nil || held {
		t.Fatalf("run 1 holds locks after its later run dropped them: %v, %v", held, err)
	}
	if held, err := run2.HoldsLocks(ctx, 3); err != nil || !held {
		t.Fatalf("the later run's own locks went too: %v, %v", held, err)
	}
	if held, err := run2.HoldsLocks(ctx, 5); err != nil || !held {
		t.Fatalf("the locks of a live copy with the same identity went too: %v, %v", held, err)
	}
	share(run2, 12, 2) // run 1's on 12 are gone already: no mark
	if marked(12, 7) {
		t.Fatal("a mark for locks the later run had dropped itself")
	}
	if err := run3.ForgetDroppedLocks(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if marked(10, 7) {
		t.Fatal("the mark on 10 outlived ForgetDroppedLocks")
	}
}
