package nfs4

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"bucketfs/internal/meta"
)

// Several NFS servers, one file system.
//
// Each NFS server of a file system has an identity (Options.Identity): a
// number that stays the same across its restarts (the engine keeps it in
// the state directory, engine.NFSIdentity) and that no other server of
// the file system has. It names three things:
//
//   - its client records (grace.go, records.go; meta's clients.go), so
//     that a restart finds exactly its own clients;
//   - its server owner in EXCHANGE_ID (serverOwner below);
//   - its entries in the registry (Registry), which tell the other
//     servers whether it still runs.
//
// A file system served alone may leave Identity zero, the identity of
// "the only server"; New refuses zero on a file system shared with other
// servers (vfs.FS.Shared), where it would mix two servers' clients.
//
// What is shared and what is not. Filehandles are the file system's
// (fh.go: its id and a MAC under its secret, both in the store), so one
// obtained through any server works through every other. Opens, locks and
// share reservations are published in the store per server (vfs's
// shared.go) and bind the clients of every server. Client ids, sessions,
// stateids and leases are each server's own: a client that moves to
// another server starts there as a new client (its filehandles still
// work; its state does not move with it).
//
// A server that dies: the others stop honouring its locks, opens and
// share reservations once the registry shows it dead (vfs.Liveness: its
// heartbeat unchanged for the registry's lease time, as each of them sees
// it). Its clients cannot renew their leases meanwhile, so for no client
// to lose a lock it still believes it holds, a client's lease must run out
// before that: the lease is at most leaseShare of the registry's lease
// time (New refuses more, and takes half by default), which leaves a
// quarter of it for the dead server's last heartbeat, written up to a
// quarter before its death. Nothing else of its clients is lost: their
// data and namespace changes are in the store when acknowledged.
//
// A server that restarts (the same state directory, so the same
// identity): its clients reclaim in its grace period (grace.go). Its
// earlier run's locks, left in the store by a crash or by a clean stop
// (Close keeps the locks of clients that hold state, and the engine then
// leaves its registry record to run out), bind the other servers' clients
// until the lease time as above; the restarted run itself ignores them
// (meta.Options.EarlierRun; a run whose registry record is gone already
// is known gone from the start, engine's noteGoneHolders), so they never
// refuse its own clients' reclaims, and it leaves them in the store for
// its grace period: another server that drops them leaves the mark that
// refuses reclaims on that file (grace.go). When its grace period ends it
// deletes them, and a lock nobody reclaimed binds nobody any more.
//
// A client that moves to another server (same client owner, a new
// client id there): it may not reclaim there what it held through the
// server it left, which it is told by NFS4ERR_NO_GRACE, and it takes its
// opens and locks anew, as a client whose lease ran out does. It gets
// those that conflict with the dead server's once the others take that
// server for dead (above); what it wrote is in the store already.
// Seeing one scope and two server owners, a client that follows RFC 8881
// 8.4.2.1 does try to reclaim (the same scope says the filehandles are
// still good), and that section leaves it to the server to answer
// NFS4ERR_NO_GRACE when it cannot support the reclaim correctly, which
// ours cannot, for three reasons:
//
//   - Nothing on the other servers waits for a dead server's clients:
//     once it is taken for dead they grant its locks and share
//     reservations to their own clients with no grace period at all (RFC
//     8881 8.4.3's first edge condition). A restart of the dead server
//     learns from marks in the store on which files another server
//     dropped its locks, and refuses reclaims there (grace.go); no mark
//     is left for share reservations, and the marks are made for the
//     dead server's own restart, which deletes them.
//   - The dead server's records stay its own (they are what its restart
//     reclaims through, until forgotten): taking them over would let one
//     client claim the same state on two servers, the new one and the
//     old one back from a restart, and nothing orders the two.
//   - Its server owner is its own (serverOwner below): the servers say
//     that they are distinct, and share no client ids or stateids.
//
// Offering it would take a grace period of the whole file system for a
// dead server's clients (the other servers keep honouring its locks
// until its clients have reclaimed them or a lease has passed) and a
// hand-over of its records in one transaction; until then, servers that
// must look like one to their clients (a moving virtual address) are one
// bucketfs server restarted on the same state directory, whose clients
// reclaim in its grace period. A refused reclaim is logged once per
// client, naming the server whose records hold it
// (explainRefusedReclaim).
//
// Records of a server that never comes back (forgetGoneServers below): they
// matter only to a restart of that server, so once the registry has not
// listed it for ForgetAfter, on the clock of a server that looks, that
// server deletes them, all at once and only if they are still as it read
// them (meta.DeleteClientRecordsOf), so that a server that came back just
// then keeps its own. A server that comes back later finds no client to
// wait for: its clients' reclaims are refused (NFS4ERR_NO_GRACE), as
// those of clients whose lease ran out.

