package vfs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"bucketfs/internal/locks"
)

// Several servers on one store.
//
// When several servers serve one file system from one shared kv store,
// each has its own FS, and what one server's clients hold must hold on
// every server: their locks, and their opens (an unlinked file's data is
// kept while any server holds it open). Config.Liveness turns this on; nil
// means this server is alone, and nothing below touches the store.
//
// Locks: the FS's locks.Table stays the authority for this server's own
// lock owners (merging, splitting, waits, deadlocks among them), and its
// Peers (sharedLocks) publish what it holds per inode in the store (meta's
// ShareLocks, L<ino><server>) and check every grant against the other live
// servers' records in the same transaction. A wait blocked by another
// server asks again every Config.SharedLockRetry, and at once when a lock
// on the inode is released here. Deadlocks through owners of two servers
// are not detected.
//
// Opens: each server records each inode it holds open (O<ino><server>),
// written at its first open of the inode (before the open returns) and
// deleted after its last close (batched with other last closes: closed),
// not per handle; IsOpen and InUse read the other live servers' records.
//
// Invariant: the store's records of this server hold at least what this
// server holds (its locks, its opens) from the moment a lock is granted or
// an open returns; a release or close is written after it happens here.

// Liveness tells which servers sharing the file system's store are alive.
// A record of a server that is not alive is ignored and deleted.
type Liveness interface {
	// Self is this server's id, as its records name it.
	Self() uint64
	// Alive reports whether server is alive. It is called inside kv
	// transactions: it must answer from memory.
	Alive(server uint64) bool
}

// DefaultSharedLockRetry is how often a lock wait blocked by another
// server's lock asks again.
const DefaultSharedLockRetry = 100 * time.Millisecond

// sharedLocks is the FS's locks.Peers: the locks of the other servers, in
// the shared store.
type sharedLocks struct {
	fs    *FS
	live  Liveness
	retry time.Duration

	// mu orders this server's writes of its lock records, so that one
	// retried after a failure never overwrites a newer one.
	mu sync.Mutex
	// unwritten holds, per inode, the locks a failed Release could not
	// record; retrying says a goroutine is at it.
	unwritten map[uint64]locks.Held
	retrying  bool

	// testHookRefused, if set, is called each time another server's lock
	// refuses a grant.
	testHookRefused func(ino uint64)
}

var _ locks.Peers = (*sharedLocks)(nil)

func (p *sharedLocks) Grant(ctx context.Context, ino uint64, req locks.Lock, flock bool, held locks.Held) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, err := p.fs.meta.ShareLocks(ctx, Ino(ino), p.live.Self(), p.live.Alive, held, func(theirs locks.Held) bool {
		list := theirs.Records
		if flock {
			list = theirs.Flocks
		}
		_, blocked := locks.FirstExcluding(list, req)
		return blocked
	})
	switch {
	case err != nil:
		return false, err
	case ok:
		delete(p.unwritten, ino) // held is newer
	case p.testHookRefused != nil:
		p.testHookRefused(ino)
	}
	return ok, nil
}

func (p *sharedLocks) Release(ctx context.Context, ino uint64, held locks.Held) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.fs.meta.ShareLocks(ctx, Ino(ino), p.live.Self(), p.live.Alive, held, nil); err != nil {
		p.fs.log.Warn("record a released lock for the other servers; retrying", "ino", ino, "err", err)
		if p.unwritten == nil {
			p.unwritten = map[uint64]locks.Held{}
		}
		p.unwritten[ino] = held
		if !p.retrying {
			p.retrying = true
			go p.retryUnwritten()
		}
		return
	}
	delete(p.unwritten, ino)
}

