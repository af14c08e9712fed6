package nfs4

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Restart recovery (RFC 8881 8.4, RFC 7530 9.6): opens and locks live in
// memory and die with the process, but their holders do not know that.
// After a restart the server runs a grace period in which the clients
// that held state may take it back (OPEN with CLAIM_PREVIOUS, LOCK with
// reclaim set) and nobody may take new state (NFS4ERR_GRACE), so that no
// lock is handed to someone else while its holder still believes it has
// it.
//
// Which clients may reclaim is kept in stable storage: the file system's
// kv (meta client records), one record per client owner, written and
// synced before the client's first open is granted (recordClient) and
// removed, durably, when its lease expires or it destroys its client id
// (before its locks are released to others), or soon after it holds no
// open any more (records.go). A record names the principal that made the
// client (caller.principal), and only that principal may reclaim through
// it; it also holds, coarsely, when the client last renewed its lease.
//
// The grace period starts when the server starts with records of clients
// that held state when the previous instance stopped (records.go drops
// those whose lease had run out before), lasts one lease, and ends early
// once every recorded client has sent RECLAIM_COMPLETE (a 4.0 client
// cannot: with one recorded, the grace period runs its whole lease). With
// no such record there is no grace period at all. When it ends, the
// records of the clients that did not come back are removed: their state
// is lost to them, as a client that lost its lease.
//
// What grace refuses: OPEN other than CLAIM_PREVIOUS, LOCK without
// reclaim, LOCKT, and WRITE, size-changing SETATTR and (anonymous) READ
// that use a special stateid, since they could break a share reservation
// not yet reclaimed. Everything else (LOOKUP, GETATTR, READDIR, CREATE,
// REMOVE, RENAME, I/O under reclaimed state) runs as usual. Besides, a
// 4.1 client gets NFS4ERR_GRACE for such an OPEN or LOCK of its own until
// it has sent RECLAIM_COMPLETE, with or without a grace period
// (noNewStateFor).
//
// The records are this server's alone, under its identity
// (Options.Identity; meta's clients.go): on a file system shared by
// several servers, a restart of one finds exactly its own clients, runs
// its grace period for them alone, and never reclaims, waits for or
// deletes the clients of another server (identity.go). The grace period
// holds back new state on this server only: the other servers of the file
// system stopped honouring this server's locks once the registry showed it
// dead (vfs.Liveness), so a lock another server granted meanwhile makes
// the reclaim of a conflicting one fail (NFS4ERR_RECLAIM_CONFLICT, below):
// the client lost that lock, as it would have lost it to a lease that ran
// out.
//
// The errors of a reclaim (RFC 8881 15.1.9 and 8.4.2.1; for 4.0, RFC
// 7530 9.6.3 and its error lists of OPEN and LOCK, which hold the same
// three):
//
//   - NFS4ERR_NO_GRACE when the server cannot vouch that nothing
//     conflicting was granted since the client's state was lost: outside
//     the grace period, after the client's RECLAIM_COMPLETE, and for a
//     client this server's previous run did not record (for this
//     principal): one whose lease ran out before, one that never held
//     state here, one whose records are another server's (identity.go).
//   - NFS4ERR_RECLAIM_CONFLICT when the reclaim runs into a lock or a
//     share reservation granted since the restart: to another client's
//     reclaim (one of the two claims more than it held), through FUSE, or
//     through another server of the file system. NFS4ERR_DENIED and
//     NFS4ERR_SHARE_DENIED would tell the client to try again later,
//     which cannot help a reclaim.
//   - NFS4ERR_RECLAIM_BAD for state the server knows it never granted:
//     a delegation (none is ever granted).
//
// A lock another server granted and released while this one was down
// (RFC 8881 8.4.3's first edge condition) leaves no lock to conflict
// with. What it does leave: the transaction that granted it dropped the
// earlier run's lock records on the file, and left a mark for this
// server's identity (meta's shared.go). A lock reclaim on a file with
// such a mark is refused (lockReclaimable): NFS4ERR_RECLAIM_CONFLICT if a
// conflicting lock is held, else NFS4ERR_NO_GRACE, since the server
// cannot vouch for the range; the check is made again after the grant,
// which is taken back if a mark appeared meanwhile. The mark is
// per file, not per range: a reclaim on a file where another server's
// client took any lock after the earlier run was taken for dead is
// refused. When the grace period ends, the earlier runs' remaining lock
// records and this server's marks are deleted (pruneRecords).
//
// What this does not catch: share reservations granted and released by
// another server while this one was down (no mark is left for them; the
// Linux client never asks for a deny mode, so only other clients' share
// reservations are concerned), a conflicting lock taken and released
// through FUSE on this server during the grace period (no command runs a
// FUSE mount and an NFS server in one process: `bucketfs mount` has no
// NFS server and `serve` no FUSE mount, and a FUSE mount elsewhere is
// another server, whose drops leave marks), and locks dropped after the
// registry had forgotten the dead run (two lease times after its death),
// which leave no mark.