// Registry tells an NFS server of a shared file system about the other
// servers (the engine implements it from its server registry).
type Registry interface {
	// NFSServers returns the identities of the NFS servers the
	// registry lists now: those running, or dead too recently to be
	// known dead.
	NFSServers(ctx context.Context) (map[uint64]bool, error)
	// LeaseTime is how long a server's heartbeat may stay unchanged
	// before the others take it for dead and stop honouring its locks.
	LeaseTime() time.Duration
}

// DefaultForgetAfter is how long the registry must have missed an NFS
// server before another deletes its client records, when
// Options.ForgetAfter is zero: long enough for a machine to be repaired
// and its server restarted with its clients' claims intact.
const DefaultForgetAfter = 24 * time.Hour

// leaseShare bounds the NFS lease by the registry's lease time (see the
// comment above): at most three quarters of it.
const leaseShare = 0.75

// checkIdentity checks Options.Identity, Registry and LeaseTime against fs,
// and fills in the defaults they imply.
func checkIdentity(opts *Options, shared bool) error {
	if shared && opts.Identity == 0 {
		return errors.New("a file system shared with other servers needs the NFS server's own identity (Options.Identity; engine.NFSIdentity)")
	}
	if opts.Registry == nil {
		return nil
	}
	reg := opts.Registry.LeaseTime()
	if opts.LeaseTime <= 0 {
		opts.LeaseTime = reg / 2
	}
	if float64(opts.LeaseTime) > leaseShare*float64(reg) {
		return fmt.Errorf("an NFS lease of %v is too long for servers that take each other for dead after %v: a dead server's locks would go to others while its clients still hold them (at most %v)",
			opts.LeaseTime, reg, time.Duration(leaseShare*float64(reg)))
	}
	if opts.ForgetAfter <= 0 {
		opts.ForgetAfter = DefaultForgetAfter
	}
	return nil
}

// serverOwner and serverScope are EXCHANGE_ID's eir_server_owner and
// eir_server_scope (RFC 8881 2.10.4, 2.10.5, 18.35).
//
// The scope is the file system's: "bucketfs:" and its id, the same on
// every server of it. Servers that share a scope say that their server
// owners may be compared (RFC 8881 2.10.4: owners under different scopes
// are different whatever their bytes), which lets a client tell that the
// servers of one file system belong together; our guarantee behind it is
// that the filehandles of one are valid on the others (fh.go).
//
// The owner's major id is the server's own ("bucketfs:", the file
// system's id, "/", its identity in hex), stable across its restarts,
// and different on every server of the file system; the minor id is 0.
// A client that finds the same scope and major id at two addresses may
// use one client id through both (client id trunking, RFC 8881 2.10.5),
// which would need the servers to share client ids and state: ours do
// not, so their major ids differ, and a client keeps one client id per
// server. Trunking is not offered; two addresses of one server (its
// listeners) give the same owner, and a client may use them as one.
func (s *Server) serverOwner() []byte {
	return fmt.Appendf(nil, "bucketfs:%s/%016x", s.fsid, s.identity)
}

