package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/tier"
)

// Queued is one inode in the export queue.
type Queued struct {
	Ino Ino
	Due int64 // unix ns; also the token Exported compares
}

// Due returns up to limit queued inodes whose time has come by now,
// earliest first.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) (out []Queued, err error) {
	lower := []byte{pDue}
	upper := kv.AppendUint64([]byte{pDue}, uint64(max(now.UnixNano(), 0))+1)
	err = s.kv.View(ctx, func(r kv.Reader) error {
		out = out[:0]
		return r.Scan(lower, upper, func(k, v []byte) bool {
			if len(k) == 17 {
				out = append(out, Queued{Ino: Ino(kv.Uint64(k[9:])), Due: int64(kv.Uint64(k[1:9]))})
			}
			return len(out) < limit
		})
	})
	return out, err
}

// PendingBytes sums the sizes of the queued regular files whose bytes
// changed (DataDirty): what their exports will upload. It reads at most
// max of them, in queue order, in one read transaction, and reports
// whether it stopped there (partial). Their inodes are read
// pendingBytesBatch at a time: on a database, a round trip each batch.
// pendingBytesBatch is how many inodes PendingBytes reads at once.
const pendingBytesBatch = 256

func (s *Store) PendingBytes(ctx context.Context, max int) (bytes int64, partial bool, err error) {
	prefix := []byte{pDue}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		var inos []Ino
		bytes, partial = 0, false
		if err := r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(k) == 17 {
				if len(inos) == max {
					partial = true
					return false
				}
				inos = append(inos, Ino(kv.Uint64(k[9:])))
			}
			return true
		}); err != nil {
			return err
		}
		for i, ino := range inos {
			if i%pendingBytesBatch == 0 {
				if err := r.Prefetch(inodeKeys(inos[i:min(i+pendingBytesBatch, len(inos))])...); err != nil {
					return err
				}
			}
			in, err := s.getInode(r, ino)
			if errors.Is(err, syscall.ENOENT) {
				continue // forgotten since it was queued
			}
			if err != nil {
				return err
			}
			if in.IsRegular() && in.Has(DataDirty) {
				bytes += in.Size
			}
		}
		return nil
	})
	return bytes, partial, err
}

// QueueStats counts the export queue and finds its earliest due time.
func (s *Store) QueueStats(ctx context.Context) (n int, earliest time.Time, err error) {
	prefix := []byte{pDue}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		c, err := queuedCount(r)
		if err != nil {
			return err
		}
		n = int(c)
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(k) == 17 {
				earliest = time.Unix(0, int64(kv.Uint64(k[1:9])))
			}
			return false
		})
	})
	return n, earliest, err
}

// Enqueue schedules ino for reconciliation at due, unless it is queued for
// an earlier time already when keepEarlier is set.
func (s *Store) Enqueue(ctx context.Context, ino Ino, due time.Time, keepEarlier bool) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		if keepEarlier {
			if at, queued, err := queuedAt(tx, ino); err != nil {
				return err
			} else if queued && at <= due.UnixNano() {
				return nil
			}
		}
		return s.enqueue(tx, ino, due)
	})
}

// bringQueueForward makes the export delay of this run apply to what an
// earlier run queued: the queue records due times, so an entry queued under
// a longer delay (or a retry backoff) would otherwise wait it out.
func (s *Store) bringQueueForward(ctx context.Context) error {
	limit := s.now().Add(s.exportDelay)
	lower := kv.AppendUint64([]byte{pDue}, uint64(limit.UnixNano())+1)
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		var late []Ino
		err := tx.Scan(lower, kv.PrefixEnd([]byte{pDue}), func(k, v []byte) bool {
			if len(k) == 17 {
				late = append(late, Ino(kv.Uint64(k[9:])))
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, ino := range late {
			if err := s.enqueue(tx, ino, limit); err != nil {
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
		if in, err = s.getInode(tx, q.Ino); err != nil {
			return err
		}
		oldKeys := append([]Object(nil), in.Keys...)
		fn(&in)
		if err := s.takeKeys(tx, in.Ino, in.Keys); err != nil {
			return err
		}
		if err := indexKeys(tx, in.Ino, oldKeys, in.Keys); err != nil {
			return err
		}
		if err := s.keysDropped(tx, oldKeys, in.Keys); err != nil {
			return err
		}
		if wroteObjects(oldKeys, in.Keys) {
			// The objects the export wrote record the attributes the
			// inode showed: they are its own now (see Defaults).
			in.Flags &^= Defaulted
		}
		if in.Gen == gen {
			// Every block is stamped gen or lower: none is unexported.
			in.ExportedGen = gen
			in.Flags &^= DataDirty | unstamped
			in.Unexported = 0
		}
		if err := s.putInode(tx, &in); err != nil {
			return err
		}
		// What the intents stood for is recorded in Keys now.
		if err := dropIntents(tx, q.Ino); err != nil {
			return err
		}
		at, queued, err := queuedAt(tx, q.Ino)
		if err != nil {
			return err
		}
		if !queued {
			done = true
			return nil
		}
		if at == q.Due && !in.Dirty() {
			done = true
			return s.dequeue(tx, q.Ino)
		}
		return nil
	})
	if err != nil {
		return Inode{}, false, fmt.Errorf("record sync of %d: %w", q.Ino, err)
	}
	return in, done, nil
}

// wroteObjects reports whether keys holds an object version that old does
// not: one the exporter wrote.
func wroteObjects(old, keys []Object) bool {
	for _, k := range keys {
		if !slices.Contains(old, k) {
			return true
		}
	}
	return false
}

// RecordWritten records objs, objects the exporter wrote for ino in a
// reconcile that then failed, among the inode's Keys (replacing the record
// of the same key, if any), and drops their intents. Unlike Synced it
// leaves the inode dirty and queued, and keeps its other records: the
// next reconcile finishes the job from there.
func (s *Store) RecordWritten(ctx context.Context, ino Ino, objs []Object) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		oldKeys := append([]Object(nil), in.Keys...)
		for _, o := range objs {
			in.Keys = withKey(in.Keys, o)
			if err := tx.Delete(intentKey(ino, o.Key)); err != nil {
				return err
			}
		}
		if err := s.takeKeys(tx, in.Ino, objs); err != nil {
			return err
		}
		if err := indexKeys(tx, in.Ino, oldKeys, in.Keys); err != nil {
			return err
		}
		return s.putInode(tx, &in)
	})
}

