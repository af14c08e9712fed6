package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"bucketfs/internal/kv"
)

func TestALeaseIsTakenOverOnlyWhenReleasedOrExpiredAndEachHolderGetsANewToken(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	never := func(Lease) bool { return false }
	always := func(Lease) bool { return true }
	a, held, err := s.TryLease(ctx, SyncLease, "A", time.Second, never)
	if err != nil || !held || a.Holder != "A" || a.Token != 1 {
		t.Fatalf("first take: %+v, held %v, %v", a, held, err)
	}
	if l, held, err := s.TryLease(ctx, SyncLease, "B", time.Second, never); err != nil || held || l.Holder != "A" {
		t.Fatalf("a take of a lease held and not expired: %+v, held %v, %v", l, held, err)
	}
	renewed, held, err := s.TryLease(ctx, SyncLease, "A", time.Second, never)
	if err != nil || !held || renewed.Token != 1 || renewed.Beat == a.Beat {
		t.Fatalf("renewal: %+v (was %+v), held %v, %v", renewed, a, held, err)
	}
	// The taker is asked about the record as it is now.
	var asked Lease
	b, held, err := s.TryLease(ctx, SyncLease, "B", time.Second, func(cur Lease) bool { asked = cur; return true })
	if err != nil || !held || b.Holder != "B" || b.Token != 2 || !asked.Same(renewed) {
		t.Fatalf("takeover of an expired lease: %+v, held %v, %v; asked about %+v", b, held, err, asked)
	}
	if err := s.ReleaseLease(ctx, SyncLease, "A"); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadLease(ctx, SyncLease); l.Holder != "B" {
		t.Fatalf("a release by a server that does not hold the lease changed it: %+v", l)
	}
	if err := s.ReleaseLease(ctx, SyncLease, "B"); err != nil {
		t.Fatal(err)
	}
	c, held, err := s.TryLease(ctx, SyncLease, "C", time.Second, never)
	if err != nil || !held || c.Token != 3 {
		t.Fatalf("take of a released lease: %+v, held %v, %v", c, held, err)
	}
	if _, held, _ := s.TryLease(ctx, SyncLease, "A", time.Second, always); !held {
		t.Fatal("an expired lease was not taken")
	}
}

