package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"bucketfs/internal/kv"
	"bucketfs/internal/locks"
)

// Locks and opens of servers sharing the store.
//
// Each server that serves the file system with others publishes here the
// locks its clients hold and the inodes it holds open, so that the others
// honour them:
//
//	L<ino><server>   every lock server holds on ino (locks.Held, encoded)
//	O<ino><server>   server holds ino open (empty value)
//	S<ino><server>   the NFS share reservations of server's opens of ino:
//	                 the union of their access bits, then of their deny
//	                 bits (one byte each)
//
// A server writes only keys that end in its own id, so two servers never
// write one key. A record of a server that alive reports dead is ignored,
// and deleted by the first transaction here that finds it so. A record of
// an earlier run of this server (Options.EarlierRun) that is still alive
// is ignored here and left alone: the other servers honour it until they
// find that run dead, and this one, which has taken over that run's
// clients (they reclaim their state through it), does not hold their old
// locks, opens and share reservations against them.
//
// The alive functions these methods take are called inside kv
// transactions: they must answer from memory, without waiting.
//
// A dead server's lock record deleted by another server leaves a mark for
// the dead server's NFS identity, when it had one; a later run of the same
// NFS server leaves such records alone:
//
//	I<server>         the NFS identity of run server of an NFS server
//	                  (NameNFSRun, written at its start)
//	B<ino><identity>  the locks of a dead run of NFS server identity on
//	                  ino were dropped by another server (empty value)
//
// The transaction that drops them is the one that may grant a lock that
// conflicts with them, so a restarted NFS server that finds the mark
// cannot tell whether one was granted, and perhaps released, since its
// earlier run died: its clients' lock reclaims on ino are refused
// (package nfs4's grace.go). When its grace period ends (or at its start,
// with none) the restarted server deletes its earlier runs' remaining
// lock records and names itself (DropEarlierRunLocks), then its marks
// (ForgetDroppedLocks), so that no mark made later speaks of a run whose
// clients have had their grace period. The I record outlives the
// server's registry record, so a restart however late finds the marks.

const (
	pLocks   = 'P'
	pOpen    = 'O'
	pShares  = 'S'
	pDropped = 'B'
	pRunOf   = 'I'
)

func serverInoKey(p byte, ino Ino, server uint64) []byte {
	return kv.AppendUint64(kv.AppendUint64([]byte{p}, uint64(ino)), server)
}

func inoPrefix(p byte, ino Ino) []byte { return kv.AppendUint64([]byte{p}, uint64(ino)) }

// heldSize is the encoded size of one lock: flock bit and kind, start,
// end, owner client and id, pid.
const heldSize = 1 + 8 + 8 + 8 + 8 + 4

const flockBit = 0x80

func encodeHeld(h locks.Held) []byte {
	b := make([]byte, 0, heldSize*(len(h.Records)+len(h.Flocks)))
	put := func(l locks.Lock, flag byte) {
		b = append(b, byte(l.Kind)|flag)
		b = kv.AppendUint64(b, l.Start)
		b = kv.AppendUint64(b, l.End)
		b = kv.AppendUint64(b, l.Owner.Client)
		b = kv.AppendUint64(b, l.Owner.ID)
		b = append(b, byte(l.Pid>>24), byte(l.Pid>>16), byte(l.Pid>>8), byte(l.Pid))
	}
	for _, l := range h.Records {
		put(l, 0)
	}
	for _, l := range h.Flocks {
		put(l, flockBit)
	}
	return b
}

// decodeHeld appends the locks v encodes to h.
func decodeHeld(h *locks.Held, v []byte) error {
	if len(v)%heldSize != 0 {
		return fmt.Errorf("meta: corrupt lock record of %d bytes: %w", len(v), syscall.EIO)
	}
	for ; len(v) > 0; v = v[heldSize:] {
		l := locks.Lock{Kind: locks.Kind(v[0] &^ flockBit), Start: kv.Uint64(v[1:]), End: kv.Uint64(v[9:]),
			Owner: locks.Owner{Client: kv.Uint64(v[17:]), ID: kv.Uint64(v[25:])},
			Pid:   uint32(v[33])<<24 | uint32(v[34])<<16 | uint32(v[35])<<8 | uint32(v[36])}
		if v[0]&flockBit != 0 {
			h.Flocks = append(h.Flocks, l)
		} else {
			h.Records = append(h.Records, l)
		}
	}
	return nil
}

