package locks

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
)

func whole(o Owner, k Kind) Lock { return Lock{Start: 0, End: ToEOF, Kind: k, Owner: o} }

func TestFlockSharedExclusiveAndConversion(t *testing.T) {
	type step struct {
		owner   Owner
		kind    Kind
		blocked bool // Want ErrWouldBlock from a non-waiting request.
	}
	tests := []struct {
		name  string
		steps []step
		want  []Lock
	}{
		{"two shared locks coexist",
			[]step{{alice, Read, false}, {bob, Read, false}},
			[]Lock{whole(alice, Read), whole(bob, Read)}},
		{"a shared lock blocks an exclusive one",
			[]step{{alice, Read, false}, {bob, Write, true}},
			[]Lock{whole(alice, Read)}},
		{"an exclusive lock blocks a shared one",
			[]step{{alice, Write, false}, {bob, Read, true}},
			[]Lock{whole(alice, Write)}},
		{"a sole holder upgrades",
			[]step{{alice, Read, false}, {alice, Write, false}},
			[]Lock{whole(alice, Write)}},
		{"a holder downgrades, letting readers in",
			[]step{{alice, Write, false}, {alice, Read, false}, {bob, Read, false}},
			[]Lock{whole(alice, Read), whole(bob, Read)}},
		{"a failed upgrade drops the held lock, as on Linux",
			[]step{{alice, Read, false}, {bob, Read, false}, {alice, Write, true}, {bob, Write, false}},
			[]Lock{whole(bob, Write)}},
		{"relocking the same kind is a no-op",
			[]step{{alice, Write, false}, {alice, Write, false}},
			[]Lock{whole(alice, Write)}},
		{"unlock releases",
			[]step{{alice, Write, false}, {alice, Unlock, false}, {bob, Write, false}},
			[]Lock{whole(bob, Write)}},
		{"unlocking what is not held is a no-op",
			[]step{{alice, Unlock, false}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := New()
			for i, s := range tt.steps {
				err := tab.Flock(t.Context(), 1, s.owner, s.kind, false)
				if s.blocked != errors.Is(err, ErrWouldBlock) || (!s.blocked && err != nil) {
					t.Fatalf("step %d: Flock(%v, %v) = %v, want blocked=%v", i, s.owner, s.kind, err, s.blocked)
				}
				if s.blocked && !errors.Is(err, syscall.EAGAIN) {
					t.Fatalf("step %d: %v does not wrap EAGAIN", i, err)
				}
			}
			if got := tab.HeldFlocks(1); !slices.Equal(got, tt.want) {
				t.Errorf("HeldFlocks = %v, want %v", got, tt.want)
			}
			if tt.want == nil && len(tab.inodes) != 0 {
				t.Errorf("inode with no locks is still in the table")
			}
		})
	}
}

func TestFlockWaitWakesOnUnlockAndGivesUpOnCancel(t *testing.T) {
	tab, asleep := sleepers(t)
	if err := tab.Flock(t.Context(), 1, alice, Write, false); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	go func() { cancelled <- tab.Flock(ctx, 1, carol, Read, true) }()
	awaitSleep(t, asleep)
	cancel()
	if err := result(t, cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Flock = %v, want context.Canceled", err)
	}

	done := make(chan error, 1)
	go func() { done <- tab.Flock(t.Context(), 1, bob, Write, true) }()
	awaitSleep(t, asleep)
	select {
	case err := <-done:
		t.Fatalf("Flock returned %v while alice held the lock", err)
	default:
	}
	if err := tab.Flock(t.Context(), 1, alice, Unlock, false); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Fatalf("waiting Flock = %v", err)
	}
	if got, want := tab.HeldFlocks(1), []Lock{whole(bob, Write)}; !slices.Equal(got, want) {
		t.Errorf("HeldFlocks = %v, want %v", got, want)
	}
	tab.ReleaseOwner(1, bob)
	if len(tab.inodes) != 0 {
		t.Errorf("inode with no locks is still in the table")
	}
}

func TestFlockAndRecordLocksDoNotInteract(t *testing.T) {
	tab := New()
	// Alice's exclusive flock does not stop bob's record write lock, nor
	// the reverse.
	if err := tab.Flock(t.Context(), 1, alice, Write, false); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set(1, wr(bob, 0, ToEOF)); err != nil {
		t.Fatalf("record lock under another owner's flock: %v", err)
	}
	if err := tab.Set(1, wr(alice, 0, 9)); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("record locks must still conflict with each other: %v", err)
	}
	if err := tab.Flock(t.Context(), 2, carol, Write, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Test(2, wr(alice, 0, ToEOF)); ok {
		t.Errorf("Test reports a flock lock as a record lock conflict")
	}
	if got := tab.Held(1); !slices.Equal(got, []Lock{wr(bob, 0, ToEOF)}) {
		t.Errorf("Held = %v, want only bob's record lock", got)
	}
	if got := tab.HeldFlocks(1); !slices.Equal(got, []Lock{whole(alice, Write)}) {
		t.Errorf("HeldFlocks = %v, want only alice's flock", got)
	}
	// Unlocking in one namespace leaves the other alone.
	if err := tab.Set(1, un(alice, 0, ToEOF)); err != nil {
		t.Fatal(err)
	}
	if err := tab.Flock(t.Context(), 1, bob, Unlock, false); err != nil {
		t.Fatal(err)
	}
	if got := tab.HeldFlocks(1); len(got) != 1 {
		t.Errorf("record unlock dropped a flock: %v", got)
	}
	if got := tab.Held(1); len(got) != 1 {
		t.Errorf("flock unlock dropped a record lock: %v", got)
	}
	// ReleaseOwner, for a closed file, drops both kinds.
	tab.Set(1, rd(alice, 100, 199))
	tab.ReleaseOwner(1, alice)
	if got := tab.HeldFlocks(1); got != nil {
		t.Errorf("ReleaseOwner left flocks %v", got)
	}
	if got := tab.Held(1); !slices.Equal(got, []Lock{wr(bob, 0, ToEOF)}) {
		t.Errorf("ReleaseOwner left %v", got)
	}
}
