package locks

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"
)

// patience bounds how long a test waits for something that should happen
// promptly. It is a failure deadline, never a synchronisation device.
const patience = 10 * time.Second

func TestOwnersConflictOnlyWhenAWriteOverlaps(t *testing.T) {
	tests := []struct {
		name     string
		held     Lock
		req      Lock
		conflict bool
	}{
		{"reads of two owners share a range", rd(alice, 0, 9), rd(bob, 0, 9), false},
		{"a read blocks another owner's write", rd(alice, 0, 9), wr(bob, 5, 14), true},
		{"a write blocks another owner's read", wr(alice, 0, 9), rd(bob, 9, 9), true},
		{"a write blocks another owner's write", wr(alice, 0, ToEOF), wr(bob, 1000, 1000), true},
		{"touching ranges do not conflict", wr(alice, 0, 9), wr(bob, 10, 19), false},
		{"touching on the left does not conflict", wr(alice, 10, 19), wr(bob, 0, 9), false},
		{"an owner never conflicts with itself", rd(alice, 0, 9), wr(alice, 0, 9), false},
		{"same ID on another client is another owner", wr(Owner{ID: 1, Client: 1}, 0, 9), rd(Owner{ID: 1, Client: 2}, 0, 9), true},
		{"unlocking never conflicts", wr(alice, 0, 9), un(bob, 0, 9), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tab Table
			if err := tab.Set(1, tt.held); err != nil {
				t.Fatal(err)
			}
			err := tab.Set(1, tt.req)
			if tt.conflict {
				if !errors.Is(err, ErrWouldBlock) || !errors.Is(err, syscall.EAGAIN) {
					t.Fatalf("Set = %v, want ErrWouldBlock", err)
				}
				if got := tab.Held(1); !slices.Equal(got, []Lock{tt.held}) {
					t.Errorf("refused request changed the locks: %v", got)
				}
			} else if err != nil {
				t.Fatalf("Set = %v, want success", err)
			}
			if err := tab.Set(2, tt.req); err != nil {
				t.Errorf("locks on one inode affected another: %v", err)
			}
		})
	}
}