func (s *Server) serverScope() []byte { return []byte("bucketfs:" + s.fsid) }

// forgetGoneServers deletes the client records of the NFS servers the registry
// has not listed for ForgetAfter (see the comment at the top). It runs
// from the reaper, looking at most every forgetEvery; goneSince keeps,
// for each identity with records that the last look did not find in the
// registry, when a look first missed it. Only the reaper calls it.
func (s *Server) forgetGoneServers(ctx context.Context, now time.Time) {
	reg := s.opts.Registry
	if reg == nil || now.Before(s.nextForget) {
		return
	}
	s.nextForget = now.Add(s.forgetEvery())
	owners, err := s.fs.Meta().ClientRecordServers(ctx)
	if err != nil {
		s.log.Warn("client records of other NFS servers", "err", err)
		return
	}
	listed, err := reg.NFSServers(ctx)
	if err != nil {
		s.log.Warn("server registry", "err", err)
		return
	}
	for id := range s.goneSince {
		if _, ok := owners[id]; !ok || listed[id] {
			delete(s.goneSince, id)
		}
	}
	for id := range owners {
		if id == s.identity || listed[id] {
			continue
		}
		since, ok := s.goneSince[id]
		if !ok {
			s.goneSince[id] = now
			continue
		}
		if now.Sub(since) < s.opts.ForgetAfter {
			continue
		}
		recs, err := s.fs.Meta().ClientRecords(ctx, id)
		if err == nil {
			err = s.fs.Meta().DeleteClientRecordsOf(ctx, id, recs)
		}
		switch {
		case errors.Is(err, meta.ErrClientRecordsChanged):
			// It wrote since: it is back, or about to be.
			delete(s.goneSince, id)
		case err != nil:
			s.log.Warn("deleting the client records of a gone NFS server", "server", fmt.Sprintf("%016x", id), "err", err)
		default:
			delete(s.goneSince, id)
			s.log.Info("the client records of an NFS server gone for good are deleted: its clients have nothing to reclaim",
				"server", fmt.Sprintf("%016x", id), "gone_for", now.Sub(since).Round(time.Second), "records", len(recs))
		}
	}
}

// forgetEvery is how often forgetGoneServers looks: an eighth of ForgetAfter,
// within [reapTick, 1 min].
func (s *Server) forgetEvery() time.Duration {
	return min(max(s.opts.ForgetAfter/8, s.reapTick()), time.Minute)
}

// explainRefusedReclaim logs, once per client, which other servers' client
// records name client cl, whose reclaim was just refused with
// NFS4ERR_NO_GRACE: a client that moved here from another server, which
// may not reclaim here (see the comment at the top). Requires no lock; it
// reads the store.
func (s *Server) explainRefusedReclaim(ctx context.Context, cl *client) {
	if !s.fs.Shared() {
		return
	}
	t := s.state
	t.mu.Lock()
	done := cl.reclaimExplained
	cl.reclaimExplained = true
	t.mu.Unlock()
	if done {
		return
	}
	servers, err := s.fs.Meta().ClientRecordServers(ctx)
	if err != nil {
		s.log.Warn("client records of other NFS servers", "err", err)
		return
	}
	var holders []string
	for _, id := range slices.Sorted(maps.Keys(servers)) {
		if id == s.identity {
			continue
		}
		recs, err := s.fs.Meta().ClientRecords(ctx, id)
		if err != nil {
			s.log.Warn("client records of another NFS server", "server", fmt.Sprintf("%016x", id), "err", err)
			return
		}
		if _, ok := recs[cl.key]; ok {
			holders = append(holders, fmt.Sprintf("%016x", id))
		}
	}
	if len(holders) == 0 {
		return
	}
	s.log.Info("an NFS client reclaims what it held through another server of the file system; reclaim across servers is not offered, so it is refused (NFS4ERR_NO_GRACE) and the client takes its opens and locks anew, those the other server's clients held once the registry takes that server for dead",
		"client", cl.key, "records_at", strings.Join(holders, ","))
}
