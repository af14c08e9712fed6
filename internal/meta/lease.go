package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"bucketfs/internal/kv"
)

// Leases and fencing.
//
// Several servers may share one file system through one kv store; the work
// that must happen once (exports, imports from polls and events, the moves
// to lost+found they make) is done only by the holder of one lease, the
// "sync" lease. A lease record holds the holder's server id, a fencing
// token and the holder's renewal count:
//
//	L<name>           holder and token (JSON), changed only with the holder
//	L<name>/renewal   renewal count and times (JSON), changed at every renewal
//
// # Time
//
// The kv has no clock, and the servers' wall clocks are not trusted
// against each other. A lease is therefore taken over on observed
// non-renewal, not on a time written in the record: a server that wants
// the lease remembers the record as it last saw it (holder, token, beat)
// and when it first saw it so, on its own monotonic clock; only once that
// record has stayed the same for the lease time does it take the lease,
// in a transaction that finds the record still unchanged (TryLease's
// expired callback). The holder counts itself the leader only until a
// little less than the lease time after the start of its last successful
// renewal (package engine: nine tenths); a taker first saw that renewal
// after it committed, so the holder stops before anyone takes over, as
// long as the two clocks run at about the same rate (no bound on their
// offset is needed, only on their drift over one lease time: a tenth). The Expiry written in the record
// is the holder's own clock plus the lease time, for status only.
//
// # Fencing
//
// Timing alone cannot stop a holder that was paused (a stopped process, a
// long GC, a partition) from acting after a takeover it has not noticed.
// Every change of holder adds one to the token. A leader's work runs under
// a context carrying its Fence (WithFence); every kv transaction run under
// such a context (Update or UpdateSized of the Store's kv, whatever the
// operation: an export intent, the record of an export, a requeue, an
// import, a move to lost+found) first reads the lease record, in the same
// transaction, and fails with ErrFenced unless the record still names
// this holder with this token. kv transactions are serializable, so a
// takeover commits either before such a transaction (which then fails) or
// after it (and the new leader sees what it recorded). A paused old
// leader that wakes up can therefore record nothing. What it sends to the
// bucket is kept safe the other way: its writes are conditional on the
// version it last saw (If-Match, If-None-Match), and it never replaces nor
// deletes an object of its own inode tagged with a newer generation than
// the state it exports (package sync): so a stale upload cannot replace a
// newer one, and the bucket receives no version twice.
//
// Transactions under a context without a fence (the front ends' reads
// and writes, on any server) are not checked.

// pLease starts a lease record's key.
const pLease = 'L'

// SyncLease names the lease whose holder exports and imports.
const SyncLease = "sync"

// ErrFenced is the error of a transaction run under a fence that is no
// longer the lease's: another server holds the lease now, or it was
// released.
var ErrFenced = errors.New("not the lease holder any more")

// Lease is the record of one lease.
type Lease struct {
	// Holder is the id of the server holding it ("" when released).
	Holder string `json:"holder"`
	// Token is the fencing token: it grows by one at every change of
	// holder, and is never reused.
	Token uint64 `json:"token"`
	// Beat grows by one at every renewal (and every change): what a
	// server waiting to take over watches.
	Beat uint64 `json:"beat"`
	// Renewed and Expiry are the holder's clock at its last renewal and
	// that plus the lease time: for status only (see Time above).
	Renewed time.Time `json:"renewed"`
	Expiry  time.Time `json:"expiry"`
}

// Same tells whether l and o are the same record as far as a taker is
// concerned: same holder, token and beat.
func (l Lease) Same(o Lease) bool {
	return l.Holder == o.Holder && l.Token == o.Token && l.Beat == o.Beat
}

func leaseKey(name string) []byte { return append([]byte{pLease}, name...) }

// leaseRenewalKey holds the renewal part of a lease record (Beat, Renewed,
// Expiry), apart from its holder and token under leaseKey: the fence
// check reads only the latter, which changes only with the holder, so
// that on a store with optimistic or serializable-snapshot transactions
// the renewals every few seconds do not conflict with the holder's work.
func leaseRenewalKey(name string) []byte { return append(leaseKey(name), "/renewal"...) }

// leaseHolder and leaseRenewal are the two parts of a Lease as stored.
type leaseHolder struct {
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
}

type leaseRenewal struct {
	Beat    uint64    `json:"beat"`
	Renewed time.Time `json:"renewed"`
	Expiry  time.Time `json:"expiry"`
}

// readHolder reads the holder part of lease name.
func readHolder(r kv.Reader, name string) (h leaseHolder, err error) {
	v, err := r.Get(leaseKey(name))
	if errors.Is(err, kv.ErrNotFound) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(v, &h); err != nil {
		return h, fmt.Errorf("lease %s: %w", name, err)
	}
	return h, nil
}