func TestTestReportsTheFirstConflictingLock(t *testing.T) {
	var tab Table
	held := []Lock{
		{Start: 50, End: 59, Kind: Write, Owner: carol, Pid: 30},
		{Start: 0, End: 9, Kind: Read, Owner: alice, Pid: 10},
		{Start: 20, End: 29, Kind: Write, Owner: bob, Pid: 20},
	}
	for _, l := range held {
		if err := tab.Set(1, l); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		req  Lock
		want Lock
		ok   bool
	}{
		{"a write sees the lowest lock in its range", wr(carol, 0, ToEOF), held[1], true},
		{"a read skips read locks", rd(carol, 0, ToEOF), held[2], true},
		{"own locks are not reported", wr(carol, 50, 59), Lock{}, false},
		{"a free range reports nothing", wr(alice, 30, 49), Lock{}, false},
		{"an unlock request reports nothing", un(carol, 0, ToEOF), Lock{}, false},
		{"another inode reports nothing", Lock{}, Lock{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ino := uint64(1)
			if tt.req == (Lock{}) {
				ino, tt.req = 2, wr(carol, 0, ToEOF)
			}
			got, ok := tab.Test(ino, tt.req)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Test = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// sleepers returns a table whose waiters report on the returned channel each
// time they go to sleep.
func sleepers(t *testing.T) (*Table, <-chan uint64) {
	t.Helper()
	asleep := make(chan uint64, 64)
	tab := New()
	tab.testHookSleep = func(ino uint64) { asleep <- ino }
	return tab, asleep
}

// awaitSleep fails the test unless a waiter goes to sleep within patience.
func awaitSleep(t *testing.T, asleep <-chan uint64) {
	t.Helper()
	select {
	case <-asleep:
	case <-time.After(patience):
		t.Fatal("waiter never went to sleep")
	}
}

// goWait runs tab.Wait in a goroutine and returns where its result will
// arrive.
func goWait(ctx context.Context, tab *Table, ino uint64, l Lock) <-chan error {
	done := make(chan error, 1)
	go func() { done <- tab.Wait(ctx, ino, l) }()
	return done
}

// result fails the test unless done delivers within patience.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(patience):
		t.Fatal("waiter never returned")
		return nil
	}
}

func TestWaitWakesWhenTheConflictGoesAway(t *testing.T) {
	tests := []struct {
		name    string
		held    Lock
		req     Lock
		release func(*Table)
	}{
		{"an unlock of the range", wr(alice, 0, 99), wr(bob, 10, 19),
			func(tab *Table) { tab.Set(1, un(alice, 0, 49)) }},
		{"a downgrade to read", wr(alice, 0, 99), rd(bob, 10, 19),
			func(tab *Table) { tab.Set(1, rd(alice, 0, 99)) }},
		{"the owner's release", rd(alice, 0, 99), wr(bob, 10, 19),
			func(tab *Table) { tab.ReleaseOwner(1, alice) }},
		{"the client's release", wr(Owner{ID: 1, Client: 9}, 0, 99), wr(bob, 10, 19),
			func(tab *Table) { tab.ReleaseClient(9) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, asleep := sleepers(t)
			if err := tab.Set(1, tt.held); err != nil {
				t.Fatal(err)
			}
			done := goWait(t.Context(), tab, 1, tt.req)
			awaitSleep(t, asleep)
			select {
			case err := <-done:
				t.Fatalf("Wait returned %v while the conflict was held", err)
			default:
			}
			tt.release(tab)
			if err := result(t, done); err != nil {
				t.Fatalf("Wait = %v", err)
			}
			if got := tab.Held(1); !slices.Contains(got, tt.req) {
				t.Errorf("Held = %v, want it to contain %v", got, tt.req)
			}
		})
	}
}

func TestWaitGrantsAFreeRangeAtOnce(t *testing.T) {
	tab := New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := tab.Wait(ctx, 1, wr(alice, 0, 9)); err != nil {
		t.Fatalf("Wait with a done context on a free range = %v", err)
	}
}

func TestWaitGivesUpWhenItsContextEnds(t *testing.T) {
	tests := []struct {
		name string
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithCancel(ctx)
		}, context.Canceled},
		{"past its deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 20*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, asleep := sleepers(t)
			if err := tab.Set(1, wr(alice, 0, 9)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tt.ctx(t.Context())
			defer cancel()
			done := goWait(ctx, tab, 1, rd(bob, 0, 9))
			awaitSleep(t, asleep)
			if tt.want == context.Canceled {
				cancel()
			}
			err := result(t, done)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Wait = %v, want %v", err, tt.want)
			}
			if got := tab.Held(1); !slices.Equal(got, []Lock{wr(alice, 0, 9)}) {
				t.Errorf("Held = %v after a cancelled wait", got)
			}
			tab.Set(1, un(alice, 0, ToEOF))
			tab.mu.Lock()
			defer tab.mu.Unlock()
			if len(tab.inodes) != 0 || len(tab.waits) != 0 {
				t.Errorf("table keeps %d inodes and %d waiting owners after the wait ended", len(tab.inodes), len(tab.waits))
			}
		})
	}
}

func TestWaitDetectsDeadlock(t *testing.T) {
	tests := []struct {
		name string
		// held are granted first; waits are started in order, each left
		// asleep; then closer must fail with ErrDeadlock.
		held   []inoLock
		waits  []inoLock
		closer inoLock
	}{
		{name: "two owners on one inode",
			held:   ils(1, wr(alice, 0, 9), 1, wr(bob, 10, 19)),
			waits:  ils(1, wr(alice, 10, 19)),
			closer: il(1, wr(bob, 0, 9))},
		{name: "two owners on two inodes",
			held:   ils(1, wr(alice, 0, 9), 2, wr(bob, 0, 9)),
			waits:  ils(2, rd(alice, 0, 0)),
			closer: il(1, rd(bob, 5, 5))},
		{name: "three owners in a ring",
			held:   ils(1, wr(alice, 0, 9), 1, wr(bob, 10, 19), 1, wr(carol, 20, 29)),
			waits:  ils(1, wr(alice, 10, 19), 1, wr(bob, 20, 29)),
			closer: il(1, wr(carol, 0, 9))},
		{name: "readers upgrading the same range",
			held:   ils(1, rd(alice, 0, 9), 1, rd(bob, 0, 9)),
			waits:  ils(1, wr(alice, 0, 9)),
			closer: il(1, wr(bob, 0, 9))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, asleep := sleepers(t)
			for _, h := range tt.held {
				if err := tab.Set(h.ino, h.l); err != nil {
					t.Fatal(err)
				}
			}
			var dones []<-chan error
			for _, w := range tt.waits {
				dones = append(dones, goWait(t.Context(), tab, w.ino, w.l))
				awaitSleep(t, asleep)
			}
			err := tab.Wait(t.Context(), tt.closer.ino, tt.closer.l)
			if !errors.Is(err, ErrDeadlock) || !errors.Is(err, syscall.EDEADLK) {
				t.Fatalf("Wait closing the cycle = %v, want ErrDeadlock", err)
			}
			// Breaking the cycle lets the waiters through, in reverse
			// order: each releases what the one before it waits for.
			releaseEverywhere(tab, tt.closer.l.Owner)
			for i := len(dones) - 1; i >= 0; i-- {
				if err := result(t, dones[i]); err != nil {
					t.Fatalf("waiter %d: %v", i, err)
				}
				releaseEverywhere(tab, tt.waits[i].l.Owner)
			}
			for _, h := range tt.held {
				releaseEverywhere(tab, h.l.Owner)
			}
			if len(tab.inodes) != 0 || len(tab.waits) != 0 {
				t.Errorf("table keeps %d inodes and %d waiting owners", len(tab.inodes), len(tab.waits))
			}
		})
	}
}

