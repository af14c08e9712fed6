package tier

import (
	"sync"
	"time"
)

// Recency remembers, in memory, when each inode's data was last used, so
// that eviction drops the least recently used clean files first. After a
// restart every inode counts as unused until it is used again.
type Recency struct {
	shards [64]recencyShard
}

type recencyShard struct {
	mu sync.Mutex
	m  map[uint64]int64
}

func (r *Recency) shard(ino uint64) *recencyShard {
	// Inode numbers are often sequential; mix them so shards stay balanced.
	return &r.shards[(ino*0x9E3779B97F4A7C15)>>58]
}

// Touch records a use of ino now.
func (r *Recency) Touch(ino uint64) {
	sh := r.shard(ino)
	now := time.Now().UnixNano()
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[uint64]int64)
	}
	sh.m[ino] = now
	sh.mu.Unlock()
}

// LastUse returns when ino was last used (unix ns), 0 if not since start.
func (r *Recency) LastUse(ino uint64) int64 {
	sh := r.shard(ino)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[ino]
}

// Forget drops what is known of ino.
func (r *Recency) Forget(ino uint64) {
	sh := r.shard(ino)
	sh.mu.Lock()
	delete(sh.m, ino)
	sh.mu.Unlock()
}
