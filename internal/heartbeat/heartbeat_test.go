package heartbeat

import (
	"context"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
)

// A server that keeps beating stays alive to the others; one whose beats
// stop is dead to them once the lease time has passed on their clock.
func TestAServerIsDeadToTheOthersOneLeaseAfterItsBeatsStop(t *testing.T) {
	ctx := context.Background()
	db, err := testkv.Open(t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const lease = time.Second
	a, err := Start(ctx, db, 1, 10*time.Millisecond, lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	b, err := Start(ctx, db, 2, 10*time.Millisecond, lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	c, err := Start(ctx, db, 3, 10*time.Millisecond, lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	// Two lease times of b beating: a sees it alive all along.
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !a.Alive(2) || !a.Alive(1) {
			t.Fatal("a living server was judged dead")
		}
	}
	c.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for a.Alive(3) {
		if time.Now().After(deadline) {
			t.Fatal("a server whose beats stopped is still alive to the others")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !a.Alive(2) {
		t.Fatal("b was judged dead with c")
	}
}
