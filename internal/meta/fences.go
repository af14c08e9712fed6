package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/kv"
)

// Observation fences.
//
// Rule: an import never undoes a file-side change that the bucket
// observation it rests on could not have seen, whichever server made the
// change and whichever imports. An import (a listing page, a poll's new
// directory, a lookup, a revalidated key) rests on a LIST or a HEAD made
// at some moment; between that moment and the transaction that applies it,
// the file side may remove the very name (unlink, rmdir, the rm -r of its
// directory, a rename away), and the exporter may carry the removal out in
// the bucket. Applied anyway, the import would bring the removed name back
// (on MinIO a removed directory came back, empty, a moment after rm -r).
//
// Where it is kept: in the store, so that every server sharing it sees
// every server's removals. Each directory has a fence sequence, f<dir>, a
// number that only events in that directory advance, each in its own
// transaction: the removal of one of its names (Remove; the old name of a
// Rename), and the drop of the record of an object key that lies under its
// path (Synced, Forget: the exporter deleted the object, or it is no longer
// the inode's; the directory is the deepest one that exists on the key's
// path then). The event records the number it took in a tombstone:
// g<dir><name> for a name, G<key> = <dir><number> for a key. An
// Observation reads the fence sequence of the directories the import will
// add names to (Observe: the directory a listing, poll or lookup adds to;
// ResolveObserved: the parent of a revalidated key), and those of their
// ancestors, before the bucket request it stands for. (A key tombstone
// names the deepest directory on the key's path when its record was
// dropped; a directory made on that path since is not it, but lies below
// it: reading the ancestors orders such an event too, where reading only
// the new directory would leave the key fenced until the tombstone is
// trimmed.) Each event writes its directory's sequence, so
// the events of one directory are serialized on it and a read sees an
// event whole or not at all: an event committed after the observation's
// read carries a number above the one read, an event committed before it
// one no higher. No clock is compared.
//
// The transaction that applies an import made with observation o:
//
//   - adds no name p/n whose tombstone is numbered above o's read of p, or,
//     when o did not read p, that has a tombstone at all;
//   - adds no file whose object an inode records (a removal or rename the
//     exporter has not carried out: the inode will delete or move it), or
//     whose key tombstone is numbered above o's read of its directory (or
//     exists, when o did not read that directory);
//   - adds no directory all of whose evidence (Imported.Evidence, the
//     current objects the bucket showed under its prefix) is such objects.
//
// The check and the write are in one serializable transaction, so no
// removal lands between them. A refused import is no loss: the next
// observation is newer than the removal, and sees the bucket as the
// exporter left it; a genuine bucket-side object under the name is
// imported then. A directory that lost its name (rmdir, a rename over it,
// a bucket-side removal) leaves a record, F<dir> = <parent><number>, of
// that event in its parent's sequence: every event of the directory came
// before it, so a tombstone that names a directory o could not read (gone
// by then) is ordered by o's read of the parent. (Where o read neither,
// such an object waits until the tombstone is trimmed.)
//
// No key is written by every removal: a removal writes its directory's
// sequence (it writes the directory's inode already, for the times), and
// events in different directories share no key, so under SERIALIZABLE
// they do not conflict.
//
// Age and trimming: an observation serves imports for at most
// Options.MaxObservationAge after it was taken, by the clock of the server
// that holds it; an import resting on an older one fails with EAGAIN
// (checked again when its transaction has done its reads: fenced). A
// tombstone matters only to observations older than it. TrimFences
// deletes one after this server has seen it, unchanged, for longer than
// that age plus fenceTrimMargin by its own clock: every observation older
// than the tombstone was taken before the scan that first saw it, so it has
// expired by then. Only durations each server measures itself are used, so
// clock skew between servers does not matter. A directory's sequence and
// name tombstones go with it (Forget); its F record is trimmed as
// tombstones are (it is younger than every key tombstone naming the
// directory, so it outlives them).

const (
	pFenceSeq = 'f'
	pNameTomb = 'g'
	pKeyTomb  = 'G'
	pDirGone  = 'F'
)

// DefaultMaxObservationAge bounds how long an Observation serves imports
// (Options.MaxObservationAge). It covers one LIST or HEAD with its retries
// (bucket.Config.OpTimeout, 30 s by default) and the evidence reads of
// one listing page, many times over: imports rest on observations taken
// per page.
const DefaultMaxObservationAge = 5 * time.Minute

// fenceTrimMargin is added to the observation age before a tombstone is
// trimmed: clock rates of two servers differ a little, and an observation
// is stamped just before its read.
const fenceTrimMargin = time.Minute