// retryUnwritten writes the releases that failed until none is left.
func (p *sharedLocks) retryUnwritten() {
	for wait := p.retry; ; wait = min(2*wait, 10*time.Second) {
		time.Sleep(wait) // a backoff, not a synchronisation
		p.mu.Lock()
		for ino, held := range p.unwritten {
			_, err := p.fs.meta.ShareLocks(context.Background(), Ino(ino), p.live.Self(), p.live.Alive, held, nil)
			if err == nil {
				delete(p.unwritten, ino)
			}
		}
		if len(p.unwritten) == 0 {
			p.retrying = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

func (p *sharedLocks) Retry() time.Duration { return p.retry }

// testOthers returns the lowest record lock of another live server that
// excludes l.
func (p *sharedLocks) testOthers(ctx context.Context, ino Ino, l Lock) (Lock, bool, error) {
	theirs, err := p.fs.meta.OthersLocks(ctx, ino, p.live.Self(), p.live.Alive)
	if err != nil {
		return Lock{}, false, err
	}
	c, ok := locks.FirstExcluding(theirs.Records, l)
	return c, ok, nil
}

// sharedOpens writes this server's open records.
type sharedOpens struct {
	// mu orders the writes of one inode's record (striped by inode
	// number): each writes whether the inode is open at the moment it
	// holds the mutex, so the last one written is the truth.
	mu [64]sync.Mutex

	// epoch counts the batches of last closes, each bumped before the
	// batch looks at which of its inodes are still closed (openCreated).
	epoch atomic.Uint64

	// closing holds the last closes whose records are not deleted yet
	// (closed); running says a closer goroutine drains it.
	closing struct {
		sync.Mutex
		inos    map[Ino]struct{}
		running bool
		idle    sync.Cond // broadcast when running ends
	}
}

// WaitCloses returns once the last closes made so far are recorded (see
// closed): call it before the store is closed.
func (fs *FS) WaitCloses() {
	c := &fs.sharedOpens.closing
	c.Lock()
	defer c.Unlock()
	for c.running {
		if c.idle.L == nil {
			c.idle.L = &c.Mutex
		}
		c.idle.Wait()
	}
}

func (o *sharedOpens) stripe(ino Ino) int { return int(uint64(ino) % uint64(len(o.mu))) }

// closed takes the last close of ino on this server: its open record is
// deleted, and the file reclaimed if it has no name left, after the close
// has returned, together with the other last closes that came meanwhile
// (one transaction for them all, one read of their inodes). Until then the
// other servers count the file open here, which only keeps its data a
// moment longer; a close waits for neither.
func (fs *FS) closed(ino Ino) {
	c := &fs.sharedOpens.closing
	c.Lock()
	if c.inos == nil {
		c.inos = map[Ino]struct{}{}
	}
	c.inos[ino] = struct{}{}
	start := !c.running
	c.running = true
	c.Unlock()
	if start {
		go fs.recordCloses()
	}
}

// recordCloses records the pending last closes, batch by batch, until none
// is left.
func (fs *FS) recordCloses() {
	c := &fs.sharedOpens.closing
	for {
		c.Lock()
		batch := c.inos
		c.inos = nil
		if len(batch) == 0 {
			c.running = false
			if c.idle.L != nil {
				c.idle.Broadcast()
			}
			c.Unlock()
			return
		}
		c.Unlock()
		fs.recordCloseBatch(batch)
	}
}

// recordCloseBatch deletes the open records of the inodes of batch that
// are still closed here, holding their stripes of sharedOpens.mu (in
// order) so that no open's record is written in between, then reclaims
// those without a name.
func (fs *FS) recordCloseBatch(batch map[Ino]struct{}) {
	o := &fs.sharedOpens
	var stripes [len(o.mu)]bool
	for ino := range batch {
		stripes[o.stripe(ino)] = true
	}
	for i := range stripes {
		if stripes[i] {
			o.mu[i].Lock()
		}
	}
	o.epoch.Add(1)
	var inos []Ino
	fs.mu.Lock()
	for ino := range batch {
		if fs.opens[ino] == 0 {
			inos = append(inos, ino)
		}
	}
	fs.mu.Unlock()
	ctx := context.Background()
	err := fs.meta.MarkClosed(ctx, inos, fs.cfg.Liveness.Self())
	for i := range stripes {
		if stripes[i] {
			o.mu[i].Unlock()
		}
	}
	if err != nil {
		// The records stay: the other servers keep the data longer.
		fs.log.Warn("record last closes for the other servers", "files", len(inos), "err", err)
		return
	}
	ins, err := fs.meta.GetMany(ctx, inos)
	if err != nil {
		fs.log.Warn("read closed files to reclaim", "files", len(inos), "err", err)
		return
	}
	for i := range ins {
		fs.reclaim(&ins[i])
	}
}

// recordOpen writes whether this server holds ino open now, after an
// open's first handle or a close's last. Shared servers only.
func (fs *FS) recordOpen(ctx context.Context, ino Ino) error {
	mu := &fs.sharedOpens.mu[fs.sharedOpens.stripe(ino)]
	mu.Lock()
	defer mu.Unlock()
	fs.mu.Lock()
	open := fs.opens[ino] > 0
	fs.mu.Unlock()
	return fs.meta.MarkOpen(ctx, ino, fs.cfg.Liveness.Self(), open)
}

// openElsewhere reports whether another live server holds ino open. An
// error counts as open: keeping data is the safe side.
func (fs *FS) openElsewhere(ino Ino) bool {
	if fs.cfg.Liveness == nil {
		return false
	}
	open, err := fs.meta.OpenElsewhere(context.Background(), ino, fs.cfg.Liveness.Self(), fs.cfg.Liveness.Alive)
	if err != nil {
		fs.log.Warn("ask whether another server holds a file open; keeping it", "ino", ino, "err", err)
		return true
	}
	return open
}

// enableSharing connects fs to the other servers of its store.
func (fs *FS) enableSharing() {
	if fs.cfg.Liveness == nil {
		return
	}
	if fs.cfg.SharedLockRetry <= 0 {
		fs.cfg.SharedLockRetry = DefaultSharedLockRetry
	}
	fs.shared = &sharedLocks{fs: fs, live: fs.cfg.Liveness, retry: fs.cfg.SharedLockRetry}
	fs.locks.Peers = fs.shared
}

// ForgetServer deletes every lock and open record of this server: at a
// start under an id an earlier run used, whose locks and opens ended with
// it.
func (fs *FS) ForgetServer(ctx context.Context) error {
	if fs.cfg.Liveness == nil {
		return nil
	}
	return fs.meta.DropServerState(ctx, fs.cfg.Liveness.Self())
}

// Shared reports whether this server shares its store with other servers
// of the file system (Config.Liveness).
func (fs *FS) Shared() bool { return fs.shared != nil }

// DropEarlierRunLocks deletes the lock records the dead earlier runs of
// NFS server identity left (meta's DropEarlierRunLocks), on a shared file
// system.
func (fs *FS) DropEarlierRunLocks(ctx context.Context, identity uint64) error {
	if fs.cfg.Liveness == nil {
		return nil
	}
	return fs.meta.DropEarlierRunLocks(ctx, identity, fs.cfg.Liveness.Alive)
}

// ReserveShare is for an NFS OPEN with share access and deny bits
// (OPEN4_SHARE_ACCESS_*, OPEN4_SHARE_DENY_*) on a shared server: unless a
// live other server's opens of ino deny that access or hold access that
// deny denies (then it reports false and writes nothing), it publishes
// heldAccess and heldDeny, the unions over this server's opens of ino with
// the new one, in the same transaction. Alone, it reports true.
func (fs *FS) ReserveShare(ctx context.Context, ino Ino, access, deny, heldAccess, heldDeny uint32) (bool, error) {
	if fs.shared == nil {
		return true, nil
	}
	return fs.meta.ShareReservations(ctx, ino, fs.cfg.Liveness.Self(), fs.cfg.Liveness.Alive,
		uint8(heldAccess), uint8(heldDeny), func(a, d uint8) bool {
			return uint32(d)&access != 0 || uint32(a)&deny != 0
		})
}

// PublishShares publishes heldAccess and heldDeny as this server's share
// reservations on ino after some of its opens closed or were downgraded.
func (fs *FS) PublishShares(ctx context.Context, ino Ino, heldAccess, heldDeny uint32) error {
	if fs.shared == nil {
		return nil
	}
	_, err := fs.meta.ShareReservations(ctx, ino, fs.cfg.Liveness.Self(), fs.cfg.Liveness.Alive,
		uint8(heldAccess), uint8(heldDeny), nil)
	return err
}

// DeniedElsewhere reports whether a live other server's opens of ino hold
// a share deny with any of the bits of deny (I/O under a special stateid).
func (fs *FS) DeniedElsewhere(ctx context.Context, ino Ino, deny uint32) (bool, error) {
	if fs.shared == nil {
		return false, nil
	}
	_, d, err := fs.meta.OthersReservations(ctx, ino, fs.cfg.Liveness.Self(), fs.cfg.Liveness.Alive)
	return uint32(d)&deny != 0, err
}
