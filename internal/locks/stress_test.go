package locks

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkRecords reports the first way in which records break the table's
// invariants, or "" if they hold.
func checkRecords(records []Lock) string {
	for i, a := range records {
		if !a.valid() || a.Kind == Unlock {
			return "malformed lock " + a.String()
		}
		if i > 0 && compareLocks(records[i-1], a) > 0 {
			return "locks out of order at " + a.String()
		}
		for _, b := range records[i+1:] {
			if a.Owner == b.Owner && (a.overlaps(b) || (a.touches(b) && a.Kind == b.Kind)) {
				return "one owner's locks not merged: " + a.String() + " and " + b.String()
			}
			if a.conflicts(b) {
				return "conflicting locks held: " + a.String() + " and " + b.String()
			}
		}
	}
	return ""
}

func TestManyGoroutinesKeepTheTableConsistent(t *testing.T) {
	const (
		workers = 32
		ops     = 400
		inodes  = 3
		span    = 64
	)
	tab := New()
	ctx := t.Context()

	stop := make(chan struct{})
	checked := make(chan string, 1)
	go func() {
		defer close(checked)
		for {
			for ino := uint64(1); ino <= inodes; ino++ {
				if msg := checkRecords(tab.Held(ino)); msg != "" {
					checked <- msg
					return
				}
				if fl := tab.HeldFlocks(ino); len(fl) > 1 && slices.ContainsFunc(fl, isWrite) {
					checked <- "an exclusive flock lock is shared"
					return
				}
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()

	var granted, refused, deadlocks, timeouts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			owner := Owner{ID: uint64(w), Client: uint64(w % 4)}
			for range ops {
				ino := 1 + rng.Uint64N(inodes)
				start := rng.Uint64N(span)
				end := start + rng.Uint64N(span/4)
				if rng.IntN(10) == 0 {
					end = ToEOF
				}
				kind := Kind(1 + rng.IntN(3))
				l := Lock{Start: start, End: end, Kind: kind, Owner: owner, Pid: uint32(w)}
				var err error
				switch op := rng.IntN(20); {
				case op < 8:
					err = tab.Set(ino, l)
				case op < 14:
					wctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(3))*time.Millisecond)
					err = tab.Wait(wctx, ino, l)
					cancel()
				case op < 16:
					tab.Test(ino, l)
				case op < 18:
					wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
					err = tab.Flock(wctx, ino, owner, kind, rng.IntN(2) == 0)
					cancel()
				case op < 19:
					tab.ReleaseOwner(ino, owner)
				default:
					tab.Set(ino, Lock{Start: 0, End: ToEOF, Kind: Unlock, Owner: owner})
				}
				switch {
				case err == nil:
					granted.Add(1)
				case errors.Is(err, ErrWouldBlock):
					refused.Add(1)
				case errors.Is(err, ErrDeadlock):
					deadlocks.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					timeouts.Add(1)
				default:
					errs <- err
					return
				}
			}
			for ino := uint64(1); ino <= inodes; ino++ {
				tab.ReleaseOwner(ino, owner)
			}
		})
	}
	wg.Wait()
	close(stop)
	close(errs)
	t.Logf("granted %d, refused %d, deadlocks %d, timed out %d",
		granted.Load(), refused.Load(), deadlocks.Load(), timeouts.Load())
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	if msg := <-checked; msg != "" {
		t.Fatal(msg)
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if len(tab.inodes) != 0 || len(tab.waits) != 0 {
		t.Errorf("after every owner released, the table keeps %d inodes and %d waiting owners",
			len(tab.inodes), len(tab.waits))
	}
}

func isWrite(l Lock) bool { return l.Kind == Write }