// othersOnIno calls fn with the server and value of every key under prefix
// p for ino that belongs to a live server other than self and its earlier
// runs, and deletes, when tx is not nil, those of dead servers.
func (s *Store) othersOnIno(r kv.Reader, tx kv.Txn, p byte, ino Ino, self uint64, alive func(uint64) bool,
	fn func(server uint64, v []byte) error) error {
	lo := inoPrefix(p, ino)
	var dead [][]byte
	var ferr error
	err := r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
		if len(k) != len(lo)+8 {
			return true
		}
		server := kv.Uint64(k[len(lo):])
		switch {
		case server == self:
		case s.earlierRun(server) && alive(server):
		case !alive(server):
			dead = append(dead, append([]byte(nil), k...))
		default:
			ferr = fn(server, v)
		}
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	if err != nil || tx == nil {
		return err
	}
	for _, k := range dead {
		if p != pLocks {
			if err := tx.Delete(k); err != nil {
				return err
			}
			continue
		}
		identity, err := nfsIdentityOf(tx, kv.Uint64(k[len(lo):]))
		if err != nil {
			return err
		}
		mine, err := nfsIdentityOf(tx, self)
		if err != nil {
			return err
		}
		if identity != 0 && identity == mine {
			// An earlier run of this NFS server: its locks stay until
			// the grace period of this run ends (DropEarlierRunLocks),
			// so that another server that drops them meanwhile leaves
			// the mark this run's reclaims look for.
			continue
		}
		if err := tx.Delete(k); err != nil {
			return err
		}
		if identity == 0 {
			continue // no NFS server's
		}
		if err := tx.Set(kv.AppendUint64(kv.AppendUint64([]byte{pDropped}, uint64(ino)), identity), nil); err != nil {
			return err
		}
	}
	return nil
}

func runOfKey(server uint64) []byte { return kv.AppendUint64([]byte{pRunOf}, server) }

// nfsIdentityOf returns the NFS identity run server named (NameNFSRun),
// 0 if none.
func nfsIdentityOf(r kv.Reader, server uint64) (uint64, error) {
	v, err := r.Get(runOfKey(server))
	if errors.Is(err, kv.ErrNotFound) || (err == nil && len(v) != 8) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return kv.Uint64(v), nil
}

// NameNFSRun records that this run (Options.Server) is a run of NFS
// server identity. Call it before the run holds a lock.
func (s *Store) NameNFSRun(ctx context.Context, identity uint64) error {
	server := s.changes.server
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		return tx.Set(runOfKey(server), kv.AppendUint64(nil, identity))
	})
	if err != nil {
		return fmt.Errorf("name run %016x of NFS server %016x: %w", server, identity, err)
	}
	return nil
}

