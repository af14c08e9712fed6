package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"bucketfs/internal/kv"
)

// The server registry. Every running server of the file system keeps one
// record, under an id it draws at random at each start, and renews its
// heartbeat every few seconds; it removes the record when it stops
// cleanly. A server whose record has not changed for the lease time, as
// another server sees it on its own clock, is dead, and its record is
// removed by whoever sees it so (a crash leaves it behind):
//
//	r<server id>   a server's record (JSON: Server)
//
// A flush asked of a server that does not hold the sync lease is carried
// out by the holder: the asker adds one to the number of flushes asked,
// and waits until the number done reaches it (AskFlush, FlushesDone):
//
//	c/flush/asked  flushes asked (uint64)
//	c/flush/done   flushes done (JSON: FlushDone)
//
// The keys a server's webhook is told of while it does not hold the lease
// are handed to the holder the same way (AddEventKeys, TakeEventKeys):
//
//	w<object key>  a key named by an event, to revalidate (empty value)
//
// and so are the directories used through it, which the holder's poller
// re-lists (PublishActiveDirs, ActiveDirs):
//
//	a<dir ino>     when a server last reported the directory used (unix ns, its clock)

const (
	pServer    = 'r'
	pEventKey  = 'w'
	pActiveDir = 'a'
)

var (
	keyFlushAsked = []byte("c/flush/asked")
	keyFlushDone  = []byte("c/flush/done")
)

// Server is one running server's record.
type Server struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Addrs are the addresses it serves, by what ("nfs", "metrics").
	Addrs map[string]string `json:"addrs,omitempty"`
	// NFS is the identity of its NFS server (16 hex digits), the same
	// at every start of the server, if it serves NFS: the other NFS
	// servers read it to know whose client records are still in use
	// (package nfs4's identity.go).
	NFS     string    `json:"nfs,omitempty"`
	Started time.Time `json:"started"`
	// Heartbeat is the server's own clock at its last renewal, and Beat
	// counts renewals: others judge liveness by Beat changing.
	Heartbeat time.Time `json:"heartbeat"`
	Beat      uint64    `json:"beat"`
	// ReadOnly servers export nothing: they leave the sync lease to a
	// writable server while one is alive.
	ReadOnly bool `json:"read_only,omitempty"`
	// Settings sums up the settings every server of the file system must
	// share (owner and modes of what carries none, export delay, lease
	// time), as "name=value" pairs; a server starting with other ones is
	// refused while this one lives.
	Settings string `json:"settings,omitempty"`
}

func serverKey(id string) []byte { return append([]byte{pServer}, id...) }

// Heartbeat writes srv's record with the next beat and the heartbeat time
// now, and returns the record written.
func (s *Store) Heartbeat(ctx context.Context, srv Server) (Server, error) {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(serverKey(srv.ID))
		switch {
		case errors.Is(err, kv.ErrNotFound):
			srv.Beat = 1
		case err != nil:
			return err
		default:
			var old Server
			if err := json.Unmarshal(v, &old); err != nil {
				return fmt.Errorf("server %s: %w", srv.ID, err)
			}
			srv.Beat = old.Beat + 1
		}
		srv.Heartbeat = s.now()
		b, err := json.Marshal(srv)
		if err != nil {
			return err
		}
		return tx.Set(serverKey(srv.ID), b)
	})
	if err != nil {
		return Server{}, fmt.Errorf("heartbeat: %w", err)
	}
	return srv, nil
}

// Servers returns every server record, by id order.
func (s *Store) Servers(ctx context.Context) (out []Server, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		out = out[:0]
		lo := []byte{pServer}
		var bad error
		err := r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			var srv Server
			if bad = json.Unmarshal(v, &srv); bad != nil {
				bad = fmt.Errorf("server %s: %w", k[1:], bad)
				return false
			}
			out = append(out, srv)
			return true
		})
		return errors.Join(err, bad)
	})
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	return out, nil
}

// RemoveServer deletes the record of server id, if it is still at beat
// (0: whatever its beat): a record that changed meanwhile is alive.
func (s *Store) RemoveServer(ctx context.Context, id string, beat uint64) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		if beat != 0 {
			v, err := tx.Get(serverKey(id))
			if errors.Is(err, kv.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			var cur Server
			if err := json.Unmarshal(v, &cur); err != nil || cur.Beat != beat {
				return err
			}
		}
		return tx.Delete(serverKey(id))
	})
	if err != nil {
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	return nil
}