// graceState is the grace period's part of the state table, guarded by
// the table's mutex.
type graceState struct {
	end  time.Time
	over bool
	// reclaimable maps the owner key of each client the previous
	// instance recorded to the principal that made it: those may
	// reclaim, until the grace period ends.
	reclaimable map[string]string
	// completed holds the reclaimable owners whose client sent
	// RECLAIM_COMPLETE.
	completed map[string]bool
	// pruned: the records of clients that did not come back were
	// removed after the grace period.
	pruned bool
}

// startGrace loads the previous instance's client records and, if any
// client held state when it stopped, starts the grace period.
func (s *Server) startGrace(ctx context.Context) error {
	recs, err := s.loadRecords(ctx)
	if err != nil {
		return err
	}
	g := &s.state.grace
	owners := make([]string, 0, len(recs))
	for owner, principal := range recs {
		g.reclaimable[owner] = principal
		owners = append(owners, owner)
	}
	if len(recs) == 0 {
		if s.fs.Shared() {
			// No client may reclaim: the earlier runs' locks and the
			// marks of dropped ones matter to nobody.
			err := s.fs.DropEarlierRunLocks(ctx, s.identity)
			if err == nil {
				err = s.fs.Meta().ForgetDroppedLocks(ctx, s.identity)
			}
			if err != nil {
				return err
			}
		}
		g.over, g.pruned = true, true
		s.log.Info("no grace period: no NFS client of the previous run holds state")
		return nil
	}
	slices.Sort(owners)
	// As long as a client is kept without renewing (expireAfter): an idle
	// client learns of the restart at its next renewal, which may come
	// that late (Linux renews at most every 5 s), and then reclaims.
	g.end = time.Now().Add(s.expireAfter())
	s.log.Info(fmt.Sprintf("grace period of %v for %d NFS clients that held state: they may reclaim their opens and locks, new ones wait until they have (4.1: RECLAIM_COMPLETE) or the period ends",
		s.expireAfter(), len(recs)), "clients", fmt.Sprintf("%q", owners), "until", g.end.Format(time.RFC3339))
	return nil
}

// inGrace reports whether the grace period runs, ending it when its time
// is up or every recorded client has completed its reclaims. Requires
// the table mutex.
func (t *stateTable) inGrace(now time.Time) bool {
	g := &t.grace
	if g.over {
		return false
	}
	done := true
	for owner := range g.reclaimable {
		if !g.completed[owner] {
			done = false
			break
		}
	}
	if done || now.After(g.end) {
		g.over = true
		return false
	}
	return true
}

// mayReclaim checks a reclaim by client cl: NFS4ERR_NO_GRACE outside the
// grace period, for a client the previous instance did not record (or
// recorded for another principal), and after the client's
// RECLAIM_COMPLETE. Requires the table mutex.
func (t *stateTable) mayReclaim(cl *client) nfsv4.Nfsstat4 {
	if !t.inGrace(time.Now()) {
		return nfsv4.NFS4ERR_NO_GRACE
	}
	principal, ok := t.grace.reclaimable[cl.key]
	if !ok || principal != cl.principal || cl.reclaimDone {
		return nfsv4.NFS4ERR_NO_GRACE
	}
	return nfsv4.NFS4_OK
}

// noNewState is NFS4ERR_GRACE while the grace period runs: a request for
// new state (or I/O outside any) waits until reclaims are over. Requires
// the table mutex.
func (t *stateTable) noNewState() nfsv4.Nfsstat4 {
	if t.inGrace(time.Now()) {
		return nfsv4.NFS4ERR_GRACE
	}
	return nfsv4.NFS4_OK
}

// noNewStateFor is noNewState for client cl's OPEN or LOCK that reclaims
// nothing: a 4.1 client also waits for its own RECLAIM_COMPLETE, grace
// period or not (RFC 8881 18.51.3: a client sends it on every new client
// id before its first non-reclaim locking operation, which is
// NFS4ERR_GRACE until then). The flag belongs to the client id: a new
// session of the same client needs no second one, a client that reboots
// (a new verifier, so a new client id, also after a server restart)
// sends its own. 4.0 has no RECLAIM_COMPLETE and only waits out the grace
// period. Requires the table mutex.
func (t *stateTable) noNewStateFor(cl *client) nfsv4.Nfsstat4 {
	if cl.minor41 && !cl.reclaimDone {
		return nfsv4.NFS4ERR_GRACE
	}
	return t.noNewState()
}

