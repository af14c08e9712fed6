package tier

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// On-disk layout: dir/XX/YY/<ino as 16 hex digits>.data and .map, where XX
// and YY are the third and second byte of the inode number in hex. Inode
// numbers are mostly allocated in sequence, so runs of 256 consecutive inodes
// share a leaf directory (creating many files costs one mkdir per 256, not
// one per file), and 16 million inodes spread over all 65536 leaves; leaf
// directories are created on first use.

const (
	dataSuffix = ".data"
	mapSuffix  = ".map"
	tmpSuffix  = ".tmp"
)

const hexDigits = "0123456789abcdef"

func (t *Tier) leafDir(ino uint64) string {
	b := [5]byte{
		hexDigits[ino>>20&0xf], hexDigits[ino>>16&0xf], '/',
		hexDigits[ino>>12&0xf], hexDigits[ino>>8&0xf],
	}
	return filepath.Join(t.dir, string(b[:]))
}

func inoName(ino uint64) string {
	s := strconv.FormatUint(ino, 16)
	return "0000000000000000"[len(s):] + s
}

func (t *Tier) dataPath(ino uint64) string {
	return filepath.Join(t.leafDir(ino), inoName(ino)+dataSuffix)
}

func (t *Tier) mapPath(ino uint64) string {
	return filepath.Join(t.leafDir(ino), inoName(ino)+mapSuffix)
}

// file returns n's data file, opening (and creating) it if needed. Requires
// n.life held (shared or exclusive). The result stays valid until life is
// released.
func (t *Tier) file(n *inode) (*os.File, error) {
	if f := n.f.Load(); f != nil {
		if !n.fref.Load() {
			n.fref.Store(true)
		}
		return f, nil
	}
	n.openMu.Lock()
	f := n.f.Load()
	if f == nil {
		var err error
		f, err = t.openData(n.ino)
		if err != nil {
			n.openMu.Unlock()
			return nil, err
		}
		n.f.Store(f)
	}
	n.openMu.Unlock()
	n.fref.Store(true)
	t.fds.add(n)
	return f, nil
}

func (t *Tier) openData(ino uint64) (*os.File, error) {
	p := t.dataPath(ino)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
			f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		}
	}
	return f, err
}

// closeFile drops n's cached descriptor. Requires n.life held exclusively.
func closeFile(n *inode) error {
	if f := n.f.Swap(nil); f != nil {
		return f.Close()
	}
	return nil
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fdCache bounds the number of open data files with a clock sweep: every use
// of a descriptor sets the inode's reference bit (one atomic load on the hot
// path, no shared lock), and opening a descriptor past the limit sweeps the
// ring, clearing bits and closing descriptors whose bit was already clear.
// A descriptor is closed only with its inode's life lock taken by TryLock, so
// no operation is using it and the sweep never waits on an inode.
type fdCache struct {
	mu   sync.Mutex
	max  int
	ring []*inode
	hand int
}

// add registers n, which just opened its descriptor, and closes others if the
// cache is over its limit.
func (c *fdCache) add(n *inode) {
	var toClose []*os.File
	c.mu.Lock()
	if !n.inRing {
		n.inRing = true
		c.ring = append(c.ring, n)
	}
	// Two full turns: the first may only clear reference bits.
	for steps := 2 * len(c.ring); len(c.ring) > c.max && steps > 0; steps-- {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		v := c.ring[c.hand]
		if v.f.Load() == nil { // closed elsewhere (removed, evicted)
			c.drop(c.hand)
			continue
		}
		if v.fref.Swap(false) {
			c.hand++
			continue
		}
		if !v.life.TryLock() {
			c.hand++
			continue
		}
		if f := v.f.Swap(nil); f != nil {
			toClose = append(toClose, f)
		}
		v.life.Unlock()
		c.drop(c.hand)
	}
	c.mu.Unlock()
	for _, f := range toClose {
		f.Close()
	}
}

// drop removes ring[i]. Requires c.mu.
func (c *fdCache) drop(i int) {
	c.ring[i].inRing = false
	last := len(c.ring) - 1
	c.ring[i] = c.ring[last]
	c.ring[last] = nil
	c.ring = c.ring[:last]
}
