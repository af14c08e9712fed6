package locks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Table holds the record and flock locks of many inodes, keyed by inode
// number. The zero value is an empty table ready for use; it is safe for
// concurrent use and must not be copied after first use.
type Table struct {
	mu sync.Mutex // Guards everything below.

	// inodes holds an entry only for inodes with locks or waiters.
	inodes map[uint64]*inode
	// waits holds, per owner, the record lock requests it is blocked on
	// in Wait: the edges of the waits-for graph used to find deadlocks.
	// An owner may have several (threads of one process).
	waits map[Owner][]*waiter

	// testHookSleep, if set, is called without mu held each time a waiter
	// is about to block. Tests use it to know a waiter is asleep.
	testHookSleep func(ino uint64)

	// Peers, if set, are the other servers sharing the file system (see
	// Peers). Set it before the first use; nil: this Table is alone.
	Peers Peers
}

// inode is the lock state of one inode. All fields require Table.mu.
type inode struct {
	records []Lock         // Record locks, sorted by compareLocks.
	flocks  map[Owner]Kind // flock locks; nil when there are none.
	waiters int            // Goroutines blocked in Wait or Flock.
	// changed is closed, and reset to nil, when the locks change. Created
	// on demand by a waiter about to sleep.
	changed chan struct{}
}

// waiter is one blocked record lock request.
type waiter struct {
	ino  uint64
	lock Lock
}

// New returns an empty table. It is the same as new(Table).
func New() *Table { return new(Table) }

// signal returns the channel closed at the next change on in.
// Requires Table.mu.
func (in *inode) signal() <-chan struct{} {
	if in.changed == nil {
		in.changed = make(chan struct{})
	}
	return in.changed
}

// wake wakes every waiter on in. Requires Table.mu.
func (in *inode) wake() {
	if in.changed != nil {
		close(in.changed)
		in.changed = nil
	}
}

// idle reports whether in can be forgotten. Requires Table.mu.
func (in *inode) idle() bool {
	return len(in.records) == 0 && len(in.flocks) == 0 && in.waiters == 0
}

// lookup returns ino's state, creating it if create is set; otherwise it
// returns nil for an inode with no entry. Requires t.mu.
func (t *Table) lookup(ino uint64, create bool) *inode {
	in := t.inodes[ino]
	if in == nil && create {
		if t.inodes == nil {
			t.inodes = make(map[uint64]*inode)
		}
		in = new(inode)
		t.inodes[ino] = in
	}
	return in
}

// forgetIfIdle drops ino's entry if it holds no locks and no waiters.
// Requires t.mu.
func (t *Table) forgetIfIdle(ino uint64, in *inode) {
	if in.idle() {
		delete(t.inodes, ino)
	}
}

