package locks

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Peers are the other servers of a file system that several servers
// serve, each with a Table of its own for its own clients' owners. A
// Table with Peers set asks them before it grants a lock and tells them
// after it drops one; the storage behind them is theirs (package vfs keeps
// each server's locks in the shared kv store). The Table stays the
// authority for its own owners: merging and splitting their locks, their
// waits and deadlock detection among them. Deadlocks that run through
// another server's owners are not detected; such waits end with their
// contexts.
//
// Invariant: what a Table's Peers hold as this server's locks on an inode
// always includes every lock the Table holds there. Grants are published
// before the Table applies them (Grant), releases after (Release), both
// with the Table's mutex held, so the publications of one inode come in
// the order of the Table's changes.
type Peers interface {
	// Grant is asked, with the Table's mutex held, for a request req that
	// no local owner's lock blocks; flock says whether it is a flock
	// request. held is every lock the Table will hold on ino once req is
	// granted. Grant reports false if a lock of another live server blocks
	// req (see Excludes); otherwise it records held as this server's locks
	// on ino before it returns true. An error leaves the Table unchanged.
	Grant(ctx context.Context, ino uint64, req Lock, flock bool, held Held) (bool, error)
	// Release records held as this server's locks on ino after the Table
	// dropped some (an unlock, a closed file, a client gone, the old lock
	// of a flock conversion). It cannot fail: a Peers that cannot record
	// the change now keeps trying, and until then the others see more
	// locks than there are, never fewer.
	Release(ctx context.Context, ino uint64, held Held)
	// Retry is how long a request that another server's lock blocks waits
	// before Wait or Flock asks again, unless a change on the inode here
	// wakes it first.
	Retry() time.Duration
}

// Held is the locks one server holds on one inode: record locks, and flock
// locks as whole-file Locks.
type Held struct {
	Records []Lock
	Flocks  []Lock
}

// Empty reports whether h holds no lock.
func (h Held) Empty() bool { return len(h.Records) == 0 && len(h.Flocks) == 0 }

// Excludes reports whether req cannot be granted while held, a lock of
// another server, is held: they overlap and one of them is a write lock.
// Owners of different servers are always different, whatever their
// numbers say, so the owners are not compared.
func Excludes(req, held Lock) bool {
	return held.overlaps(req) && (held.Kind == Write || req.Kind == Write)
}

// FirstExcluding returns the lowest lock in held that Excludes req.
func FirstExcluding(held []Lock, req Lock) (Lock, bool) {
	var first Lock
	found := false
	for _, x := range held {
		if Excludes(req, x) && (!found || compareLocks(x, first) < 0) {
			first, found = x, true
		}
	}
	return first, found
}

// held returns what in holds. Requires Table.mu.
func (in *inode) held() Held {
	h := Held{Records: slices.Clone(in.records)}
	for o, k := range in.flocks {
		h.Flocks = append(h.Flocks, Lock{Start: 0, End: ToEOF, Kind: k, Owner: o})
	}
	slices.SortFunc(h.Flocks, func(a, b Lock) int {
		return cmp.Or(cmp.Compare(a.Owner.Client, b.Owner.Client), cmp.Compare(a.Owner.ID, b.Owner.ID))
	})
	return h
}

// published tells the Peers, if any, what in holds after a release.
// Requires t.mu.
func (t *Table) published(ctx context.Context, ino uint64, in *inode) {
	if t.Peers != nil {
		t.Peers.Release(ctx, ino, in.held())
	}
}

// outcome is what one attempt at a request came to.
type outcome uint8

const (
	granted          outcome = iota
	blockedHere              // by a lock of another owner in this Table
	blockedElsewhere         // by a lock of another server (Peers)
)
