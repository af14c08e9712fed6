package locks

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Flock applies a flock(2) request for owner on the whole of ino: Read is
// LOCK_SH, Write is LOCK_EX, Unlock is LOCK_UN. flock locks never conflict
// with record locks. If owner already holds a flock lock of another kind it
// is converted; as on Linux, the held lock is dropped first, so a conversion
// that fails leaves owner with no flock lock.
//
// When the lock is held by another owner in a conflicting mode, Flock fails
// with an error wrapping ErrWouldBlock if wait is false (LOCK_NB), and
// otherwise waits until it can be granted or ctx is done (an error wrapping
// ctx.Err()). flock waits are not checked for deadlock.
func (t *Table) Flock(ctx context.Context, ino uint64, owner Owner, kind Kind, wait bool) error {
	if kind < Read || kind > Unlock {
		return fmt.Errorf("locks: flock %v on inode %d: %w", kind, ino, ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if in := t.lookup(ino, false); in != nil {
		if held, ok := in.flocks[owner]; ok {
			if held == kind {
				return nil
			}
			delete(in.flocks, owner)
			t.published(ctx, ino, in)
			in.wake()
		}
		if kind == Unlock {
			t.forgetIfIdle(ino, in)
		}
	}
	if kind == Unlock {
		return nil
	}
	grant := func() (outcome, error) { return t.tryFlock(ctx, ino, owner, kind) }
	got, err := grant()
	if err == nil && got != granted && !wait {
		err = ErrWouldBlock
	}
	if err == nil && got != granted {
		err = t.block(ctx, ino, grant, nil)
	}
	if err != nil {
		if in := t.lookup(ino, false); in != nil {
			t.forgetIfIdle(ino, in) // A conversion may have emptied it.
		}
		return fmt.Errorf("locks: flock %v on inode %d: %w", kind, ino, err)
	}
	return nil
}

// tryFlock takes the flock lock if no other owner holds a conflicting one,
// here or (through t.Peers) on another server, and reports what stopped it
// if not. Requires t.mu.
func (t *Table) tryFlock(ctx context.Context, ino uint64, owner Owner, kind Kind) (outcome, error) {
	in := t.lookup(ino, true)
	for o, k := range in.flocks {
		if o != owner && (k == Write || kind == Write) {
			return blockedHere, nil
		}
	}
	if t.Peers != nil {
		held := in.held()
		req := Lock{Start: 0, End: ToEOF, Kind: kind, Owner: owner}
		held.Flocks = append(slices.DeleteFunc(held.Flocks, func(x Lock) bool { return x.Owner == owner }), req)
		slices.SortFunc(held.Flocks, compareLocks)
		ok, err := t.Peers.Grant(ctx, ino, req, true, held)
		if err != nil || !ok {
			return blockedElsewhere, err
		}
	}
	if in.flocks == nil {
		in.flocks = make(map[Owner]Kind)
	}
	in.flocks[owner] = kind
	return granted, nil
}

// HeldFlocks returns the flock locks on ino as whole-file Locks (Start 0,
// End ToEOF, Pid 0), sorted by owner.
func (t *Table) HeldFlocks(ino uint64) []Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.lookup(ino, false)
	if in == nil || len(in.flocks) == 0 {
		return nil
	}
	out := make([]Lock, 0, len(in.flocks))
	for o, k := range in.flocks {
		out = append(out, Lock{Start: 0, End: ToEOF, Kind: k, Owner: o})
	}
	slices.SortFunc(out, func(a, b Lock) int {
		return cmp.Or(cmp.Compare(a.Owner.Client, b.Owner.Client), cmp.Compare(a.Owner.ID, b.Owner.ID))
	})
	return out
}