func fenceSeqKey(dir Ino) []byte { return kv.AppendUint64([]byte{pFenceSeq}, uint64(dir)) }

func nameTombPrefix(dir Ino) []byte { return kv.AppendUint64([]byte{pNameTomb}, uint64(dir)) }

func nameTombKey(dir Ino, name string) []byte { return append(nameTombPrefix(dir), name...) }

func keyTombKey(key string) []byte { return append([]byte{pKeyTomb}, key...) }

func dirGoneKey(dir Ino) []byte { return kv.AppendUint64([]byte{pDirGone}, uint64(dir)) }

// Observation is the fence sequences of some directories, read before a
// bucket request that an import will rest on. The zero Observation fences
// nothing: it is for imports that rest on no earlier observation. An
// Observation holds nothing open; it may be dropped at any time.
type Observation struct {
	s    *Store
	at   time.Time      // taken, by this server's clock
	dirs map[Ino]uint64 // the fence sequence of each directory read
}

// Observe opens an observation of the directories dirs (see fences): the
// ones an import resting on it will add names to. Call it before the
// bucket request.
func (s *Store) Observe(ctx context.Context, dirs ...Ino) (o Observation, err error) {
	o = Observation{s: s, at: s.now(), dirs: make(map[Ino]uint64, len(dirs))}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		clear(o.dirs)
		for _, d := range dirs {
			if err := o.read(r, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Observation{}, fmt.Errorf("observe %v: %w", dirs, err)
	}
	return o, nil
}

// ResolveObserved is Resolve with an observation of the directory the key
// resolves to (Resolved.Parent), read in the same look at the namespace:
// for a revalidation, before its HEAD.
func (s *Store) ResolveObserved(ctx context.Context, key string) (res Resolved, o Observation, err error) {
	o = Observation{s: s, at: s.now(), dirs: map[Ino]uint64{}}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		clear(o.dirs)
		if res, err = s.resolve(r, key); err != nil || res.Parent == 0 {
			return err
		}
		return o.read(r, res.Parent)
	})
	return res, o, err
}

// read adds to o the fence sequences of dir and of each of its ancestors
// up to the root. The ancestors are what a key tombstone may name: an
// export that dropped the record of a key under dir's path before dir
// existed (or before it was back) numbered the event in the deepest
// directory on the path then, an ancestor of dir, and o orders that event
// by its read of the ancestor. A directory without a name (removed) ends
// the walk: events in it are ordered by its own read.
func (o *Observation) read(r kv.Reader, dir Ino) error {
	for depth := 0; ; depth++ {
		if _, ok := o.dirs[dir]; ok {
			return nil // read already, and so are its ancestors
		}
		if depth > 4096 {
			return fmt.Errorf("ancestors of %d: %w", dir, syscall.ELOOP)
		}
		seq, err := fenceSeq(r, dir)
		if err != nil {
			return err
		}
		o.dirs[dir] = seq
		if dir == RootIno {
			return nil
		}
		ls, err := links(r, dir)
		if err != nil || len(ls) == 0 {
			return err
		}
		dir = ls[0].Parent
	}
}

// expired reports whether o is too old to rest an import on (see fences).
func (o Observation) expired() bool {
	return o.s != nil && o.s.now().Sub(o.at) > o.s.maxObservationAge
}

// errObservationExpired refuses an import resting on an expired
// observation.
var errObservationExpired = fmt.Errorf("the bucket was looked at too long ago: %w", syscall.EAGAIN)

// fenced wraps the transaction of an import resting on o: it fails unless
// o is still within its age when the transaction has done its reads, so
// every tombstone o may need was still there when they were made (see
// fences: TrimFences deletes one only past the age plus a margin).
func (o Observation) fenced(fn func(tx kv.Txn) error) func(tx kv.Txn) error {
	return func(tx kv.Txn) error {
		if o.expired() {
			return errObservationExpired
		}
		if err := fn(tx); err != nil {
			return err
		}
		if o.expired() {
			return errObservationExpired
		}
		return nil
	}
}

func fenceSeq(r kv.Reader, dir Ino) (uint64, error) {
	v, err := r.Get(fenceSeqKey(dir))
	if errors.Is(err, kv.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("fence sequence of %d: %d bytes", dir, len(v))
	}
	return kv.Uint64(v), nil
}

// nextFence advances dir's fence sequence and returns the new number.
func nextFence(tx kv.Txn, dir Ino) (uint64, error) {
	seq, err := fenceSeq(tx, dir)
	if err != nil {
		return 0, err
	}
	seq++
	return seq, tx.Set(fenceSeqKey(dir), kv.AppendUint64(nil, seq))
}

