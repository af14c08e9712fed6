package tier

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Options configures a Tier.
type Options struct {
	// Capacity is the number of allocated bytes Evict tries to stay under;
	// 0 means unlimited.
	Capacity int64
	// MaxOpenFiles bounds the cache of open data files; 0 means 1024.
	MaxOpenFiles int
}

// ErrNoState is returned (wrapped) by operations on an inode the tier holds
// nothing for: never created or initialised, removed, or evicted. It matches
// fs.ErrNotExist under errors.Is.
var ErrNoState = fmt.Errorf("no tier state: %w", fs.ErrNotExist)

// ErrStale is returned (wrapped) by a Fill whose bytes were fetched for
// content the tier has since replaced.
var ErrStale = errors.New("tier: fill of replaced content")

// ErrClosed is returned (wrapped) by every operation after Close.
var ErrClosed = errors.New("tier closed")

const shardCount = 64

// guardStripes is the number of Guard locks; inodes share them by number.
const guardStripes = 1024

// Tier is the local data store. All methods are safe for concurrent use.
type Tier struct {
	dir  string
	opt  Options
	lock *os.File // flock'ed dir/LOCK, so two processes never share dir

	shards [shardCount]shard
	closed atomic.Bool

	// usage is the sum of inode.alloc over live inodes.
	usage atomic.Int64
	stale staleSet
	fds   fdCache

	wallBase int64     // UnixNano at Open
	monoBase time.Time // monotonic origin paired with wallBase

	checkpoints atomic.Uint64 // checkpoints begun
	epochs      atomic.Uint32 // source of inode.epoch; wraps only after 2^32 replacements

	// guards are striped by inode number: held shared by a change made
	// with Guard, exclusively by ResetWith (see Guard).
	guards [guardStripes]sync.RWMutex

	// afterSnapshot, if set (by tests), runs between a checkpoint's
	// snapshot and its map writes.
	afterSnapshot func()
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]*inode
}

// inode is the tier's state for one inode.
//
// Lock order: the Tier's guard stripe, then life, then syncMu, then fill,
// then openMu, then mu. mu is never held across I/O; the others are per
// inode and may be.
type inode struct {
	ino uint64

	// life is held shared by every operation that uses the data file and
	// exclusively by operations that replace or destroy it (Create, Reset,
	// Truncate, Remove, eviction, closing the cached descriptor, Close).
	life sync.RWMutex

	// fill is held shared by WriteAt and Punch and exclusively by Fill, so
	// a Fill can never write bucket data over a range a concurrent WriteAt
	// is about to mark present.
	fill sync.RWMutex

	// syncMu serialises Sync so only one map write per inode is in flight.
	syncMu sync.Mutex

	// openMu serialises opening the data file.
	openMu sync.Mutex
	f      atomic.Pointer[os.File] // cached descriptor; nil if closed

	lastUse atomic.Int64 // UnixNano-based, see Tier.now
	alloc   atomic.Int64 // allocated bytes of the data file at last refresh

	mu      sync.Mutex
	ext     extents // present ranges, all inside [0, size)
	size    int64   // logical size as the tier knows it
	present int64   // ext.total()
	gen     uint64  // bumped on every change of ext or size
	onDisk  extents // ranges the map file on disk claims
	diskGen uint64  // gen that the map on disk records; 0 if none matches

	// The small fields last, packed: a million inodes is a common load.
	fref    atomic.Bool // clock bit for the descriptor cache
	isStale atomic.Bool // alloc needs refreshing; guarded by Tier.stale
	// Guarded by mu.
	epoch uint32 // new (from Tier.epochs) when the content is replaced: Create, Reset, new state
	cuts  uint32 // bumped when bytes are dropped (Truncate down, Punch)
	syncs uint32 // bumped by every Sync that made the inode durable
	// dead is set, with life held exclusively, once this struct is no longer
	// the inode's state; holders of life must re-look the inode up.
	dead      bool
	inRing    bool // guarded by Tier.fds.mu
	unsynced  bool // data, ext or size changed since the last Sync (mu)
	mapOnDisk bool // a map file exists on disk (mu)
}

// Open opens (creating if needed) the tier in dir and reloads the state a
// previous Tier left there. State that was never synced is discarded.
func Open(dir string, opt Options) (*Tier, error) {
	if opt.Capacity < 0 {
		return nil, fmt.Errorf("tier: open %s: negative capacity", dir)
	}
	if opt.MaxOpenFiles <= 0 {
		opt.MaxOpenFiles = 1024
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tier: open %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tier: open %s: %w", dir, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("tier: open %s: directory in use by another tier: %w", dir, err)
	}
	t := &Tier{
		dir:      dir,
		opt:      opt,
		lock:     lock,
		wallBase: time.Now().UnixNano(),
		monoBase: time.Now(),
	}
	t.fds.max = opt.MaxOpenFiles
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]*inode)
	}
	if err := t.load(); err != nil {
		lock.Close()
		return nil, err
	}
	return t, nil
}

