package nfs4

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Client records (grace.go) say which clients may have state to reclaim
// after a restart. Invariant: while a client holds an open (its locks live
// under its opens), or an OPEN of it is being granted (client.granting),
// its record is in stable storage, with a renewal time no older than its
// last renewal less renewLag. A record may outlive that: the server is
// only ever more careful than it needs to be, never less. So:
//
//   - a record is written, durably, before a client's first open is
//     granted (recordClient);
//   - once a client holds no open and none is being granted, the reaper
//     removes its record durably (keepRecords), so that a client that
//     closed everything (a one-shot 4.0 client such as nfs-cp) holds
//     nobody up after a crash; on a clean stop (Server.Close) the server
//     does it at once (closeRecords);
//   - the renewal time is written coarsely: when the client's lease was
//     renewed more than renewStep after the time stored, at the reaper's
//     next tick (never on every RENEW or SEQUENCE);
//   - at the start, the moment the previous instance is known to have run
//     (the stop record its Close wrote, or the latest renewal stored) tells
//     which records belong to clients whose lease had run out before the
//     stop: those lost their state then, and are dropped. A lease that ran
//     out while the server was down does not count (the client could not
//     renew), however long that was.
type clientRecord struct {
	principal string
	// renewed is when the client's lease was last renewed, as stored;
	// zero in a record of the earlier form, which kept only the
	// principal: such a record is always waited for.
	renewed time.Time
}

// stopRecord is the owner key of the record a clean stop leaves: the time
// of the stop. No client's key is empty ("4.0:" or "4.1:" and the owner).
const stopRecord = ""

// recordForm marks a record of this form: the form byte, the renewal time
// (nanoseconds since the epoch, big-endian), the principal. A principal
// ("sys:...", "none") never starts with it.
const recordForm = 1

func encodeClientRecord(r clientRecord) []byte {
	b := binary.BigEndian.AppendUint64([]byte{recordForm}, uint64(r.renewed.UnixNano()))
	return append(b, r.principal...)
}

func decodeClientRecord(b []byte) clientRecord {
	if len(b) < 9 || b[0] != recordForm {
		return clientRecord{principal: string(b)}
	}
	return clientRecord{principal: string(b[9:]), renewed: time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9])))}
}

func encodeStop(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }

func decodeStop(b []byte) time.Time {
	if len(b) != 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}

// expireAfter is how long after its last renewal a client is expired:
// the lease it is told (FATTR4_LEASE_TIME) and half as long again, at
// most 5 s more. A client renews within the lease by its own clock, but
// the Linux client waits at least 5 s between renewals whatever the
// lease, so under a lease of 5 s (servers of a shared file system,
// identity.go) an idle Linux client renewed at the very end of its lease
// or just after it, and lost its locks to a client of another server
// (kernelnfs, a 4.2 client idle while another server restarted). Keeping
// a client longer than its lease is safe: it believes it holds its state
// only until its lease runs out, by its own count, and other servers take
// a dead server's state by the registry's lease, not by this one.
func (s *Server) expireAfter() time.Duration { return s.lease + min(s.lease/2, 5*time.Second) }

// renewStep is how far a client's lease may be renewed past the time its
// record holds before the record is written again; renewLag bounds how far
// the stored time lags the real one (a step, and a reaper tick to notice).
func (s *Server) renewStep() time.Duration { return s.lease / 4 }
func (s *Server) renewLag() time.Duration  { return s.renewStep() + s.reapTick() }

// reapTick is the reaper's period.
func (s *Server) reapTick() time.Duration {
	return min(max(s.lease/4, 10*time.Millisecond), 5*time.Second)
}