func TestATransactionUnderAFenceFailsOnceTheLeaseChangedHands(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	f := mustCreate(t, s, RootIno, "f", 0o644)
	a, _, err := s.TryLease(ctx, SyncLease, "A", time.Second, func(Lease) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	actx := WithFence(ctx, Fence{Lease: SyncLease, Holder: "A", Token: a.Token})
	if err := s.Enqueue(actx, f.Ino, time.Now(), false); err != nil {
		t.Fatalf("a transaction of the holder: %v", err)
	}
	if err := s.CheckFence(actx); err != nil {
		t.Fatalf("the holder's fence: %v", err)
	}
	b, _, err := s.TryLease(ctx, SyncLease, "B", time.Second, func(Lease) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := s.QueueStats(ctx)
	for name, op := range map[string]func() error{
		"enqueue":  func() error { return s.Enqueue(actx, f.Ino, time.Now().Add(time.Hour), false) },
		"intents":  func() error { return s.AddIntents(actx, f.Ino, []string{"f"}) },
		"synced":   func() error { _, _, err := s.Synced(actx, Queued{Ino: f.Ino}, f.Gen, func(*Inode) {}); return err },
		"record":   func() error { return s.RecordWritten(actx, f.Ino, []Object{{Key: "f", VersionID: "v"}}) },
		"forget":   func() error { return s.Forget(actx, f.Ino) },
		"flushed":  func() error { return s.FlushesDone(actx, FlushDone{Done: 1}) },
		"check":    func() error { return s.CheckFence(actx) },
		"raw kv":   func() error { return s.KV().Update(actx, func(tx kv.Txn) error { return tx.Set([]byte("c/x"), nil) }) },
		"uploadOf": func() error { return s.BeginUploadOf(actx, "f") },
	} {
		if err := op(); !errors.Is(err, ErrFenced) {
			t.Errorf("%s under the old holder's fence: %v, want ErrFenced", name, err)
		}
	}
	if in, _ := s.Get(ctx, f.Ino); len(in.Keys) != 0 {
		t.Errorf("the old holder's record went through: %+v", in.Keys)
	}
	if keys, _ := s.Intents(ctx, f.Ino); len(keys) != 0 {
		t.Errorf("the old holder's intents went through: %q", keys)
	}
	if after, _, _ := s.QueueStats(ctx); after != before {
		t.Errorf("queue length %d after the old holder's refused changes, was %d", after, before)
	}
	bctx := WithFence(ctx, Fence{Lease: SyncLease, Holder: "B", Token: b.Token})
	if err := s.AddIntents(bctx, f.Ino, []string{"f"}); err != nil {
		t.Fatalf("a transaction of the new holder: %v", err)
	}
	// Released, the token stays, but the holder is gone: its fence fails.
	if err := s.ReleaseLease(ctx, SyncLease, "B"); err != nil {
		t.Fatal(err)
	}
	if err := s.DropIntent(bctx, f.Ino, "f"); !errors.Is(err, ErrFenced) {
		t.Fatalf("a transaction under a released lease's fence: %v, want ErrFenced", err)
	}
	// Without a fence nothing is checked: the front ends' changes.
	if err := s.Enqueue(ctx, f.Ino, time.Now(), false); err != nil {
		t.Fatal(err)
	}
}

func TestTheRegistryKeepsOneRecordPerServerAndRemovesOnlyAnUnchangedOne(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	a, err := s.Heartbeat(ctx, Server{ID: "A", Host: "h", PID: 1, Addrs: map[string]string{"nfs": "127.0.0.1:2049"}})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.Heartbeat(ctx, a)
	if err != nil || a2.Beat != a.Beat+1 {
		t.Fatalf("second heartbeat: %+v, %v", a2, err)
	}
	if _, err := s.Heartbeat(ctx, Server{ID: "B"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveServer(ctx, "A", a.Beat); err != nil { // it has beaten since
		t.Fatal(err)
	}
	srvs, err := s.Servers(ctx)
	if err != nil || len(srvs) != 2 || srvs[0].ID != "A" || srvs[0].Addrs["nfs"] != "127.0.0.1:2049" {
		t.Fatalf("servers: %+v, %v", srvs, err)
	}
	if err := s.RemoveServer(ctx, "A", a2.Beat); err != nil {
		t.Fatal(err)
	}
	if srvs, _ := s.Servers(ctx); len(srvs) != 1 || srvs[0].ID != "B" {
		t.Fatalf("servers after removing A: %+v", srvs)
	}
}

// A renewal leaves the part of the lease the fence reads as it was, so
// that the holder's transactions never conflict with its renewals; a
// change of holder changes it.
func TestARenewalDoesNotRewriteWhatTheFenceReads(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	raw := func() (v []byte) {
		s.KV().View(ctx, func(r kv.Reader) error { v, _ = r.Get(leaseKey(SyncLease)); return nil })
		return v
	}
	never := func(Lease) bool { return false }
	if _, _, err := s.TryLease(ctx, SyncLease, "A", time.Second, never); err != nil {
		t.Fatal(err)
	}
	before := raw()
	var writes int
	err := s.KV().Update(ctx, func(tx kv.Txn) error {
		writes = 0
		cur, err := readLease(tx, SyncLease)
		if err != nil {
			return err
		}
		next := cur
		next.Beat++
		return putLease(&countingTxn{Txn: tx, keys: &writes, watch: leaseKey(SyncLease)}, SyncLease, cur, next)
	})
	if err != nil || writes != 0 {
		t.Fatalf("a renewal wrote the holder part %d times (%v)", writes, err)
	}
	if _, held, err := s.TryLease(ctx, SyncLease, "A", time.Second, never); err != nil || !held || string(raw()) != string(before) {
		t.Fatalf("after a renewal the holder part is %q, was %q (%v)", raw(), before, err)
	}
	if _, _, err := s.TryLease(ctx, SyncLease, "B", time.Second, func(Lease) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if string(raw()) == string(before) {
		t.Fatal("a takeover left the holder part as it was")
	}
}

// countingTxn counts the writes of one key.
type countingTxn struct {
	kv.Txn
	keys  *int
	watch []byte
}

func (c *countingTxn) Set(k, v []byte) error {
	if string(k) == string(c.watch) {
		*c.keys++
	}
	return c.Txn.Set(k, v)
}