// Close syncs every inode with unsynced changes, closes all data files and
// releases dir. The first error is returned, but Close always finishes.
func (t *Tier) Close() error {
	if t.closed.Swap(true) {
		return fmt.Errorf("tier: close %s: %w", t.dir, ErrClosed)
	}
	var first error
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		nodes := make([]*inode, 0, len(sh.m))
		for _, n := range sh.m {
			nodes = append(nodes, n)
		}
		clear(sh.m)
		sh.mu.Unlock()
		for _, n := range nodes {
			n.life.Lock()
			if !n.dead {
				n.syncMu.Lock()
				err := t.syncLocked(n)
				n.syncMu.Unlock()
				if err != nil && first == nil {
					first = err
				}
				if f := n.f.Swap(nil); f != nil {
					f.Close()
				}
				n.dead = true
			}
			n.life.Unlock()
		}
	}
	if err := t.lock.Close(); err != nil && first == nil {
		first = fmt.Errorf("tier: close %s: %w", t.dir, err)
	}
	return first
}

// now returns wall-clock UnixNano that never goes backwards during one Open.
func (t *Tier) now() int64 { return t.wallBase + int64(time.Since(t.monoBase)) }

func (t *Tier) shard(ino uint64) *shard {
	// Inode numbers are often sequential; mix them so shards stay balanced.
	return &t.shards[(ino*0x9E3779B97F4A7C15)>>58]
}

// lookup returns the live state of ino, or nil.
func (t *Tier) lookup(ino uint64) (*inode, error) {
	sh := t.shard(ino)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.closed.Load() {
		return nil, ErrClosed
	}
	return sh.m[ino], nil
}

// forget removes n from the inode table. Requires n.life held exclusively.
func (t *Tier) forget(n *inode) {
	n.dead = true
	sh := t.shard(n.ino)
	sh.mu.Lock()
	if sh.m[n.ino] == n {
		delete(sh.m, n.ino)
	}
	sh.mu.Unlock()
}

// shared returns ino's state with life held shared, or an error wrapping
// ErrNoState or ErrClosed.
func (t *Tier) shared(ino uint64) (*inode, error) {
	for {
		n, err := t.lookup(ino)
		if err != nil {
			return nil, err
		}
		if n == nil {
			return nil, ErrNoState
		}
		n.life.RLock()
		if !n.dead {
			return n, nil
		}
		n.life.RUnlock()
	}
}

// exclusive returns ino's state with life held exclusively. With create set
// it makes an empty state of logical size size if none exists, publishing it
// already locked so no other operation sees it half made; created reports
// that.
func (t *Tier) exclusive(ino uint64, create bool, size int64) (n *inode, created bool, err error) {
	for {
		sh := t.shard(ino)
		sh.mu.Lock()
		if t.closed.Load() {
			sh.mu.Unlock()
			return nil, false, ErrClosed
		}
		n = sh.m[ino]
		if n == nil {
			if !create {
				sh.mu.Unlock()
				return nil, false, ErrNoState
			}
			n = &inode{ino: ino, size: size, epoch: t.epochs.Add(1)}
			n.lastUse.Store(t.now())
			n.life.Lock()
			sh.m[ino] = n
			sh.mu.Unlock()
			return n, true, nil
		}
		sh.mu.Unlock()
		n.life.Lock()
		if !n.dead {
			return n, false, nil
		}
		n.life.Unlock()
	}
}

// Inodes returns every inode the tier holds state for, in no order. After a
// crash the owner can compare it with the metadata layer and Remove or Reset
// what it no longer trusts.
func (t *Tier) Inodes() []uint64 {
	var out []uint64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for ino := range sh.m {
			out = append(out, ino)
		}
		sh.mu.Unlock()
	}
	return out
}

// Present returns how many bytes of ino are present and whether the tier holds
// any state for it.
func (t *Tier) Present(ino uint64) (present int64, ok bool) {
	n, err := t.lookup(ino)
	if err != nil || n == nil {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.present, true
}

// Size returns the logical size the tier knows for ino: the size given to
// Create, Init, Reset or Truncate, grown by writes past it.
func (t *Tier) Size(ino uint64) (size int64, ok bool) {
	n, err := t.lookup(ino)
	if err != nil || n == nil {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.size, true
}

// Missing returns the sub-ranges of [off, off+n) that are not present, in
// order. For an inode without state the whole range is missing. The result
// is nil when everything is present.
func (t *Tier) Missing(ino uint64, off, n int64) []Range {
	if n <= 0 {
		return nil
	}
	st, err := t.lookup(ino)
	if err != nil || st == nil {
		return []Range{{off, end(off, n) - off}}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ext.covers(off, n) {
		return nil
	}
	return st.ext.missing(off, n, nil)
}

// markLocked records that [off, off+n) now holds valid data and that the
// logical size is at least off+n. If gap is set and the write starts past the
// old size, the bytes between are local zeros and become present too.
// Requires st.mu.
func (st *inode) markLocked(off, n int64, gap bool) {
	if n <= 0 {
		return
	}
	if gap && off > st.size {
		n += off - st.size
		off = st.size
	}
	st.present += st.ext.add(off, n)
	st.size = max(st.size, off+n)
	st.gen++
	st.unsynced = true
}

// opErr wraps err with the operation and inode.
func opErr(op string, ino uint64, err error) error {
	return fmt.Errorf("tier: %s inode %d: %w", op, ino, err)
}

func checkRange(off, n int64) error {
	if off < 0 || n < 0 || n > (1<<63-1)-off {
		return unix.EINVAL
	}
	return nil
}