// withKey returns keys with o as the record of o.Key: in place of the
// record there, or added.
func withKey(keys []Object, o Object) []Object {
	if i := slices.IndexFunc(keys, func(k Object) bool { return k.Key == o.Key }); i >= 0 {
		keys[i] = o
		return keys
	}
	return append(keys, o)
}

// Forget deletes an inode that has no names left: its record, attributes,
// data and queue entry. It refuses (EBUSY) an inode that gained a name again.
func (s *Store) Forget(ctx context.Context, ino Ino) error {
	if err := s.dropBlocksFirst(ctx, ino); err != nil {
		return err
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if errors.Is(err, syscall.ENOENT) {
			if err := dropIntents(tx, ino); err != nil {
				return err
			}
			return s.dequeue(tx, ino)
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
		if err := s.keysDropped(tx, in.Keys, nil); err != nil {
			return err
		}
		if in.IsDir() {
			if err := dropFences(tx, ino); err != nil {
				return err
			}
		}
		if err := tier.Drop(tx, uint64(ino)); err != nil {
			return err
		}
		if err := dropIntents(tx, ino); err != nil {
			return err
		}
		u := usageOf(&in)
		if err := s.addUsage(tx, ino, Usage{Total: -u.Total, Dirty: -u.Dirty}); err != nil {
			return err
		}
		if err := tx.Delete(inodeKey(ino)); err != nil {
			return err
		}
		if err := s.dequeue(tx, ino); err != nil {
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
	// Defaulted says which of Mode's permission bits, Uid and Gid the
	// object did not carry: the inode shows the file system's defaults
	// for them (see Defaults).
	Defaulted Flags
	// Evidence, for a directory from a common prefix, holds keys of
	// current objects the bucket showed under it: the directory is added
	// only if one of them is not the file side's own (see fences.go). A
	// directory without evidence is added as it is.
	Evidence []string
}

// prefetchImports reads ahead what AddImported reads of items, in two
// round trips on PostgreSQL instead of several per item: the names'
// entries, then, for the names that are not there, what importAllowed
// reads (the name's tombstone; the object's key tombstone and index entry,
// or those of a directory's evidence).
func (s *Store) prefetchImports(tx kv.Txn, o Observation, dir Ino, items []Imported) error {
	keys := make([][]byte, len(items))
	for i, it := range items {
		keys[i] = entryKey(dir, it.Name)
	}
	if err := tx.Prefetch(keys...); err != nil {
		return err
	}
	keys = keys[:0]
	object := func(key string) {
		if o.s != nil {
			keys = append(keys, keyTombKey(key))
		}
		keys = append(keys, objectKeyKey(key))
	}
	for _, it := range items {
		if _, err := getEntry(tx, dir, it.Name); !errors.Is(err, syscall.ENOENT) {
			continue // there (or unreadable: the loop says so)
		}
		if o.s != nil {
			keys = append(keys, nameTombKey(dir, it.Name))
		}
		if it.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			for _, k := range it.Evidence {
				object(k)
			}
		} else if it.Obj.Key != "" {
			object(it.Obj.Key)
		}
	}
	return tx.Prefetch(keys...)
}

// AddImported adds the children a listing page of dir, made at o, found.
// Names that already exist on the file side are left alone, and so are
// those that a file-side change since o, or one the exporter has not
// carried out, stands against (see fences.go): the keys of such files come
// back in held, for the caller to look at again. When last is set, the
// directory is marked Listed: every later lookup is answered from meta.
func (s *Store) AddImported(ctx context.Context, o Observation, dir Ino, items []Imported, last bool) (added int, held []string, err error) {
	if err := s.reserveInos(ctx, len(items)); err != nil {
		return 0, nil, err
	}
	err = s.kv.Update(ctx, o.fenced(func(tx kv.Txn) error {
		added, held = 0, held[:0]
		p, err := s.getInode(tx, dir)
		if err != nil {
			return err
		}
		if p.Has(Listed) {
			return nil // another listing finished first
		}
		if p.Nlink == 0 {
			return nil // removed while it was listed: its children have no path
		}
		if err := s.prefetchImports(tx, o, dir, items); err != nil {
			return err
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
			if ok, err := s.importAllowed(tx, o, dir, &it); err != nil {
				return err
			} else if !ok {
				if it.Obj.Key != "" {
					held = append(held, it.Obj.Key)
				}
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
		return s.putInode(tx, &p)
	}))
	if err != nil {
		return 0, nil, fmt.Errorf("import into %d: %w", dir, err)
	}
	return added, held, nil
}