// FlushDone is the record of the flushes the lease holder has carried
// out for other servers.
type FlushDone struct {
	// Done is the number of the last flush asked that the holder has
	// carried out: every flush asked up to it.
	Done uint64 `json:"done"`
	// Err is that flush's failure ("" if it succeeded).
	Err string `json:"err,omitempty"`
}

// AskFlush records a flush asked of the lease holder and returns its
// number: it is done once FlushesDone reaches it.
func (s *Store) AskFlush(ctx context.Context) (n uint64, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(keyFlushAsked)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		n = 1
		if len(v) == 8 {
			n = kv.Uint64(v) + 1
		}
		return tx.Set(keyFlushAsked, kv.AppendUint64(nil, n))
	})
	if err != nil {
		return 0, fmt.Errorf("ask for a flush: %w", err)
	}
	return n, nil
}

// FlushesAsked returns the number of the last flush asked, and the record
// of those done.
func (s *Store) FlushesAsked(ctx context.Context) (asked uint64, done FlushDone, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyFlushAsked)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		if len(v) == 8 {
			asked = kv.Uint64(v)
		}
		v, err = r.Get(keyFlushDone)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(v, &done)
	})
	if err != nil {
		return 0, FlushDone{}, fmt.Errorf("flushes asked: %w", err)
	}
	return asked, done, nil
}

// FlushesDone records that the flushes asked up to d.Done were carried
// out (with d.Err, if the flush failed). Run under the holder's fence.
func (s *Store) FlushesDone(ctx context.Context, d FlushDone) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	err = s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Set(keyFlushDone, b) })
	if err != nil {
		return fmt.Errorf("record flush: %w", err)
	}
	return nil
}

// AddEventKeys records keys named by change events for the lease holder
// to revalidate. A key recorded already is recorded once.
func (s *Store) AddEventKeys(ctx context.Context, keys []string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for _, k := range keys {
			if err := tx.Set(append([]byte{pEventKey}, k...), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hand events over: %w", err)
	}
	return nil
}

// TakeEventKeys removes and returns up to limit keys AddEventKeys
// recorded (run under the holder's fence).
func (s *Store) TakeEventKeys(ctx context.Context, limit int) (keys []string, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		keys = keys[:0]
		lo := []byte{pEventKey}
		var raw [][]byte
		if err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			raw = append(raw, append([]byte(nil), k...))
			return len(raw) < limit
		}); err != nil {
			return err
		}
		for _, k := range raw {
			keys = append(keys, string(k[1:]))
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("take handed-over events: %w", err)
	}
	return keys, nil
}

func activeDirKey(dir Ino) []byte { return kv.AppendUint64([]byte{pActiveDir}, uint64(dir)) }

// PublishActiveDirs records when each directory of dirs was last used
// (a later time recorded by another server stays).
func (s *Store) PublishActiveDirs(ctx context.Context, dirs map[Ino]time.Time) error {
	if len(dirs) == 0 {
		return nil
	}
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for d, t := range dirs {
			v, err := tx.Get(activeDirKey(d))
			if err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			if len(v) == 8 && int64(kv.Uint64(v)) >= t.UnixNano() {
				continue
			}
			if err := tx.Set(activeDirKey(d), kv.AppendUint64(nil, uint64(t.UnixNano()))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish active directories: %w", err)
	}
	return nil
}

// ActiveDirs returns the directories recorded by PublishActiveDirs with
// the time recorded, and deletes the records older than before (by the
// servers' clocks: a skew of seconds only moves the end of some polling).
func (s *Store) ActiveDirs(ctx context.Context, before time.Time) (map[Ino]int64, error) {
	out := map[Ino]int64{}
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		clear(out)
		lo := []byte{pActiveDir}
		var old [][]byte
		if err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			if len(k) != 9 || len(v) != 8 {
				return true
			}
			if at := int64(kv.Uint64(v)); at < before.UnixNano() {
				old = append(old, append([]byte(nil), k...))
			} else {
				out[Ino(kv.Uint64(k[1:]))] = at
			}
			return true
		}); err != nil {
			return err
		}
		for _, k := range old {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("active directories: %w", err)
	}
	return out, nil
}