// LocksDropped reports whether another server dropped the locks of a dead
// run of NFS server identity on ino (the mark above).
func (s *Store) LocksDropped(ctx context.Context, ino Ino, identity uint64) (bool, error) {
	var found bool
	err := s.kv.View(ctx, func(r kv.Reader) error {
		_, err := r.Get(kv.AppendUint64(kv.AppendUint64([]byte{pDropped}, uint64(ino)), identity))
		found = err == nil
		if errors.Is(err, kv.ErrNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("dropped locks on inode %d: %w", ino, err)
	}
	return found, nil
}

// DropEarlierRunLocks deletes the lock records of the earlier runs of NFS
// server identity (those NameNFSRun named so, other than this run,
// Options.Server, that are earlier runs by Options.EarlierRun or not
// alive: a live run with this identity is a copy's, whose locks stand)
// and their names, without marks: their clients' grace period is over.
func (s *Store) DropEarlierRunLocks(ctx context.Context, identity uint64, alive func(uint64) bool) error {
	self := s.changes.server
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		earlier := map[uint64]bool{}
		var del [][]byte
		lo := []byte{pRunOf}
		err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			server := kv.Uint64(k[1:])
			if len(k) == 9 && len(v) == 8 && kv.Uint64(v) == identity && server != self &&
				(s.earlierRun(server) || !alive(server)) {
				earlier[server] = true
				del = append(del, append([]byte(nil), k...))
			}
			return true
		})
		if err != nil || len(earlier) == 0 {
			return err
		}
		lo = []byte{pLocks}
		err = tx.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
			if len(k) == 17 && earlier[kv.Uint64(k[9:])] {
				del = append(del, append([]byte(nil), k...))
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, k := range del {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drop the locks of the earlier runs of NFS server %016x: %w", identity, err)
	}
	return nil
}

// ForgetDroppedLocks deletes the marks of NFS server identity.
func (s *Store) ForgetDroppedLocks(ctx context.Context, identity uint64) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		var marks [][]byte
		lo := []byte{pDropped}
		err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
			if len(k) == 17 && kv.Uint64(k[9:]) == identity {
				marks = append(marks, append([]byte(nil), k...))
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, k := range marks {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget the dropped locks of NFS server %016x: %w", identity, err)
	}
	return nil
}

// ShareLocks changes self's published locks on ino to held, in one
// transaction that first reads every other server's locks on ino: if
// blocked (nil: never) reports true of the live ones, it writes nothing
// of self's and returns false. Records of dead servers are deleted either
// way. An empty held deletes self's record.
func (s *Store) ShareLocks(ctx context.Context, ino Ino, self uint64, alive func(uint64) bool,
	held locks.Held, blocked func(theirs locks.Held) bool) (bool, error) {
	var theirs locks.Held
	var value []byte
	if !held.Empty() {
		value = encodeHeld(held)
	}
	ok, err := s.shareOnIno(ctx, pLocks, ino, self, alive, value,
		func() { theirs = locks.Held{} },
		func(v []byte) error { return decodeHeld(&theirs, v) },
		func() bool { return blocked != nil && blocked(theirs) })
	if err != nil {
		return false, fmt.Errorf("share the locks on inode %d: %w", ino, err)
	}
	return ok, nil
}

// ShareReservations changes self's published NFS share reservations on
// ino to access and deny (the unions over its opens), as ShareLocks does
// locks: blocked (nil: never) is asked of the union of the live other
// servers' reservations first, and if it reports true nothing of self's
// is written. Both zero deletes self's record.
func (s *Store) ShareReservations(ctx context.Context, ino Ino, self uint64, alive func(uint64) bool,
	access, deny uint8, blocked func(access, deny uint8) bool) (bool, error) {
	var theirAccess, theirDeny uint8
	var value []byte
	if access|deny != 0 {
		value = []byte{access, deny}
	}
	ok, err := s.shareOnIno(ctx, pShares, ino, self, alive, value,
		func() { theirAccess, theirDeny = 0, 0 },
		func(v []byte) error {
			if len(v) != 2 {
				return fmt.Errorf("meta: corrupt share record of %d bytes: %w", len(v), syscall.EIO)
			}
			theirAccess |= v[0]
			theirDeny |= v[1]
			return nil
		},
		func() bool { return blocked != nil && blocked(theirAccess, theirDeny) })
	if err != nil {
		return false, fmt.Errorf("share the reservations on inode %d: %w", ino, err)
	}
	return ok, nil
}

// OthersReservations returns the union of the live other servers' share
// reservations on ino.
func (s *Store) OthersReservations(ctx context.Context, ino Ino, self uint64, alive func(uint64) bool) (access, deny uint8, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		access, deny = 0, 0
		return s.othersOnIno(r, nil, pShares, ino, self, alive, func(_ uint64, v []byte) error {
			if len(v) == 2 {
				access |= v[0]
				deny |= v[1]
			}
			return nil
		})
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read the other servers' share reservations on inode %d: %w", ino, err)
	}
	return access, deny, nil
}

// shareOnIno is one transaction that reads the records of the other live
// servers under p for ino (reset, then fold for each), deletes those of
// dead servers and, unless blocked then reports true, writes value as
// self's record (nil: deletes it). It reports whether it wrote.
func (s *Store) shareOnIno(ctx context.Context, p byte, ino Ino, self uint64, alive func(uint64) bool, value []byte,
	reset func(), fold func(v []byte) error, blocked func() bool) (bool, error) {
	var ok bool
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		ok = false // fn may run again
		reset()
		err := s.othersOnIno(tx, tx, p, ino, self, alive, func(_ uint64, v []byte) error { return fold(v) })
		if err != nil {
			return err
		}
		// The check and the write are one transaction, and the scan above
		// read the whole range p<ino>, the key this writes included. Two
		// servers taking conflicting locks (or reservations) on ino at
		// once each read the key the other writes: under SERIALIZABLE
		// (PostgreSQL's SSI, or Pebble's single writer) they cannot both
		// commit, so the second to commit either fails and runs again,
		// seeing the first's record, or was serialized after it and saw
		// it here. At no time are two conflicting records of two live
		// servers published.
		if blocked() {
			return nil
		}
		ok = true
		key := serverInoKey(p, ino, self)
		if value == nil {
			return tx.Delete(key)
		}
		return tx.Set(key, value)
	})
	return ok, err
}

