package meta

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"bucketfs/internal/kv"
)

// Observation fences.
//
// Rule: an import never undoes a file-side change that the bucket
// observation it rests on could not have seen. An import (a listing page,
// a poll's new directory, a revalidated key) rests on a LIST or a HEAD
// made at some moment; between that moment and the transaction that
// applies it, the file side may remove the very name (unlink, rmdir, the
// rm -r of its directory, a rename away), and the exporter may carry the
// removal out in the bucket. Applied anyway, the import would bring the
// removed name back (on MinIO a removed directory came back, empty, a
// moment after rm -r).
//
// The store numbers these events in one sequence. An Observation takes the
// current number before the bucket request it stands for is made. Each
// file-side removal of a name (Remove; the old name of a Rename) takes the
// next number and records it for (parent, name); each export record that
// drops an object key from the key index (Synced, Forget: the exporter
// deleted the object, or it is no longer the inode's) records the next
// number for the key. The transaction that applies an import made with
// observation o:
//
//   - adds no name whose removal is numbered after o (AddImported,
//     ImportObject, including the directories of a new prefix);
//   - adds no file whose object an inode records (a removal or rename the
//     exporter has not carried out: the inode will delete or move it) or
//     whose record an export dropped after o;
//   - adds no directory all of whose evidence (Imported.Evidence, the
//     current objects the bucket showed under its prefix) is such objects.
//
// The check and the write are in one kv transaction, and kv serializes
// transactions (one writer at a time), so no removal lands between them;
// removals record their number inside their own transaction for the same
// reason. A refused import is no loss: the next observation is newer than
// the removal, and sees the bucket as the exporter left it; a genuine
// bucket-side object under the name is imported then.
//
// Records matter only to observations older than them, and observations
// live in this process only, so the records are kept in memory, and only
// while an observation older than them is open (Observation.End drops
// the rest).
//
// A record is made inside its transaction, before the commit, so that no
// import that commits after the removal misses it; kv may run that
// transaction's fn more than once, and each run records again. A record
// of a run that did not commit stands for a removal that did not happen
// (or happened later, with a later number): it can only refuse an import,
// and a refused import is no loss (above). Records never let an import
// through, so a repeated or spurious one is harmless.
type fences struct {
	mu      sync.Mutex
	seq     uint64         // the last number handed out
	open    map[uint64]int // open observations by number
	removed map[nameRef]uint64
	dropped map[string]uint64
	log     []fenceRecord // the records in number order, to drop them
}

// nameRef is one name in one directory.
type nameRef struct {
	parent Ino
	name   string
}

type fenceRecord struct {
	seq  uint64
	name nameRef
	key  string // set for a dropped key record, else name is
}

// Observation is a point in the sequence of file-side changes, taken
// before a bucket request that an import will rest on. End it when the
// import is applied. The zero Observation fences nothing: it is for
// imports that rest on no earlier observation.
type Observation struct {
	f   *fences
	seq uint64
}

// Observe opens an observation at the current point (see fences).
func (s *Store) Observe() Observation {
	f := &s.fences
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil {
		f.open = map[uint64]int{}
	}
	f.open[f.seq]++
	return Observation{f: f, seq: f.seq}
}

// End closes the observation, dropping the records that no open
// observation is older than. Call it once.
func (o Observation) End() {
	f := o.f
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[o.seq]--; f.open[o.seq] <= 0 {
		delete(f.open, o.seq)
	}
	if len(f.open) == 0 {
		f.removed, f.dropped, f.log = nil, nil, nil
		return
	}
	oldest := f.seq
	for seq := range f.open {
		oldest = min(oldest, seq)
	}
	n := 0
	for n < len(f.log) && f.log[n].seq <= oldest {
		r := f.log[n]
		if r.key != "" {
			if f.dropped[r.key] == r.seq {
				delete(f.dropped, r.key)
			}
		} else if f.removed[r.name] == r.seq {
			delete(f.removed, r.name)
		}
		n++
	}
	f.log = f.log[n:]
}

// record numbers a change and keeps it if an open observation is older.
// Callers hold f.mu.
func (f *fences) record(r fenceRecord) {
	f.seq++
	if len(f.open) == 0 {
		return // every later observation is newer
	}
	r.seq = f.seq
	if r.key != "" {
		if f.dropped == nil {
			f.dropped = map[string]uint64{}
		}
		f.dropped[r.key] = r.seq
	} else {
		if f.removed == nil {
			f.removed = map[nameRef]uint64{}
		}
		f.removed[r.name] = r.seq
	}
	f.log = append(f.log, r)
}

// nameRemoved records a file-side removal of parent/name. Call it inside
// the removal's transaction.
func (s *Store) nameRemoved(parent Ino, name string) {
	s.fences.mu.Lock()
	defer s.fences.mu.Unlock()
	s.fences.record(fenceRecord{name: nameRef{parent, name}})
}

// keysDropped records that an export dropped the records of the keys in
// old that keys does not hold. Call it inside that transaction.
func (s *Store) keysDropped(old, keys []Object) {
	s.fences.mu.Lock()
	defer s.fences.mu.Unlock()
	for _, o := range old {
		if !hasKey(keys, o.Key) {
			s.fences.record(fenceRecord{key: o.Key})
		}
	}
}

func hasKey(keys []Object, key string) bool {
	for _, k := range keys {
		if k.Key == key {
			return true
		}
	}
	return false
}

// removedSince reports whether parent/name was removed on the file side
// after o.
func (o Observation) removedSince(parent Ino, name string) bool {
	if o.f == nil {
		return false
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	return o.f.removed[nameRef{parent, name}] > o.seq
}

// droppedSince reports whether an export dropped its record of key after o.
func (o Observation) droppedSince(key string) bool {
	if o.f == nil {
		return false
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	return o.f.dropped[key] > o.seq
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
	if o.droppedSince(key) {
		return true, nil
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
	if o.removedSince(p, it.Name) {
		return false, nil
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
