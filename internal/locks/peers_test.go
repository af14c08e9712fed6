package locks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// otherServer is a Peers in memory: the locks of one other server (which
// a test changes at will), and what this table published. The real one,
// over the shared kv store, is package vfs's.
type otherServer struct {
	mu        sync.Mutex
	theirs    Held
	ours      map[uint64]Held
	refusals  int
	retry     time.Duration
	published []Held // every Release, in order
}

func (p *otherServer) Grant(_ context.Context, ino uint64, req Lock, flock bool, held Held) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	theirs := p.theirs.Records
	if flock {
		theirs = p.theirs.Flocks
	}
	if _, blocked := FirstExcluding(theirs, req); blocked {
		p.refusals++
		return false, nil
	}
	p.ours[ino] = held
	return true, nil
}

func (p *otherServer) Release(_ context.Context, ino uint64, held Held) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ours[ino] = held
	p.published = append(p.published, held)
}

func (p *otherServer) Retry() time.Duration { return p.retry }

func (p *otherServer) set(theirs Held) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.theirs = theirs
}

func (p *otherServer) held(ino uint64) Held {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ours[ino]
}

func sameHeld(a, b Held) bool {
	return slices.Equal(a.Records, b.Records) && slices.Equal(a.Flocks, b.Flocks)
}

// A lock that another server's lock excludes is refused and leaves the
// table as it was; a granted one is published, with the owner's other
// locks, before Set returns; unlocks, closes and a flock conversion's
// dropped lock are published after.
func TestATableAsksTheOtherServersBeforeAGrantAndTellsThemEachRelease(t *testing.T) {
	other := &otherServer{ours: map[uint64]Held{}, retry: time.Hour}
	tab := &Table{Peers: other}
	// The other server's owner has the same numbers as alice: owners of
	// two servers are still two owners.
	other.set(Held{Records: []Lock{wr(alice, 0, 9)}, Flocks: []Lock{whole(alice, Read)}})

	if err := tab.Set(1, rd(alice, 5, 14)); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("Set over the other server's write lock = %v, want ErrWouldBlock", err)
	}
	if got := tab.Held(1); got != nil {
		t.Fatalf("a refused request left %v in the table", got)
	}
	if err := tab.Set(1, wr(alice, 10, 19)); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set(1, rd(alice, 20, 29)); err != nil {
		t.Fatal(err)
	}
	want := Held{Records: []Lock{wr(alice, 10, 19), rd(alice, 20, 29)}}
	if got := other.held(1); !sameHeld(got, want) {
		t.Fatalf("published %+v, want %+v", got, want)
	}

	if err := tab.Flock(t.Context(), 1, bob, Read, false); err != nil {
		t.Fatalf("a shared flock beside the other server's shared flock: %v", err)
	}
	// Converting to exclusive drops the shared lock first, as on Linux;
	// the other server must hear of the drop even though the conversion
	// fails.
	if err := tab.Flock(t.Context(), 1, bob, Write, false); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("exclusive flock beside the other server's shared one = %v, want ErrWouldBlock", err)
	}
	if got := other.held(1); !sameHeld(got, want) {
		t.Fatalf("after the failed conversion the other server sees %+v, want %+v", got, want)
	}

	if err := tab.Set(1, un(alice, 15, 24)); err != nil {
		t.Fatal(err)
	}
	want = Held{Records: []Lock{wr(alice, 10, 14), rd(alice, 25, 29)}}
	if got := other.held(1); !sameHeld(got, want) {
		t.Fatalf("after the unlock the other server sees %+v, want %+v", got, want)
	}
	tab.ReleaseOwner(1, alice)
	if got := other.held(1); !got.Empty() {
		t.Fatalf("after the close the other server sees %+v, want nothing", got)
	}
}

// A wait that another server's lock blocks asks again after Retry; one
// that the Retry would leave asleep for an hour is woken by a change of
// the locks here.
func TestAWaitBlockedOnAnotherServerRetriesAndALocalChangeWakesIt(t *testing.T) {
	other := &otherServer{ours: map[uint64]Held{}, retry: time.Millisecond}
	tab, asleep := sleepers(t)
	tab.Peers = other
	other.set(Held{Records: []Lock{wr(bob, 0, 9)}})

	done := goWait(t.Context(), tab, 1, wr(alice, 0, 0))
	for range 3 { // three sleeps: it asked again after each Retry
		awaitSleep(t, asleep)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v while the other server held the range", err)
	default:
	}
	other.set(Held{})
	if err := result(t, done); err != nil {
		t.Fatalf("Wait = %v after the other server let go", err)
	}

	other.mu.Lock()
	other.retry = time.Hour
	other.mu.Unlock()
	other.set(Held{Records: []Lock{wr(bob, 100, 109)}})
	if err := tab.Set(1, rd(carol, 200, 209)); err != nil {
		t.Fatal(err)
	}
	done = goWait(t.Context(), tab, 1, wr(alice, 100, 100))
	awaitSleep(t, asleep)
	other.set(Held{})
	if err := tab.Set(1, un(carol, 200, 209)); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Fatalf("Wait = %v after a local release", err)
	}

	// flock waits retry too.
	other.mu.Lock()
	other.retry = time.Millisecond
	other.mu.Unlock()
	other.set(Held{Flocks: []Lock{whole(bob, Write)}})
	flocked := make(chan error, 1)
	go func() { flocked <- tab.Flock(t.Context(), 2, carol, Read, true) }()
	awaitSleep(t, asleep)
	awaitSleep(t, asleep)
	other.set(Held{})
	if err := result(t, flocked); err != nil {
		t.Fatalf("Flock = %v after the other server let go", err)
	}
}