func readLease(r kv.Reader, name string) (Lease, error) {
	h, err := readHolder(r, name)
	if err != nil {
		return Lease{}, err
	}
	var rn leaseRenewal
	v, err := r.Get(leaseRenewalKey(name))
	switch {
	case errors.Is(err, kv.ErrNotFound):
	case err != nil:
		return Lease{}, err
	default:
		if err := json.Unmarshal(v, &rn); err != nil {
			return Lease{}, fmt.Errorf("lease %s: %w", name, err)
		}
	}
	return Lease{Holder: h.Holder, Token: h.Token, Beat: rn.Beat, Renewed: rn.Renewed, Expiry: rn.Expiry}, nil
}

// putLease writes l over old: the holder part only if it changed.
func putLease(tx kv.Txn, name string, old, l Lease) error {
	if old.Holder != l.Holder || old.Token != l.Token {
		v, err := json.Marshal(leaseHolder{Holder: l.Holder, Token: l.Token})
		if err != nil {
			return err
		}
		if err := tx.Set(leaseKey(name), v); err != nil {
			return err
		}
	}
	v, err := json.Marshal(leaseRenewal{Beat: l.Beat, Renewed: l.Renewed, Expiry: l.Expiry})
	if err != nil {
		return err
	}
	return tx.Set(leaseRenewalKey(name), v)
}

// ReadLease returns the record of lease name (the zero Lease if it was
// never taken).
func (s *Store) ReadLease(ctx context.Context, name string) (l Lease, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		l, err = readLease(r, name)
		return err
	})
	return l, err
}

// TryLease takes or renews lease name for server id, for the lease time
// d (which only sets the Expiry shown in status). The holder renews it.
// Another server takes it when it is released, or when expired says so
// of the record as it is now, in this transaction: the caller answers from
// what it has observed of that record (see Time above). held says whether
// id holds the lease now; l is the record after the call.
func (s *Store) TryLease(ctx context.Context, name, id string, d time.Duration, expired func(cur Lease) bool) (l Lease, held bool, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		cur, err := readLease(tx, name)
		if err != nil {
			return err
		}
		l, held = cur, false
		switch {
		case cur.Holder == id:
		case cur.Holder == "" || expired(cur):
			l.Holder, l.Token = id, cur.Token+1
		default:
			return nil
		}
		now := s.now()
		l.Beat, l.Renewed, l.Expiry, held = cur.Beat+1, now, now.Add(d), true
		return putLease(tx, name, cur, l)
	})
	if err != nil {
		return Lease{}, false, fmt.Errorf("lease %s: %w", name, err)
	}
	return l, held, nil
}

// ReleaseLease gives lease name up if id holds it, so that another server
// may take it at once. The token stays: the next holder's is one more.
func (s *Store) ReleaseLease(ctx context.Context, name, id string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		cur, err := readLease(tx, name)
		if err != nil || cur.Holder != id {
			return err
		}
		l := cur
		l.Holder, l.Beat, l.Expiry = "", cur.Beat+1, time.Time{}
		return putLease(tx, name, cur, l)
	})
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// Fence is what a lease holder's transactions are checked against: the
// lease, its holder and the token it got when it took the lease.
type Fence struct {
	Lease  string
	Holder string
	Token  uint64
}

type fenceKey struct{}

// WithFence returns ctx carrying f: every kv transaction of a Store run
// under it checks the lease first (see Fencing above).
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceOf returns the fence ctx carries, if any.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// check fails with ErrFenced unless the lease record in r is still f's.
// It reads only the holder part (leaseRenewalKey).
func (f Fence) check(r kv.Reader) error {
	cur, err := readHolder(r, f.Lease)
	if err != nil {
		return err
	}
	if cur.Holder != f.Holder || cur.Token != f.Token {
		return fmt.Errorf("%w: lease %s is held by %q with token %d, this server (%s) had token %d",
			ErrFenced, f.Lease, cur.Holder, cur.Token, f.Holder, f.Token)
	}
	return nil
}

// CheckFence reports ErrFenced if ctx carries a fence that is no longer
// the lease's (nil without a fence). It is a look, not a guard: only a
// transaction's own check is sure (see Fencing above).
func (s *Store) CheckFence(ctx context.Context) error {
	f, ok := FenceOf(ctx)
	if !ok {
		return nil
	}
	return s.kv.View(ctx, func(r kv.Reader) error { return f.check(r) })
}

// fencedKV is the kv store as the namespace uses it: every Update run
// under a context with a fence checks that fence first, inside the
// transaction (see Fencing above).
type fencedKV struct{ kv.Store }

func (f fencedKV) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return f.Store.Update(ctx, fenced(ctx, fn))
}

func (f fencedKV) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	return f.Store.UpdateSized(ctx, size, fenced(ctx, fn))
}

// fenced wraps fn with the check of ctx's fence, if it has one.
func fenced(ctx context.Context, fn func(tx kv.Txn) error) func(tx kv.Txn) error {
	fc, ok := FenceOf(ctx)
	if !ok {
		return fn
	}
	return func(tx kv.Txn) error {
		if err := fc.check(tx); err != nil {
			return err
		}
		return fn(tx)
	}
}