// Test reports the first (lowest in the file) record lock of another owner
// that conflicts with l, as F_GETLK and LOCKT do. ok is false when l could be
// granted now, when l.Kind is Unlock and when l is malformed.
func (t *Table) Test(ino uint64, l Lock) (conflict Lock, ok bool) {
	if !l.valid() || l.Kind == Unlock {
		return Lock{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.lookup(ino, false)
	if in == nil {
		return Lock{}, false
	}
	return firstConflict(in.records, l)
}

// Set applies the record lock request l for l.Owner without blocking:
// Read and Write acquire (replacing, splitting or merging the owner's own
// locks in the range), Unlock releases. It fails with an error wrapping
// ErrWouldBlock if another owner holds a conflicting lock, and with
// ErrInvalid for a malformed request.
func (t *Table) Set(ino uint64, l Lock) error {
	if !l.valid() {
		return fmt.Errorf("locks: set %v on inode %d: %w", l, ino, ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch got, err := t.trySet(context.Background(), ino, l); {
	case err != nil:
		return fmt.Errorf("locks: set %v on inode %d: %w", l, ino, err)
	case got != granted:
		return fmt.Errorf("locks: set %v on inode %d: %w", l, ino, ErrWouldBlock)
	}
	return nil
}

// trySet applies l if nothing conflicts, here or (through t.Peers) on
// another server, and reports what stopped it if not. An error from the
// Peers leaves the table as it was. Requires t.mu.
func (t *Table) trySet(ctx context.Context, ino uint64, l Lock) (outcome, error) {
	in := t.lookup(ino, false)
	if in == nil {
		if l.Kind == Unlock {
			return granted, nil
		}
		in = t.lookup(ino, true)
	}
	if l.Kind != Unlock {
		if _, blocked := firstConflict(in.records, l); blocked {
			t.forgetIfIdle(ino, in)
			return blockedHere, nil
		}
	}
	records := apply(in.records, l)
	if t.Peers != nil && l.Kind != Unlock {
		held := in.held()
		held.Records = slices.Clone(records)
		ok, err := t.Peers.Grant(ctx, ino, l, false, held)
		if err != nil || !ok {
			t.forgetIfIdle(ino, in)
			return blockedElsewhere, err
		}
	}
	if l.Kind == Unlock && slices.Equal(records, in.records) {
		return granted, nil // nothing of the owner's was in the range
	}
	in.records = records
	if l.Kind == Unlock {
		t.published(ctx, ino, in)
	}
	// Any change may unblock someone (a release, a downgrade) or give a
	// waiter a new blocker to check for deadlock, so wake them all.
	in.wake()
	t.forgetIfIdle(ino, in)
	return granted, nil
}

// Wait is Set that blocks: it waits until l can be granted, then applies it.
// It fails with an error wrapping ctx.Err() if ctx is done first, and with
// one wrapping ErrDeadlock if waiting would deadlock: if an owner blocking l
// is itself waiting, directly or through other waiting owners on any inode,
// for a lock l.Owner holds. A request that can be granted at once is granted
// even if ctx is already done.
func (t *Table) Wait(ctx context.Context, ino uint64, l Lock) error {
	if !l.valid() {
		return fmt.Errorf("locks: wait for %v on inode %d: %w", l, ino, ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	first, err := t.trySet(ctx, ino, l)
	if err != nil {
		return fmt.Errorf("locks: wait for %v on inode %d: %w", l, ino, err)
	}
	if first == granted {
		return nil
	}
	w := &waiter{ino: ino, lock: l}
	t.addWaiter(w)
	defer t.removeWaiter(w)
	err = t.block(ctx, ino,
		func() (outcome, error) { return t.trySet(ctx, ino, l) },
		func() bool { return t.deadlocked(w) })
	if err != nil {
		return fmt.Errorf("locks: wait for %v on inode %d: %w", l, ino, err)
	}
	return nil
}

// block sleeps until grant succeeds, grant fails, ctx is done or
// deadlocked reports true (nil: never). It checks deadlocked before every
// sleep, since the owners blocking a request change as locks come and go.
// A request blocked by another server's lock is tried again after
// Peers.Retry, or sooner if the locks here change. Requires t.mu, which it
// releases while asleep and holds again when it returns.
func (t *Table) block(ctx context.Context, ino uint64, grant func() (outcome, error), deadlocked func() bool) error {
	in := t.lookup(ino, true)
	in.waiters++
	defer func() {
		in.waiters--
		t.forgetIfIdle(ino, in)
	}()
	for {
		// The inode cannot be forgotten while in.waiters > 0, so in stays
		// the entry for ino across sleeps.
		got, err := grant()
		if err != nil {
			return err
		}
		if got == granted {
			return nil
		}
		if deadlocked != nil && deadlocked() {
			return ErrDeadlock
		}
		changed := in.signal()
		var retry *time.Timer
		var retried <-chan time.Time
		if got == blockedElsewhere {
			retry = time.NewTimer(t.Peers.Retry())
			retried = retry.C
		}
		t.mu.Unlock()
		if t.testHookSleep != nil {
			t.testHookSleep(ino)
		}
		var done bool
		select {
		case <-changed:
		case <-retried:
		case <-ctx.Done():
			done = true
		}
		if retry != nil {
			retry.Stop()
		}
		t.mu.Lock()
		if done {
			return ctx.Err()
		}
	}
}

// addWaiter records that w.lock.Owner waits for w. Requires t.mu.
func (t *Table) addWaiter(w *waiter) {
	if t.waits == nil {
		t.waits = make(map[Owner][]*waiter)
	}
	o := w.lock.Owner
	t.waits[o] = append(t.waits[o], w)
}

// removeWaiter undoes addWaiter. Requires t.mu.
func (t *Table) removeWaiter(w *waiter) {
	o := w.lock.Owner
	ws := slices.DeleteFunc(t.waits[o], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(t.waits, o)
	} else {
		t.waits[o] = ws
	}
}

// deadlocked reports whether w's owner, by waiting for w, would close a
// cycle in the waits-for graph: whether some owner blocking w waits, directly
// or through other waiting owners, for a lock w's owner holds.
// Requires t.mu.
func (t *Table) deadlocked(w *waiter) bool {
	self := w.lock.Owner
	seen := make(map[Owner]bool)
	pending := t.blockers(nil, w)
	for len(pending) > 0 {
		o := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		if o == self {
			return true
		}
		if seen[o] {
			continue
		}
		seen[o] = true
		for _, ow := range t.waits[o] {
			pending = t.blockers(pending, ow)
		}
	}
	return false
}

// blockers appends to dst the owners of the locks that block w.
// Requires t.mu.
func (t *Table) blockers(dst []Owner, w *waiter) []Owner {
	in := t.lookup(w.ino, false)
	if in == nil {
		return dst
	}
	for _, x := range in.records {
		if x.Start > w.lock.End {
			break
		}
		if w.lock.conflicts(x) {
			dst = append(dst, x.Owner)
		}
	}
	return dst
}

// ReleaseOwner drops every lock o holds on ino, record and flock alike, and
// wakes the waiters they blocked. The vfs layer calls it when o's last open
// file on ino is closed.
func (t *Table) ReleaseOwner(ino uint64, o Owner) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.lookup(ino, false)
	if in == nil {
		return
	}
	t.release(ino, in, func(x Owner) bool { return x == o })
}

// ReleaseClient drops every lock held by any owner of client, on every
// inode, and wakes the waiters they blocked. It is for NFSv4 lease expiry.
// Requests of the client's owners already blocked in Wait or Flock keep
// waiting until their contexts end.
func (t *Table) ReleaseClient(client uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ino, in := range t.inodes {
		t.release(ino, in, func(x Owner) bool { return x.Client == client })
	}
}

// release drops the locks on in of owners for which match is true.
// Requires t.mu.
func (t *Table) release(ino uint64, in *inode, match func(Owner) bool) {
	records, changed := without(in.records, func(x Lock) bool { return match(x.Owner) })
	in.records = records
	for o := range in.flocks {
		if match(o) {
			delete(in.flocks, o)
			changed = true
		}
	}
	if len(in.flocks) == 0 {
		in.flocks = nil
	}
	if changed {
		t.published(context.Background(), ino, in)
		in.wake()
	}
	t.forgetIfIdle(ino, in)
}

// Held returns a copy of the record locks on ino, sorted by start, then end,
// then owner. flock locks are not included; see HeldFlocks.
func (t *Table) Held(ino uint64) []Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.lookup(ino, false)
	if in == nil {
		return nil
	}
	return slices.Clone(in.records)
}
