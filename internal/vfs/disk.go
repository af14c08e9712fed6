package vfs

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// diskCheck keeps writes from filling the disk that holds the tier and the
// namespace: the store cannot take a write it has no room to log, and a
// failed log write leaves it unable to commit at all until a restart. So a
// write is refused with ENOSPC while the disk has less than the reserve
// free, and the room left is there for exports, deletes and compactions,
// which free space. The free space is looked up at most every 100 ms.
// The store's own preallocated files are sized to the disk (package kv,
// memTableFor), so that on a small disk they do not take the reserve.
type diskCheck struct {
	mu      sync.Mutex
	checked time.Time
	free    int64
}

// diskSpace returns ENOSPC while the state directory's disk is below the
// reserve.
func (fs *FS) diskSpace() error {
	if fs.cfg.StateDir == "" || fs.cfg.DiskReserve <= 0 {
		return nil
	}
	d := &fs.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.checked) > 100*time.Millisecond {
		var st unix.Statfs_t
		if err := unix.Statfs(fs.cfg.StateDir, &st); err != nil {
			return fmt.Errorf("free space of %s: %w", fs.cfg.StateDir, err)
		}
		d.free = int64(st.Bavail) * st.Bsize
		d.checked = time.Now()
	}
	if d.free < fs.cfg.DiskReserve {
		return fmt.Errorf("%s has %d bytes free, less than the %d kept for exports and the store's own work: %w",
			fs.cfg.StateDir, d.free, fs.cfg.DiskReserve, syscall.ENOSPC)
	}
	return nil
}