// OthersLocks returns the locks the live servers other than self publish
// on ino (for F_GETLK and NFS LOCKT).
func (s *Store) OthersLocks(ctx context.Context, ino Ino, self uint64, alive func(uint64) bool) (locks.Held, error) {
	var theirs locks.Held
	err := s.kv.View(ctx, func(r kv.Reader) error {
		theirs = locks.Held{}
		return s.othersOnIno(r, nil, pLocks, ino, self, alive, func(_ uint64, v []byte) error {
			return decodeHeld(&theirs, v)
		})
	})
	if err != nil {
		return locks.Held{}, fmt.Errorf("read the other servers' locks on inode %d: %w", ino, err)
	}
	return theirs, nil
}

// MarkOpen records whether server holds ino open.
func (s *Store) MarkOpen(ctx context.Context, ino Ino, server uint64, open bool) error {
	key := serverInoKey(pOpen, ino, server)
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		if open {
			return tx.Set(key, nil)
		}
		return tx.Delete(key)
	})
	if err != nil {
		return fmt.Errorf("record inode %d open=%v: %w", ino, open, err)
	}
	return nil
}

// MarkClosed deletes server's open records of inos, in one transaction:
// the last closes of several inodes, recorded together.
func (s *Store) MarkClosed(ctx context.Context, inos []Ino, server uint64) error {
	if len(inos) == 0 {
		return nil
	}
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for _, ino := range inos {
			if err := tx.Delete(serverInoKey(pOpen, ino, server)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the last close of %d inodes: %w", len(inos), err)
	}
	return nil
}

// errFound stops a scan at the first record it needs.
var errFound = errors.New("found")

// OpenElsewhere reports whether a live server other than self holds ino
// open. It deletes the open records of dead servers it finds.
func (s *Store) OpenElsewhere(ctx context.Context, ino Ino, self uint64, alive func(uint64) bool) (bool, error) {
	var open, dead bool
	everyone := func(uint64) bool { return true }
	// Most calls find nothing: read first, delete only if there is
	// something dead to delete.
	err := s.kv.View(ctx, func(r kv.Reader) error {
		open, dead = false, false
		err := s.othersOnIno(r, nil, pOpen, ino, self, everyone, func(server uint64, _ []byte) error {
			if s.earlierRun(server) && alive(server) {
				return nil
			}
			if !alive(server) {
				dead = true
				return nil
			}
			open = true
			return errFound
		})
		if errors.Is(err, errFound) {
			err = nil
		}
		return err
	})
	if err == nil && !open && dead {
		err = s.kv.Update(ctx, func(tx kv.Txn) error {
			return s.othersOnIno(tx, tx, pOpen, ino, self, alive, func(uint64, []byte) error { return nil })
		})
	}
	if err != nil {
		return false, fmt.Errorf("ask whether another server holds inode %d open: %w", ino, err)
	}
	return open, nil
}

// RecordHolders returns the servers that have lock, open or share records
// in the store.
func (s *Store) RecordHolders(ctx context.Context) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		clear(out)
		for _, p := range []byte{pLocks, pOpen, pShares} {
			lo := []byte{p}
			err := r.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
				if len(k) == 17 {
					out[kv.Uint64(k[9:])] = true
				}
				return true
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("servers with lock, open or share records: %w", err)
	}
	return out, nil
}

// DropServerState deletes every lock, open and share record of server: for a
// server that starts again under the id it had, whose clients' locks and
// opens went with its last run.
func (s *Store) DropServerState(ctx context.Context, server uint64) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for _, p := range []byte{pLocks, pOpen, pShares} {
			var mine [][]byte
			lo := []byte{p}
			err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
				if len(k) == 17 && kv.Uint64(k[9:]) == server {
					mine = append(mine, append([]byte(nil), k...))
				}
				return true
			})
			if err != nil {
				return err
			}
			for _, k := range mine {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drop the locks and opens of server %d: %w", server, err)
	}
	return nil
}

// HoldsLocks reports whether server has a lock record (P<ino><server>)
// left in the store.
func (s *Store) HoldsLocks(ctx context.Context, server uint64) (bool, error) {
	var found bool
	err := s.kv.View(ctx, func(r kv.Reader) error {
		found = false
		lo := []byte{pLocks}
		return r.Scan(lo, kv.PrefixEnd(lo), func(k, _ []byte) bool {
			found = len(k) == 17 && kv.Uint64(k[9:]) == server
			return !found
		})
	})
	if err != nil {
		return false, fmt.Errorf("locks of server %d: %w", server, err)
	}
	return found, nil
}

// earlierRun reports whether server is an earlier run of this one
// (Options.EarlierRun).
func (s *Store) earlierRun(server uint64) bool { return s.earlier != nil && s.earlier(server) }
