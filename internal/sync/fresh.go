package sync

import (
	"context"
	gosync "sync"

	"bucketfs/internal/meta"
)

// A directory's listing in the namespace is trusted only once this process
// has read it from the bucket (or made the directory): while bucketfs was
// down the bucket may have changed, and the events sent meanwhile are lost
// (MinIO drops webhook events while the target is down). So after a start
// every listed directory is stale. A readdir of a stale directory lists it
// again first (PollDir); a lookup that misses in one asks the bucket for
// that name, as a lookup in a directory never listed does, and starts the
// re-listing in the background so later misses are answered locally.

// maxFresh bounds the set; when it is full it is emptied, and directories
// become stale again (they cost one more listing each, nothing else).
const maxFresh = 1 << 17

// freshDirs is the set of directories whose listing this process read or
// made.
type freshDirs struct {
	mu  gosync.Mutex
	set map[meta.Ino]struct{}
}

func (f *freshDirs) add(ino meta.Ino) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil || len(f.set) >= maxFresh {
		f.set = map[meta.Ino]struct{}{}
	}
	f.set[ino] = struct{}{}
}

func (f *freshDirs) has(ino meta.Ino) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.set[ino]
	return ok
}

// Fresh reports whether dir's listing was read from the bucket (or the
// directory made) by this process, so that a name missing from it is
// missing from the bucket too, as far as events and polls tell.
func (im *Importer) Fresh(dir meta.Ino) bool { return im.fresh.has(dir) }

// Made notes a directory the file side just made: the bucket has nothing
// under it that the namespace lacks.
func (im *Importer) Made(dir meta.Ino) { im.fresh.add(dir) }

// Refresh lists the stale directory dir again in the background, unless
// that is under way.
func (im *Importer) Refresh(ctx context.Context, dir *meta.Inode) {
	go func() {
		if err := im.EnsureListed(context.WithoutCancel(ctx), dir); err != nil && ctx.Err() == nil {
			im.log.Warn("list a stale directory again", "ino", dir.Ino, "err", err)
		}
	}()
}

// prefixOf is the bucket prefix dir's children are under: the one it was
// listed from or last exported to, or for a directory the file side made
// and never exported, its path. ok is false for a directory with no path
// (removed) or one under lost+found.
func (im *Importer) prefixOf(ctx context.Context, dir *meta.Inode) (prefix string, ok bool, err error) {
	if dir.Source != "" || dir.Ino == meta.RootIno {
		return dir.Source, true, nil
	}
	paths, underLF, err := im.meta.Paths(ctx, dir.Ino)
	if err != nil || len(paths) == 0 || underLF[0] {
		return "", false, err
	}
	return paths[0] + "/", true, nil
}
