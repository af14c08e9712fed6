package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test, unmounted at its
// end (after the engine on it closes: cleanups run last first).
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes: %v", size, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// freeSpace returns the bytes free to an unprivileged user on dir's disk.
func freeSpace(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Issue 21: on a 160 MiB state disk holding 5 MiB, the store's
// preallocated log files (four of 36 MiB: one per memtable of 32 MiB, and
// those kept for reuse) took the disk below the 64 MiB reserve, and every
// write failed with ENOSPC. The store sizes its memtables, and so its log
// files, to the disk: a file system holding a few MiB keeps taking writes
// however many, and leaves the reserve free.
func TestASmallStateDiskKeepsTakingWritesAndItsReserve(t *testing.T) {
	const disk, reserve = 160 << 20, 64 << 20
	dir := smallDisk(t, disk)
	state := filepath.Join(dir, "state")
	e := openEngineCfg(t, func(c *Config) { c.StateDir = state; c.DiskReserve = reserve })
	ctx := context.Background()
	_, h, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "f", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	// A 4 MiB file, rewritten 64 KiB at a time 48 times over (192 MiB of
	// writes, more than the disk), with an fsync every 1 MiB.
	const size, piece = 4 << 20, 64 << 10
	p := noise(8, piece)
	for i := 0; i < 48*size/piece; i++ {
		p[0] = byte(i)
		if _, err := h.Write(ctx, p, int64(i*piece%size)); err != nil {
			t.Fatalf("write %d (%d MiB written) with %d MiB free: %v", i, i*piece>>20, freeSpace(t, dir)>>20, err)
		}
		if i%16 == 15 {
			if err := h.Fsync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if free := freeSpace(t, dir); free < reserve {
		t.Fatalf("%d MiB free on a %d MiB state disk holding a 4 MiB file, less than the %d MiB reserve",
			free>>20, disk>>20, reserve>>20)
	}
	if _, err := h.Write(ctx, p, 0); err != nil {
		t.Fatalf("a write after the rewrites: %v", err)
	}
}
