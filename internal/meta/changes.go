package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"bucketfs/internal/kv"
)

// The change log lets several servers that share one kv store drop what
// they cache of the namespace when another server changes it: the FUSE
// kernel's attribute, name and page caches, and anything a front end keeps.
//
// # Model
//
// With Options.ChangeLog set, every transaction of this Store that writes
// an inode record, a directory entry, a file block or an extended
// attribute also writes one change record, in the same transaction:
//
//	C<unix ns><server><seq>     the inodes and directory entries it changed
//
// where the time is this server's clock when the transaction ran, server
// is Options.Server and seq counts this Store's records. No two servers
// write one key, and no transaction reads a record, so the log adds no
// conflict between servers (the rule of no row every operation takes).
//
// Each server follows the log (FollowChanges): every interval it scans the
// records stamped from the start of its previous poll minus
// Options.ChangeWindow onwards (by its own clock), skips its own and those
// it has already delivered, and hands the rest to its callback. The window
// covers the two ways a record can be stamped before a poll that did not
// see it: its transaction committed a little after it stamped the record,
// and the servers' clocks differ. Invariant: a change committed by
// another server is delivered at the first poll after its commit, provided
// its stamp is at most ChangeWindow behind this server's clock at that
// commit (clock skew plus commit delay under the window: 2 s by default,
// where NTP keeps skew in milliseconds). Beyond that bound a change can be
// missed, and what a front end caches then expires by its own timeouts (the
// FUSE attribute and entry timeouts, 1 s by default) or, for pages kept
// across opens, at the next change of the file's size or mtime; the
// namespace itself never answers wrong, since every server reads it from
// the shared store.
//
// Records older than ChangeRetention are deleted (TrimChanges); a follower
// that falls further behind than that (a server paused for minutes) cannot
// know what it missed and tells its callback to drop everything
// (Changes.All).
const pChange = 'C'

// Changes is what one change record (or a batch of them) names.
type Changes struct {
	// Inodes whose attributes, data or xattrs changed.
	Inodes []Ino
	// Entries (parent, name) that were added, removed or replaced.
	Entries []EntryName
	// All means the follower fell behind the log's retention: everything
	// it caches may be stale.
	All bool
}

// EntryName is a name in a directory.
type EntryName struct {
	Parent Ino
	Name   string
}

// DefaultChangeWindow and DefaultChangeRetention are the change log's
// defaults (see Options.ChangeWindow).
const (
	DefaultChangeWindow    = 2 * time.Second
	DefaultChangeRetention = 5 * time.Minute
)

// changeLog is the state of this Store's side of the log.
type changeLog struct {
	server uint64
	mu     sync.Mutex
	seq    uint64
}

func (c *changeLog) next() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.seq
}

// loggingStore is the kv.Store the namespace writes through when the
// change log is on: each Update gains a change record for what it wrote.
type loggingStore struct {
	kv.Store
	s *Store
}

func (l loggingStore) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return l.UpdateSized(ctx, 0, fn)
}

func (l loggingStore) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	return l.Store.UpdateSized(ctx, size, func(tx kv.Txn) error {
		// A fresh record per run of fn: a retried transaction logs
		// what its last run wrote.
		lt := &loggingTxn{Txn: tx}
		if err := fn(lt); err != nil {
			return err
		}
		return lt.flush(l.s)
	})
}

// loggingTxn notes the namespace keys a transaction writes.
type loggingTxn struct {
	kv.Txn
	inodes  map[Ino]struct{}
	entries map[EntryName]struct{}
}

func (t *loggingTxn) note(key []byte) {
	if len(key) < 9 {
		return
	}
	switch key[0] {
	case pInode, pXattr, 'b': // 'b': a block of file data (package tier)
		if t.inodes == nil {
			t.inodes = map[Ino]struct{}{}
		}
		t.inodes[Ino(kv.Uint64(key[1:9]))] = struct{}{}
	case pEntry:
		if t.entries == nil {
			t.entries = map[EntryName]struct{}{}
		}
		t.entries[EntryName{Parent: Ino(kv.Uint64(key[1:9])), Name: string(key[9:])}] = struct{}{}
	}
}

func (t *loggingTxn) Set(key, value []byte) error {
	t.note(key)
	return t.Txn.Set(key, value)
}

func (t *loggingTxn) SetWith(key []byte, n int, fill func([]byte)) error {
	t.note(key)
	return t.Txn.SetWith(key, n, fill)
}

func (t *loggingTxn) Delete(key []byte) error {
	t.note(key)
	return t.Txn.Delete(key)
}

// DeleteRange notes the inode of a range within one inode's keys (its
// blocks or xattrs); wider ranges are not the namespace's.
func (t *loggingTxn) DeleteRange(lower, upper []byte) error {
	t.note(lower)
	return t.Txn.DeleteRange(lower, upper)
}