// nameRemoved records a file-side removal of parent/name. Call it inside
// the removal's transaction.
func nameRemoved(tx kv.Txn, parent Ino, name string) error {
	seq, err := nextFence(tx, parent)
	if err != nil {
		return err
	}
	return tx.Set(nameTombKey(parent, name), kv.AppendUint64(nil, seq))
}

// dirRemoved records that dir, a directory, lost its name in p (rmdir, a
// rename over it, a bucket-side removal): an event of p, numbered in p's
// sequence, that every event of dir came before. Call it inside that
// transaction. An observation made after dir was gone reads p, not dir: a
// key tombstone that names dir is ordered by this record (see since).
func dirRemoved(tx kv.Txn, p, dir Ino) error {
	seq, err := nextFence(tx, p)
	if err != nil {
		return err
	}
	return tx.Set(dirGoneKey(dir), kv.AppendUint64(kv.AppendUint64(nil, uint64(p)), seq))
}

// keysDropped records that an export dropped the records of the keys in
// old that keys does not hold. Call it inside that transaction.
func (s *Store) keysDropped(tx kv.Txn, old, keys []Object) error {
	for _, o := range old {
		if hasKey(keys, o.Key) {
			continue
		}
		dir, err := s.deepestDir(tx, o.Key)
		if err != nil {
			return err
		}
		seq, err := nextFence(tx, dir)
		if err != nil {
			return err
		}
		if err := tx.Set(keyTombKey(o.Key), kv.AppendUint64(kv.AppendUint64(nil, uint64(dir)), seq)); err != nil {
			return err
		}
	}
	return nil
}

// deepestDir returns the deepest directory that exists on the path of
// key's parent (the root at least).
func (s *Store) deepestDir(r kv.Reader, key string) (Ino, error) {
	dir := RootIno
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return dir, nil
	}
	for _, name := range strings.Split(key[:i], "/") {
		ino, err := getEntry(r, dir, name)
		if errors.Is(err, syscall.ENOENT) {
			return dir, nil
		}
		if err != nil {
			return 0, err
		}
		in, err := s.getInode(r, ino)
		if errors.Is(err, syscall.ENOENT) {
			return dir, nil
		}
		if err != nil {
			return 0, err
		}
		if !in.IsDir() {
			return dir, nil
		}
		dir = ino
	}
	return dir, nil
}

// dropFences deletes the fence records of dir, a directory being
// forgotten: no import adds names to it any more.
func dropFences(tx kv.Txn, dir Ino) error {
	if err := tx.Delete(fenceSeqKey(dir)); err != nil {
		return err
	}
	return tx.DeleteRange(nameTombPrefix(dir), kv.PrefixEnd(nameTombPrefix(dir)))
}

func hasKey(keys []Object, key string) bool {
	for _, k := range keys {
		if k.Key == key {
			return true
		}
	}
	return false
}

// since reports whether an event of dir numbered seq came after o (see
// fences): after its read of dir. Where o did not read dir, a directory
// removed since the event stands for it: the event came before the
// removal, an event of the parent (dirRemoved), and what o read of the
// parent orders that. Otherwise it may have come after o.
func (o Observation) since(r kv.Reader, dir Ino, seq uint64) (bool, error) {
	if o.s == nil {
		return false, nil
	}
	for depth := 0; depth <= 4096; depth++ {
		if read, ok := o.dirs[dir]; ok {
			return seq > read, nil
		}
		v, err := r.Get(dirGoneKey(dir))
		if errors.Is(err, kv.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if len(v) != 16 {
			return true, nil // unreadable: fence
		}
		dir, seq = Ino(kv.Uint64(v)), kv.Uint64(v[8:])
	}
	return true, nil
}

// removedSince reports whether parent/name was removed on the file side
// after o.
func (o Observation) removedSince(r kv.Reader, parent Ino, name string) (bool, error) {
	if o.s == nil {
		return false, nil
	}
	v, err := r.Get(nameTombKey(parent, name))
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(v) != 8 {
		return true, nil // unreadable: fence
	}
	return o.since(r, parent, kv.Uint64(v))
}

// droppedSince reports whether an export dropped its record of key after
// o.
func (o Observation) droppedSince(r kv.Reader, key string) (bool, error) {
	if o.s == nil {
		return false, nil
	}
	v, err := r.Get(keyTombKey(key))
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(v) != 16 {
		return true, nil // unreadable: fence
	}
	return o.since(r, Ino(kv.Uint64(v)), kv.Uint64(v[8:]))
}

// keyRecorded reports whether an inode records the object key.
func (s *Store) keyRecorded(r kv.Reader, key string) (bool, error) {
	v, err := r.Get(objectKeyKey(key))
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	if err != nil || len(v) != 8 {
		return false, err
	}
	in, err := s.getInode(r, Ino(kv.Uint64(v)))
	if err != nil {
		return false, nil // a dangling index entry records nothing
	}
	return hasKey(in.Keys, key), nil
}

// ours reports whether the object at key is one the file side records (a
// removal or rename not carried out yet, where no name of the file side
// stands for key) or recorded until an export dropped it after o.
func (s *Store) ours(r kv.Reader, o Observation, key string) (bool, error) {
	if dropped, err := o.droppedSince(r, key); err != nil || dropped {
		return dropped, err
	}
	return s.keyRecorded(r, key)
}

// OursSince is ours, read now: whether the object at key, which a
// listing made at o showed under a name the file side does not have, is a
// file-side change the exporter has not carried out, or carried out since
// o. Such an object is no evidence of a bucket-side name.
func (s *Store) OursSince(ctx context.Context, o Observation, key string) (ok bool, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		ok, err = s.ours(r, o, key)
		return err
	})
	return ok, err
}