// loadRecords reads the previous instance's client records, drops those
// whose lease ran out before it stopped, and returns the others, by owner,
// with the principal that made them. The records kept are stored again
// with the start as their renewal time (and in this form), durably: their
// clients could not renew while the server was down, and a crash of this
// instance must not make them look expired at the next start. Records of
// the earlier single-server form are taken over first (meta's
// AdoptLegacyClientRecords): they are this server's if it is the first
// to start since they were written.
func (s *Server) loadRecords(ctx context.Context) (map[string]string, error) {
	adopted, err := s.fs.Meta().AdoptLegacyClientRecords(ctx, s.identity)
	if err != nil {
		return nil, err
	}
	if adopted > 0 {
		s.log.Info("NFS client records of the earlier single-server form are taken over by this server", "records", adopted)
	}
	raw, err := s.fs.Meta().ClientRecords(ctx, s.identity)
	if err != nil {
		return nil, err
	}
	// alive is the latest moment the previous instance is known to have
	// run: its stop, or the latest renewal it stored.
	alive := decodeStop(raw[stopRecord])
	_, stopped := raw[stopRecord]
	delete(raw, stopRecord)
	recs := map[string]clientRecord{}
	for owner, v := range raw {
		r := decodeClientRecord(v)
		recs[owner] = r
		if r.renewed.After(alive) {
			alive = r.renewed
		}
	}
	now := time.Now()
	kept, put := map[string]string{}, map[string][]byte{}
	var dropped []string
	for owner, r := range recs {
		// The lease ran out before alive, even allowing for the lag of
		// the stored renewal and for the reaper's tick, at which a lease
		// past its time ends.
		if !r.renewed.IsZero() && alive.Sub(r.renewed) > s.expireAfter()+s.renewLag()+2*s.reapTick() {
			dropped = append(dropped, owner)
			continue
		}
		kept[owner] = r.principal
		put[owner] = encodeClientRecord(clientRecord{principal: r.principal, renewed: now})
	}
	del := slices.Clone(dropped)
	if stopped {
		// Read once: the records kept carry this start from now on.
		del = append(del, stopRecord)
	}
	if len(put) > 0 || len(del) > 0 {
		if err := s.fs.Meta().ChangeClientRecords(ctx, s.identity, put, del); err != nil {
			return nil, err
		}
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		s.log.Info("NFS clients whose lease ran out before the server stopped have nothing to reclaim; their records are dropped",
			"clients", fmt.Sprintf("%q", dropped))
	}
	return kept, nil
}

// keepRecords brings the client records up to date with the clients
// (see clientRecord): it removes the records of clients that hold no open
// and are granted none, and stores renewals more than renewStep newer
// than those recorded. Records the previous instance left for clients
// that came back stay during the grace period, with their renewals kept
// up: such a client may not have reclaimed everything yet.
func (s *Server) keepRecords() {
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	t := s.state
	put, del := map[string][]byte{}, []string(nil)
	type renewal struct {
		cl  *client
		was time.Time
	}
	var renewed []renewal
	t.mu.Lock()
	for _, cl := range t.clients {
		own := cl.recorded
		if !own && !t.heldOnBehalf(cl) {
			continue
		}
		if own && len(cl.opens) == 0 && cl.granting == 0 && !t.heldOnBehalf(cl) {
			cl.recorded = false
			del = append(del, cl.key)
			continue
		}
		if cl.lastRenew.Sub(cl.recordedRenew) > s.renewStep() {
			renewed = append(renewed, renewal{cl, cl.recordedRenew})
			cl.recordedRenew = cl.lastRenew
			put[cl.key] = encodeClientRecord(clientRecord{principal: cl.principal, renewed: cl.lastRenew})
		}
	}
	t.mu.Unlock()
	if len(put) == 0 && len(del) == 0 {
		return
	}
	if err := s.fs.Meta().ChangeClientRecords(context.Background(), s.identity, put, del); err != nil {
		// A record not removed only makes a restart more careful; a
		// renewal not stored must be tried again.
		s.log.Error("updating NFS client records in stable storage", "err", err)
		t.mu.Lock()
		for _, r := range renewed {
			r.cl.recordedRenew = r.was
		}
		t.mu.Unlock()
	}
}

// closeRecords leaves, at a clean stop, the records of the clients that
// hold state now, with their exact renewals, and a stop record; the
// records of clients that hold nothing, or whose lease has run out, go:
// the next instance waits for the others alone. It returns the owners
// whose records it left.
func (s *Server) closeRecords() map[string]bool {
	s.recordMu.Lock()
	defer s.recordMu.Unlock()
	t := s.state
	now := time.Now()
	put, del := map[string][]byte{stopRecord: encodeStop(now)}, []string(nil)
	var holding []string
	t.mu.Lock()
	for _, cl := range t.clients {
		prev := t.heldOnBehalf(cl)
		if !cl.recorded && !prev {
			continue
		}
		idle := len(cl.opens) == 0 && cl.granting == 0 && !prev
		if idle || now.Sub(cl.lastRenew) > s.expireAfter() {
			cl.recorded = false
			del = append(del, cl.key)
			continue
		}
		holding = append(holding, cl.key)
		put[cl.key] = encodeClientRecord(clientRecord{principal: cl.principal, renewed: cl.lastRenew})
	}
	t.mu.Unlock()
	if err := s.fs.Meta().ChangeClientRecords(context.Background(), s.identity, put, del); err != nil {
		s.log.Error("updating NFS client records in stable storage at the stop", "err", err)
		return nil
	}
	kept := map[string]bool{}
	if len(holding) > 0 {
		slices.Sort(holding)
		s.log.Info("NFS clients that hold state may reclaim it from the next server on this file system",
			"clients", fmt.Sprintf("%q", holding))
		for _, k := range holding {
			kept[k] = true
		}
	}
	return kept
}
