package meta

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"bucketfs/internal/kv"
)

// Queued is one inode in the export queue.
type Queued struct {
	Ino Ino
	Due int64 // unix ns; also the token Exported compares
}

// Due returns up to limit queued inodes whose time has come by now.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) (out []Queued, err error) {
	prefix := []byte{pQueue}
	t := now.UnixNano()
	err = s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(k) == 9 && len(v) == 8 && int64(kv.Uint64(v)) <= t {
				out = append(out, Queued{Ino: Ino(kv.Uint64(k[1:])), Due: int64(kv.Uint64(v))})
			}
			return len(out) < limit
		})
	})
	return out, err
}

// QueueStats counts the export queue and finds its oldest due time.
func (s *Store) QueueStats(ctx context.Context) (n int, oldest time.Time, err error) {
	prefix := []byte{pQueue}
	min := int64(0)
	err = s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(v) == 8 {
				n++
				if d := int64(kv.Uint64(v)); min == 0 || d < min {
					min = d
				}
			}
			return true
		})
	})
	if min != 0 {
		oldest = time.Unix(0, min)
	}
	return n, oldest, err
}

// Enqueue schedules ino for reconciliation at due, unless it is queued for
// an earlier time already when keepEarlier is set.
func (s *Store) Enqueue(ctx context.Context, ino Ino, due time.Time, keepEarlier bool) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		if keepEarlier {
			if v, err := tx.Get(queueKey(ino)); err == nil && len(v) == 8 && int64(kv.Uint64(v)) <= due.UnixNano() {
				return nil
			}
		}
		return enqueue(tx, ino, due)
	})
}

// bringQueueForward makes the export delay of this run apply to what an
// earlier run queued: the queue records due times, so an entry queued under
// a longer delay (or a retry backoff) would otherwise wait it out.
func (s *Store) bringQueueForward(ctx context.Context) error {
	limit := s.now().Add(s.exportDelay).UnixNano()
	prefix := []byte{pQueue}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		var late [][]byte
		err := tx.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(v) == 8 && int64(kv.Uint64(v)) > limit {
				late = append(late, append([]byte(nil), k...))
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, k := range late {
			if err := tx.Set(k, kv.AppendUint64(nil, uint64(limit))); err != nil {
				return err
			}
		}
		return nil
	})
}

// Synced records the result of reconciling ino with the bucket. fn updates
// the sync fields (Keys, Base) of the current inode. When the inode's Gen is
// still gen, the inode becomes clean at gen; when the queue entry still
// holds the token q.Due, the inode leaves the queue. Otherwise a change
// happened meanwhile and the inode stays queued. It returns the inode after
// the update and whether it left the queue.
func (s *Store) Synced(ctx context.Context, q Queued, gen uint64, fn func(in *Inode)) (in Inode, done bool, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		done = false
		if in, err = getInode(tx, q.Ino); err != nil {
			return err
		}
		oldKeys := append([]Object(nil), in.Keys...)
		fn(&in)
		if err := indexKeys(tx, in.Ino, oldKeys, in.Keys); err != nil {
			return err
		}
		if in.Gen == gen {
			in.ExportedGen = gen
			in.Flags &^= DataDirty
		}
		if err := putInode(tx, &in); err != nil {
			return err
		}
		v, err := tx.Get(queueKey(q.Ino))
		if errors.Is(err, kv.ErrNotFound) {
			done = true
			return nil
		}
		if err != nil {
			return err
		}
		if len(v) == 8 && int64(kv.Uint64(v)) == q.Due && !in.Dirty() {
			done = true
			return tx.Delete(queueKey(q.Ino))
		}
		return nil
	})
	if err != nil {
		return Inode{}, false, fmt.Errorf("record sync of %d: %w", q.Ino, err)
	}
	return in, done, nil
}

// Forget deletes an inode that has no names left: its record, attributes
// and queue entry. It refuses (EBUSY) an inode that gained a name again.
func (s *Store) Forget(ctx context.Context, ino Ino) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := getInode(tx, ino)
		if errors.Is(err, syscall.ENOENT) {
			return tx.Delete(queueKey(ino))
		}
		if err != nil {
			return err
		}
		if in.Nlink != 0 {
			return fmt.Errorf("forget inode %d: %w", ino, syscall.EBUSY)
		}
		if err := indexKeys(tx, in.Ino, in.Keys, nil); err != nil {
			return err
		}
		if err := tx.Delete(inodeKey(ino)); err != nil {
			return err
		}
		if err := tx.Delete(queueKey(ino)); err != nil {
			return err
		}
		return tx.DeleteRange(xattrPrefix(ino), kv.PrefixEnd(xattrPrefix(ino)))
	})
}

// Imported is one child of a directory as the bucket listing shows it.
type Imported struct {
	Name   string
	Mode   uint32 // with type bits
	Uid    uint32
	Gid    uint32
	Rdev   uint32
	Mtime  int64 // unix ns
	Target string
	Obj    Object // the object (files, symlinks, specials; a directory's marker if any)
}

// AddImported adds the children a listing page of dir found. Names that
// already exist on the file side are left alone. When last is set, the
// directory is marked Listed: every later lookup is answered from meta.
func (s *Store) AddImported(ctx context.Context, dir Ino, items []Imported, last bool) (added int, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		added = 0
		p, err := getInode(tx, dir)
		if err != nil {
			return err
		}
		if p.Has(Listed) {
			return nil // another listing finished first
		}
		for _, it := range items {
			if _, err := getEntry(tx, dir, it.Name); err == nil {
				continue
			} else if !errors.Is(err, syscall.ENOENT) {
				return err
			}
			if dir == RootIno && it.Name == s.LostFoundName() {
				continue
			}
			if _, err := s.addImported(tx, &p, it); err != nil {
				return err
			}
			added++
		}
		if last {
			p.Flags |= Listed
		}
		return putInode(tx, &p)
	})
	if err != nil {
		return 0, fmt.Errorf("import into %d: %w", dir, err)
	}
	return added, nil
}