func (t *loggingTxn) flush(s *Store) error {
	if len(t.inodes) == 0 && len(t.entries) == 0 {
		return nil
	}
	key := changeKey(s.now().UnixNano(), s.changes.server, s.changes.next())
	v := binary.AppendUvarint(nil, uint64(len(t.inodes)))
	for ino := range t.inodes {
		v = binary.AppendUvarint(v, uint64(ino))
	}
	v = binary.AppendUvarint(v, uint64(len(t.entries)))
	for e := range t.entries {
		v = binary.AppendUvarint(v, uint64(e.Parent))
		v = binary.AppendUvarint(v, uint64(len(e.Name)))
		v = append(v, e.Name...)
	}
	return t.Txn.Set(key, v)
}

func changeKey(unixNano int64, server, seq uint64) []byte {
	k := kv.AppendUint64([]byte{pChange}, uint64(max(unixNano, 0)))
	k = kv.AppendUint64(k, server)
	return kv.AppendUint64(k, seq)
}

func decodeChanges(v []byte, into *Changes) error {
	bad := fmt.Errorf("change record: %w", errCorrupt)
	n, k := binary.Uvarint(v)
	if k <= 0 {
		return bad
	}
	v = v[k:]
	for range n {
		ino, k := binary.Uvarint(v)
		if k <= 0 {
			return bad
		}
		into.Inodes = append(into.Inodes, Ino(ino))
		v = v[k:]
	}
	n, k = binary.Uvarint(v)
	if k <= 0 {
		return bad
	}
	v = v[k:]
	for range n {
		parent, k := binary.Uvarint(v)
		if k <= 0 {
			return bad
		}
		v = v[k:]
		l, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < l {
			return bad
		}
		v = v[k:]
		into.Entries = append(into.Entries, EntryName{Parent: Ino(parent), Name: string(v[:l])})
		v = v[l:]
	}
	return nil
}

// ChangeFollower reads the change log from one server's point of view.
type ChangeFollower struct {
	s      *Store
	window time.Duration
	// cursor is when the previous poll started (this server's clock);
	// seen holds the keys delivered within the window behind it.
	cursor int64
	seen   map[string]int64
}

// NewChangeFollower starts following the log at the current time: changes
// committed before it are not delivered (a server starting has nothing
// cached).
func (s *Store) NewChangeFollower() *ChangeFollower {
	return &ChangeFollower{s: s, window: s.changeWindow, cursor: s.now().UnixNano(), seen: map[string]int64{}}
}

// Poll delivers, in one Changes, what other servers changed since the last
// Poll (see the change log's invariant above).
func (f *ChangeFollower) Poll(ctx context.Context) (Changes, error) {
	var out Changes
	start := f.s.now().UnixNano()
	from := f.cursor - int64(f.window)
	var fresh []string
	err := f.s.kv.View(ctx, func(r kv.Reader) error {
		fresh, out = fresh[:0], Changes{}
		lower := kv.AppendUint64([]byte{pChange}, uint64(max(from, 0)))
		return r.Scan(lower, kv.PrefixEnd([]byte{pChange}), func(k, v []byte) bool {
			if len(k) != 25 {
				return true
			}
			if kv.Uint64(k[9:17]) == f.s.changes.server {
				return true
			}
			if _, ok := f.seen[string(k)]; ok {
				return true
			}
			if err := decodeChanges(v, &out); err != nil {
				out.All = true
			}
			fresh = append(fresh, string(k))
			return true
		})
	})
	if err != nil {
		return Changes{}, err
	}
	if behind, err := f.behindRetention(ctx); err != nil {
		return Changes{}, err
	} else if behind {
		out.All = true
	}
	for _, k := range fresh {
		f.seen[k] = int64(kv.Uint64([]byte(k)[1:9]))
	}
	f.cursor = max(f.cursor, start)
	for k, at := range f.seen {
		if at < f.cursor-int64(f.window) {
			delete(f.seen, k)
		}
	}
	return out, nil
}

// behindRetention tells whether records this follower has not read may
// have been trimmed: the trim mark (the time below which records were
// deleted) is past the start of its window.
func (f *ChangeFollower) behindRetention(ctx context.Context) (bool, error) {
	var mark int64
	err := f.s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyChangesTrimmed)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil || len(v) != 8 {
			return err
		}
		mark = int64(kv.Uint64(v))
		return nil
	})
	return mark > f.cursor-int64(f.window), err
}

var keyChangesTrimmed = []byte("c/changes-trimmed")

// TrimChanges deletes the change records older than the retention. One
// server (the sync leader) calls it now and then.
func (s *Store) TrimChanges(ctx context.Context) error {
	before := s.now().Add(-s.changeRetention).UnixNano()
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		if err := tx.DeleteRange([]byte{pChange}, kv.AppendUint64([]byte{pChange}, uint64(max(before, 0)))); err != nil {
			return err
		}
		return tx.Set(keyChangesTrimmed, kv.AppendUint64(nil, uint64(max(before, 0))))
	})
}

// FollowChanges polls the log every interval until ctx ends, calling fn
// with what other servers changed. Errors of a poll are passed to onErr
// (nil: ignored) and the next poll tries again.
func (s *Store) FollowChanges(ctx context.Context, interval time.Duration, fn func(Changes), onErr func(error)) {
	f := s.NewChangeFollower()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, err := f.Poll(ctx)
		if err != nil {
			if onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
			continue
		}
		if c.All || len(c.Inodes) > 0 || len(c.Entries) > 0 {
			fn(c)
		}
	}
}
