// Package heartbeat tells which servers of a file system are alive, with
// the least that locks shared between servers need: each server writes
// its beat count at H<server> in the shared kv store every interval, and
// judges another server alive while it has seen that server's count change
// within the lease time, on its own clock, so the servers' clocks need not
// agree. A server that stops beating (a crash, a pause, a lost connection
// to the store) is dead to the others one lease time after the last beat
// they saw. It stands in for meta's server registry, which keeps the same
// rule with more in each record, and is meant to be replaced by it.
package heartbeat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"bucketfs/internal/kv"
)

const prefix = 'H'

func key(server uint64) []byte { return kv.AppendUint64([]byte{prefix}, server) }

// Beats is one server's heartbeat and its view of the others'. It
// implements vfs.Liveness. Safe for concurrent use.
type Beats struct {
	db              kv.Store
	self            uint64
	interval, lease time.Duration

	mu   sync.Mutex
	beat uint64
	seen map[uint64]seen // other servers, by id
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// seen is the last beat count read of a server and when it changed.
type seen struct {
	beat    uint64
	changed time.Time
}

// Start writes self's first beat and reads the others', then keeps doing
// both every interval until Stop.
func Start(ctx context.Context, db kv.Store, self uint64, interval, lease time.Duration) (*Beats, error) {
	b := &Beats{db: db, self: self, interval: interval, lease: lease, seen: map[uint64]seen{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := b.round(ctx); err != nil {
		return nil, err
	}
	go b.run()
	return b, nil
}

func (b *Beats) run() {
	defer close(b.done)
	tick := time.NewTicker(b.interval)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), b.lease)
			b.round(ctx) // A failed beat is a missed one: the others judge.
			cancel()
		}
	}
}

// round beats once and reads every server's count.
func (b *Beats) round(ctx context.Context) error {
	b.mu.Lock()
	b.beat++
	beat := b.beat
	b.mu.Unlock()
	err := b.db.Update(ctx, func(tx kv.Txn) error {
		return tx.Set(key(b.self), kv.AppendUint64(nil, beat))
	})
	if err != nil {
		return fmt.Errorf("heartbeat of server %d: %w", b.self, err)
	}
	counts := map[uint64]uint64{}
	err = b.db.View(ctx, func(r kv.Reader) error {
		lo := []byte{prefix}
		return r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			if len(k) == 9 && len(v) == 8 {
				counts[kv.Uint64(k[1:])] = kv.Uint64(v)
			}
			return true
		})
	})
	if err != nil {
		return fmt.Errorf("read the heartbeats: %w", err)
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for server, count := range counts {
		if s, ok := b.seen[server]; server != b.self && (!ok || s.beat != count) {
			b.seen[server] = seen{beat: count, changed: now}
		}
	}
	return nil
}

// Self returns this server's id.
func (b *Beats) Self() uint64 { return b.self }

// Alive reports whether server has beaten within the lease time as this
// server saw it. A server never seen yet (it started after the last read)
// counts as alive from now, for one lease time, unless it beats. It
// answers from memory.
func (b *Beats) Alive(server uint64) bool {
	if server == b.self {
		return true
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[server]
	if !ok {
		s = seen{beat: 0, changed: now}
		b.seen[server] = s
	}
	return now.Sub(s.changed) < b.lease
}

// Stop stops beating and reading, as a crash would: the record stays, and
// the others find this server dead one lease time after its last beat.
func (b *Beats) Stop() {
	b.once.Do(func() { close(b.stop) })
	<-b.done
}