func TestWaitWithoutACycleIsNotADeadlock(t *testing.T) {
	tab, asleep := sleepers(t)
	tab.Set(1, wr(alice, 0, 9))
	tab.Set(1, wr(bob, 10, 19))
	// Bob waits for alice; carol then waits for bob: a chain, not a ring.
	bobDone := goWait(t.Context(), tab, 1, wr(bob, 0, 9))
	awaitSleep(t, asleep)
	carolDone := goWait(t.Context(), tab, 1, wr(carol, 10, 19))
	awaitSleep(t, asleep)
	tab.ReleaseOwner(1, alice)
	if err := result(t, bobDone); err != nil {
		t.Fatalf("bob: %v", err)
	}
	tab.ReleaseOwner(1, bob)
	if err := result(t, carolDone); err != nil {
		t.Fatalf("carol: %v", err)
	}
}

// inoLock is a lock on a given inode.
type inoLock struct {
	ino uint64
	l   Lock
}

// releaseEverywhere drops o's locks on the inodes the tests use.
func releaseEverywhere(tab *Table, o Owner) {
	tab.ReleaseOwner(1, o)
	tab.ReleaseOwner(2, o)
}

func il(ino uint64, l Lock) inoLock { return inoLock{ino, l} }

// ils builds a list from alternating inode numbers and locks.
func ils(args ...any) []inoLock {
	var out []inoLock
	for i := 0; i < len(args); i += 2 {
		out = append(out, il(uint64(args[i].(int)), args[i+1].(Lock)))
	}
	return out
}

func TestReleaseDropsOnlyTheNamedLocks(t *testing.T) {
	nfsA := Owner{ID: 1, Client: 7}
	nfsB := Owner{ID: 2, Client: 7}
	other := Owner{ID: 1, Client: 8}
	tests := []struct {
		name    string
		release func(*Table)
		want1   []Lock
		want2   []Lock
	}{
		{"ReleaseOwner drops one owner on one inode",
			func(tab *Table) { tab.ReleaseOwner(1, nfsA) },
			[]Lock{rd(nfsB, 0, 9), rd(other, 0, 9)},
			[]Lock{wr(nfsA, 0, 9)}},
		{"ReleaseClient drops every owner of the client on every inode",
			func(tab *Table) { tab.ReleaseClient(7) },
			[]Lock{rd(other, 0, 9)},
			nil},
		{"releasing an owner with no locks changes nothing",
			func(tab *Table) { tab.ReleaseOwner(1, carol); tab.ReleaseOwner(3, nfsA); tab.ReleaseClient(99) },
			[]Lock{rd(nfsA, 0, 9), rd(nfsB, 0, 9), rd(other, 0, 9)},
			[]Lock{wr(nfsA, 0, 9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := New()
			for _, l := range []Lock{rd(nfsA, 0, 9), rd(nfsB, 0, 9), rd(other, 0, 9)} {
				if err := tab.Set(1, l); err != nil {
					t.Fatal(err)
				}
			}
			if err := tab.Set(2, wr(nfsA, 0, 9)); err != nil {
				t.Fatal(err)
			}
			tt.release(tab)
			if got := tab.Held(1); !slices.Equal(got, tt.want1) {
				t.Errorf("inode 1 holds %v, want %v", got, tt.want1)
			}
			if got := tab.Held(2); !slices.Equal(got, tt.want2) {
				t.Errorf("inode 2 holds %v, want %v", got, tt.want2)
			}
			if tt.want2 == nil {
				if _, ok := tab.inodes[2]; ok {
					t.Errorf("inode 2 is still in the table with no locks")
				}
			}
		})
	}
}