// importAllowed tells whether the import of it as p/name (no such name
// exists now), resting on observation o, may be added (see fences): the
// name was not removed after o, a file's object is not ours, and a
// directory with evidence has some that is not ours.
func (s *Store) importAllowed(r kv.Reader, o Observation, p Ino, it *Imported) (bool, error) {
	if removed, err := o.removedSince(r, p, it.Name); err != nil || removed {
		return false, err
	}
	if it.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		for _, k := range it.Evidence {
			if ours, err := s.ours(r, o, k); err != nil || !ours {
				return err == nil, err
			}
		}
		return len(it.Evidence) == 0, nil
	}
	if it.Obj.Key == "" {
		return true, nil
	}
	ours, err := s.ours(r, o, it.Obj.Key)
	return !ours, err
}

// fenceSighting is when this server first saw a tombstone with a value.
type fenceSighting struct {
	value []byte
	at    time.Time
}

// fenceTrimBatch bounds the tombstones one scan or delete transaction
// handles.
const fenceTrimBatch = 1000

// TrimFences deletes the tombstones that no usable observation can be
// older than (see fences): those this server has seen, unchanged, for
// longer than Options.MaxObservationAge plus fenceTrimMargin. Call it now
// and then (every minute); it remembers what it saw between calls. Any
// server may do it: a tombstone that changed since it was seen is kept.
func (s *Store) TrimFences(ctx context.Context) error {
	s.fenceTrim.Lock()
	defer s.fenceTrim.Unlock()
	if s.fenceSeen == nil {
		s.fenceSeen = map[string]fenceSighting{}
	}
	present := map[string]bool{}
	type tomb struct{ k, v []byte }
	var due []tomb
	for _, p := range []byte{pNameTomb, pKeyTomb, pDirGone} {
		lower, upper := []byte{p}, kv.PrefixEnd([]byte{p})
		for lower != nil {
			var batch []tomb
			err := s.kv.View(ctx, func(r kv.Reader) error {
				batch = batch[:0]
				return r.Scan(lower, upper, func(k, v []byte) bool {
					batch = append(batch, tomb{bytes.Clone(k), bytes.Clone(v)})
					return len(batch) < fenceTrimBatch
				})
			})
			if err != nil {
				return fmt.Errorf("trim fences: %w", err)
			}
			at := s.now() // after the scan: each tombstone committed before it
			for _, t := range batch {
				key := string(t.k)
				present[key] = true
				seen, ok := s.fenceSeen[key]
				switch {
				case !ok || !bytes.Equal(seen.value, t.v):
					s.fenceSeen[key] = fenceSighting{value: t.v, at: at}
				case at.Sub(seen.at) > s.maxObservationAge+fenceTrimMargin:
					due = append(due, t)
				}
			}
			lower = nil
			if len(batch) == fenceTrimBatch {
				lower = append(batch[len(batch)-1].k, 0)
			}
		}
	}
	for k := range s.fenceSeen {
		if !present[k] {
			delete(s.fenceSeen, k)
		}
	}
	for len(due) > 0 {
		n := min(len(due), fenceTrimBatch)
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			for i := range n {
				v, err := tx.Get(due[i].k)
				if errors.Is(err, kv.ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if bytes.Equal(v, due[i].v) { // unchanged since seen
					if err := tx.Delete(due[i].k); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("trim fences: %w", err)
		}
		for i := range n {
			delete(s.fenceSeen, string(due[i].k))
		}
		due = due[n:]
	}
	return nil
}