// heldOnBehalf reports whether the previous instance recorded cl's owner
// for cl's principal, so its record is in stable storage already.
// Requires the table mutex.
func (t *stateTable) heldOnBehalf(cl *client) bool {
	p, ok := t.grace.reclaimable[cl.key]
	return ok && p == cl.principal
}

// recordClient makes sure cl's record is in stable storage before the
// client is granted an open: without it, a restart would not let the
// client reclaim, or would let someone else take its locks first. On
// NFS4_OK the grant is under way until the caller calls granted, and the
// record stays until then (keepRecords).
func (s *Server) recordClient(ctx context.Context, cl *client) nfsv4.Nfsstat4 {
	t := s.state
	t.mu.Lock()
	if cl.recorded || t.heldOnBehalf(cl) {
		cl.granting++
		t.mu.Unlock()
		return nfsv4.NFS4_OK
	}
	t.mu.Unlock()
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	t.mu.Lock()
	if cl.recorded || t.heldOnBehalf(cl) {
		cl.granting++
		t.mu.Unlock()
		return nfsv4.NFS4_OK
	}
	rec := clientRecord{principal: cl.principal, renewed: cl.lastRenew}
	t.mu.Unlock()
	if err := s.fs.Meta().PutClientRecord(ctx, s.identity, cl.key, encodeClientRecord(rec)); err != nil {
		s.log.Error("recording an NFS client in stable storage", "client", cl.id, "err", err)
		return statusOf(err)
	}
	t.mu.Lock()
	cl.recorded, cl.recordedRenew = true, rec.renewed
	cl.granting++
	t.mu.Unlock()
	return nfsv4.NFS4_OK
}

// granted ends a grant recordClient let begin, whether it made an open
// or failed.
func (s *Server) granted(cl *client) {
	s.state.mu.Lock()
	cl.granting--
	s.state.mu.Unlock()
}

// forgetClient removes the record of a client that lost its state (lease
// expired, client id destroyed, replaced by another principal's), before
// its locks go to others. The record is kept when a later client of the
// same owner has put its own there already (records are by owner). A
// failure is logged: the client could then reclaim after a restart, but
// only during the grace period, in which nobody else takes locks either.
func (s *Server) forgetClient(cl *client) {
	t := s.state
	t.mu.Lock()
	recorded := cl.recorded || t.heldOnBehalf(cl)
	if t.grace.reclaimable[cl.key] != "" {
		delete(t.grace.reclaimable, cl.key)
	}
	t.mu.Unlock()
	if !recorded {
		return
	}
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	t.mu.Lock()
	next := t.confirmed[cl.key]
	taken := next != nil && next != cl && next.recorded
	t.mu.Unlock()
	if taken {
		return
	}
	if err := s.fs.Meta().DeleteClientRecord(context.Background(), s.identity, cl.key); err != nil {
		s.log.Error("removing an NFS client from stable storage", "client", cl.id, "err", err)
	}
}

// pruneRecords removes, once the grace period is over, the records of the
// clients of the previous instance that did not come back.
func (s *Server) pruneRecords() {
	t := s.state
	t.mu.Lock()
	if t.grace.pruned || t.inGrace(time.Now()) {
		t.mu.Unlock()
		return
	}
	t.grace.pruned = true
	var lost []string
	for owner, principal := range t.grace.reclaimable {
		if cl := t.confirmed[owner]; cl != nil && cl.principal == principal {
			cl.recorded = true // its record stays: it came back
			continue
		}
		lost = append(lost, owner)
	}
	t.grace.reclaimable = map[string]string{}
	t.mu.Unlock()
	if s.fs.Shared() {
		// The earlier runs' locks nobody reclaimed bind nobody any more,
		// and the marks of locks dropped by others speak of runs whose
		// clients have had their grace period.
		ctx := context.Background()
		err := s.fs.DropEarlierRunLocks(ctx, s.identity)
		if err == nil {
			err = s.fs.Meta().ForgetDroppedLocks(ctx, s.identity)
		}
		if err != nil {
			s.log.Warn("after the grace period", "err", err)
		}
	}
	if len(lost) == 0 {
		return
	}
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	for _, owner := range lost {
		if err := s.fs.Meta().DeleteClientRecord(context.Background(), s.identity, owner); err != nil {
			s.log.Error("removing an NFS client from stable storage", "owner", owner, "err", err)
		}
	}
	s.log.Info("grace period over; clients that did not reclaim lost their state", "clients", len(lost))
}
