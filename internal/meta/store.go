package meta

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"bucketfs/internal/kv"
)

// Key layout. Integers are big-endian so that keys sort by number.
//
//	c/fsid                      file system id (hex)
//	c/next                      next inode number to allocate
//	i<ino>                      inode record
//	d<parent><name>             directory entry: child ino + type byte
//	l<ino><parent><name>        link record (empty value)
//	x<ino><name>                extended attribute value
//	q<ino>                      export queue: earliest reconcile time (unix ns)
//	Q<due><ino>                 the same entries ordered by time
//	c/queued                    number of q entries
//	k<object key>               the inode whose Keys hold that object key
//	b<ino><block index>         a block of file data (package tier)
//	c/usage                     bytes the blocks hold: in all, of dirty files
//	u<upload id>                object key of a multipart upload in flight (uploads.go)
//	e<ino><key>                 an object key the exporter may have written for ino (intents.go)
//	U<key>                      a multipart upload of key about to be created (uploads.go)
//	c/secret/<name>             a secret made once per file system (secret.go)
//	n<client owner>             an NFS client that may reclaim state after a restart (package nfs4)
//	C<unix ns><server><seq>     what one transaction changed, for the other servers (changes.go)
//	c/changes-trimmed           the time below which change records were deleted
//	L<ino><server>              the locks one server's clients hold on ino (shared.go)
//	O<ino><server>              one server holds ino open (shared.go)
//	S<ino><server>              the NFS share reservations of one server's opens of ino (shared.go)
//	H<server>                   a server's heartbeat (package heartbeat, until the server registry)
const (
	pInode    = 'i'
	pEntry    = 'd'
	pLink     = 'l'
	pXattr    = 'x'
	pQueue    = 'q'
	pDue      = 'Q'
	pKey      = 'k'
	pUpload   = 'u'
	pIntent   = 'e'
	pUploadOf = 'U'
)

var (
	keyFsid   = []byte("c/fsid")
	keyNext   = []byte("c/next")
	keyQueued = []byte("c/queued")
)

// LostFoundPrefix starts the name of the lost+found directory at the root.
const LostFoundPrefix = ".bucketfs-lost+found-"

// Options configure a Store.
type Options struct {
	// ExportDelay is the quiet period after the last change before an inode
	// is due for export.
	ExportDelay time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// OnKeptInLostFound, if set, is told of a file the bucket deleted
	// while the file side held it open, linked into lost+found as name
	// because the file side changed it afterwards (a conflict the bucket
	// won). It is called inside the change's transaction.
	OnKeptInLostFound func(ino Ino, name string)
	// Defaults are the owner and modes of what carries no attributes of
	// its own (nil: StandardDefaults).
	Defaults *Defaults

	// ChangeLog records what each transaction changes for the other
	// servers sharing the store (changes.go); Server names this one in
	// the log (0: a random id). ChangeWindow and ChangeRetention default
	// to DefaultChangeWindow and DefaultChangeRetention.
	ChangeLog                     bool
	Server                        uint64
	ChangeWindow, ChangeRetention time.Duration
}

// Store is the namespace of one file system. It is safe for concurrent use.
type Store struct {
	kv          kv.Store
	fsid        string
	lostFound   Ino
	exportDelay time.Duration
	now         func() time.Time
	onKept      func(ino Ino, name string)
	defaults    Defaults
	fences      fences // see fences.go

	changes                       changeLog // see changes.go
	changeWindow, changeRetention time.Duration
}

// Open loads the namespace from db, creating a new file system when db is
// empty: a root directory with the owner and directory mode of
// opt.Defaults, and the lost+found directory (the same owner,
// LostFoundMode). An existing file system's lost+found made 0700 is given
// LostFoundMode once (shareLostFound).
func Open(ctx context.Context, db kv.Store, opt Options) (*Store, error) {
	s := &Store{kv: db, exportDelay: opt.ExportDelay, now: opt.Now, onKept: opt.OnKeptInLostFound,
		defaults: StandardDefaults()}
	if s.now == nil {
		s.now = time.Now
	}
	if opt.Defaults != nil {
		s.defaults = *opt.Defaults
	}
	s.changes.server = opt.Server
	for s.changes.server == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		s.changes.server = kv.Uint64(b[:])
	}
	s.changeWindow = cmp.Or(opt.ChangeWindow, DefaultChangeWindow)
	s.changeRetention = cmp.Or(opt.ChangeRetention, DefaultChangeRetention)
	if opt.ChangeLog {
		s.kv = loggingStore{Store: db, s: s}
		db = s.kv
	}
	err := db.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(keyFsid)
		if err == nil {
			s.fsid = string(v)
			return s.shareLostFound(tx)
		}
		if !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		return s.format(tx)
	})
	if err != nil {
		return nil, fmt.Errorf("open namespace: %w", err)
	}
	if err := s.bringQueueForward(ctx); err != nil {
		return nil, fmt.Errorf("open namespace: %w", err)
	}
	lf, err := s.Lookup(ctx, RootIno, s.LostFoundName())
	if err != nil {
		return nil, fmt.Errorf("open namespace: lost+found: %w", err)
	}
	s.lostFound = lf.Ino
	if err := db.Sync(ctx); err != nil {
		return nil, fmt.Errorf("open namespace: %w", err)
	}
	return s, nil
}

func (s *Store) format(tx kv.Txn) error {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	s.fsid = hex.EncodeToString(id[:])
	if err := tx.Set(keyFsid, []byte(s.fsid)); err != nil {
		return err
	}
	root := s.defaults.newRoot(s.now().UnixNano())
	if err := tx.Set(keyNext, kv.AppendUint64(nil, uint64(RootIno)+1)); err != nil {
		return err
	}
	if err := putInode(tx, &root); err != nil {
		return err
	}
	lf := Inode{Mode: syscall.S_IFDIR | LostFoundMode, Uid: root.Uid, Gid: root.Gid, Flags: Listed | NoExport}
	if _, err := s.create(tx, RootIno, s.LostFoundName(), lf); err != nil {
		return err
	}
	return tx.Set(keyLostFoundShared, nil)
}

// Fsid is the file system's random id, fixed when it was created.
func (s *Store) Fsid() string { return s.fsid }

// LostFoundName is the name of the lost+found directory at the root.
func (s *Store) LostFoundName() string { return LostFoundPrefix + s.fsid }

// LostFound is the inode number of the lost+found directory.
func (s *Store) LostFound() Ino { return s.lostFound }

// Sync makes every committed change durable.
func (s *Store) Sync(ctx context.Context) error { return s.kv.Sync(ctx) }

// KV exposes the underlying store for packages that keep their own records
// beside the namespace (counters, import state).
func (s *Store) KV() kv.Store { return s.kv }

func inodeKey(ino Ino) []byte {
	return kv.AppendUint64([]byte{pInode}, uint64(ino))
}

func entryPrefix(parent Ino) []byte {
	return kv.AppendUint64([]byte{pEntry}, uint64(parent))
}

func entryKey(parent Ino, name string) []byte {
	return append(entryPrefix(parent), name...)
}

func linkPrefix(ino Ino) []byte {
	return kv.AppendUint64([]byte{pLink}, uint64(ino))
}

func linkKey(ino, parent Ino, name string) []byte {
	return append(kv.AppendUint64(linkPrefix(ino), uint64(parent)), name...)
}

func xattrPrefix(ino Ino) []byte {
	return kv.AppendUint64([]byte{pXattr}, uint64(ino))
}

func queueKey(ino Ino) []byte {
	return kv.AppendUint64([]byte{pQueue}, uint64(ino))
}

func objectKeyKey(key string) []byte { return append([]byte{pKey}, key...) }

// takeKeys makes ino the only inode recording the object keys of keys,
// which ino has just written: an inode that recorded one of them before
// (the index names it) loses that record. Invariant: each object key is
// recorded by at most one inode, the one whose export wrote it last. An
// older record names an object that is no longer current; kept, it would
// make that inode take bucketfs's own later writes and deletes at the key
// for bucket-side changes (a file moved off a name and back after another
// file exported there would see a conflict that was not there).
func (s *Store) takeKeys(tx kv.Txn, ino Ino, keys []Object) error {
	for _, o := range keys {
		v, err := tx.Get(objectKeyKey(o.Key))
		if errors.Is(err, kv.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if len(v) != 8 || Ino(kv.Uint64(v)) == ino {
			continue
		}
		prev, err := s.getInode(tx, Ino(kv.Uint64(v)))
		if errors.Is(err, syscall.ENOENT) {
			continue
		}
		if err != nil {
			return err
		}
		n := len(prev.Keys)
		prev.Keys = slices.DeleteFunc(prev.Keys, func(k Object) bool { return k.Key == o.Key })
		if len(prev.Keys) == n {
			continue
		}
		if err := putInode(tx, &prev); err != nil {
			return err
		}
	}
	return nil
}

// indexKeys keeps the object-key index in step when ino's Keys change from
// old to new.
func indexKeys(tx kv.Txn, ino Ino, old, new []Object) error {
	keep := map[string]bool{}
	for _, o := range new {
		keep[o.Key] = true
		if err := tx.Set(objectKeyKey(o.Key), kv.AppendUint64(nil, uint64(ino))); err != nil {
			return err
		}
	}
	for _, o := range old {
		if keep[o.Key] {
			continue
		}
		v, err := tx.Get(objectKeyKey(o.Key))
		if err != nil || len(v) != 8 || Ino(kv.Uint64(v)) != ino {
			continue // another inode took the key meanwhile
		}
		if err := tx.Delete(objectKeyKey(o.Key)); err != nil {
			return err
		}
	}
	return nil
}

// KeyOwner returns the inode whose Keys include the object key, if any:
// the file side's record of that object, even when the name it had is gone
// (an unlink or rename the exporter has not carried out yet).
func (s *Store) KeyOwner(ctx context.Context, key string) (in Inode, ok bool, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(objectKeyKey(key))
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil || len(v) != 8 {
			return err
		}
		in, err = s.getInode(r, Ino(kv.Uint64(v)))
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range in.Keys {
			if k.Key == key {
				ok = true
			}
		}
		return nil
	})
	return in, ok, err
}

// getInode reads inode ino, with the attributes it takes from the
// defaults filled in.
func (s *Store) getInode(r kv.Reader, ino Ino) (Inode, error) {
	v, err := r.Get(inodeKey(ino))
	if errors.Is(err, kv.ErrNotFound) {
		return Inode{}, fmt.Errorf("inode %d: %w", ino, syscall.ENOENT)
	}
	if err != nil {
		return Inode{}, err
	}
	in, err := decodeInode(v)
	if err != nil {
		return Inode{}, err
	}
	s.defaults.apply(&in)
	return in, nil
}

// putInode writes in, keeping the tier's usage counters in step with what
// changed of its cached bytes and whether it is dirty.
func putInode(tx kv.Txn, in *Inode) error {
	if in.IsRegular() {
		if err := account(tx, in); err != nil {
			return err
		}
	}
	return tx.Set(inodeKey(in.Ino), in.encode(nil))
}

// getEntry returns the child named name in parent.
func getEntry(r kv.Reader, parent Ino, name string) (Ino, error) {
	v, err := r.Get(entryKey(parent, name))
	if errors.Is(err, kv.ErrNotFound) {
		return 0, syscall.ENOENT
	}
	if err != nil {
		return 0, err
	}
	if len(v) < 8 {
		return 0, errCorrupt
	}
	return Ino(kv.Uint64(v)), nil
}

func putEntry(tx kv.Txn, parent Ino, name string, child *Inode) error {
	v := kv.AppendUint64(make([]byte, 0, 9), uint64(child.Ino))
	v = append(v, byte(child.Type()>>12))
	if err := tx.Set(entryKey(parent, name), v); err != nil {
		return err
	}
	return tx.Set(linkKey(child.Ino, parent, name), nil)
}

func delEntry(tx kv.Txn, parent Ino, name string, child Ino) error {
	if err := tx.Delete(entryKey(parent, name)); err != nil {
		return err
	}
	return tx.Delete(linkKey(child, parent, name))
}

// enqueue schedules ino for reconciliation at due, replacing an earlier time.
func enqueue(tx kv.Txn, ino Ino, due time.Time) error {
	old, queued, err := queuedAt(tx, ino)
	if err != nil {
		return err
	}
	return enqueueAt(tx, ino, due, old, queued)
}

// enqueueNew queues an inode allocated in tx: inode numbers are never
// used twice, so it has no queue entry to replace.
func enqueueNew(tx kv.Txn, ino Ino, due time.Time) error {
	return enqueueAt(tx, ino, due, 0, false)
}

// enqueueAt is enqueue once the inode's current entry (old, if queued) is
// known.
func enqueueAt(tx kv.Txn, ino Ino, due time.Time, old int64, queued bool) error {
	t := due.UnixNano()
	if queued {
		if old == t {
			return nil
		}
		if err := tx.Delete(dueKey(old, ino)); err != nil {
			return err
		}
	} else if err := addQueued(tx, 1); err != nil {
		return err
	}
	if err := tx.Set(queueKey(ino), kv.AppendUint64(nil, uint64(t))); err != nil {
		return err
	}
	return tx.Set(dueKey(t, ino), nil)
}

// dequeue takes ino out of the queue, if it is there.
func dequeue(tx kv.Txn, ino Ino) error {
	old, queued, err := queuedAt(tx, ino)
	if err != nil || !queued {
		return err
	}
	if err := tx.Delete(queueKey(ino)); err != nil {
		return err
	}
	if err := tx.Delete(dueKey(old, ino)); err != nil {
		return err
	}
	return addQueued(tx, -1)
}

// queuedAt returns when ino is due, if it is queued.
func queuedAt(r kv.Reader, ino Ino) (due int64, queued bool, err error) {
	v, err := r.Get(queueKey(ino))
	if errors.Is(err, kv.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, errCorrupt
	}
	return int64(kv.Uint64(v)), true, nil
}

func dueKey(due int64, ino Ino) []byte {
	return kv.AppendUint64(kv.AppendUint64([]byte{pDue}, uint64(due)), uint64(ino))
}

// addQueued adjusts the queue length counter.
func addQueued(tx kv.Txn, d int64) error {
	n, err := queuedCount(tx)
	if err != nil {
		return err
	}
	return tx.Set(keyQueued, kv.AppendUint64(nil, uint64(max(n+d, 0))))
}

func queuedCount(r kv.Reader) (int64, error) {
	v, err := r.Get(keyQueued)
	if errors.Is(err, kv.ErrNotFound) {
		return 0, nil
	}
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return int64(kv.Uint64(v)), nil
}

// NextIno returns the inode number the next new inode gets. Numbers at or
// above it name no inode; after a crash that lost the end of the log, they
// may have named inodes that are gone and will be given out again.
func (s *Store) NextIno(ctx context.Context) (Ino, error) {
	var next Ino
	err := s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyNext)
		if err != nil {
			return fmt.Errorf("next inode: %w", err)
		}
		next = Ino(kv.Uint64(v))
		return nil
	})
	return next, err
}

// allocIno gives out the next inode number. Invariant: no key of the
// store names a number at or above keyNext, in any state the store can
// be in (after a crash too): a number is given out and its first keys are
// written in one transaction, and numbers never go back. So a new inode
// has nothing to replace (enqueueNew relies on it).
func (s *Store) allocIno(tx kv.Txn) (Ino, error) {
	v, err := tx.Get(keyNext)
	if err != nil {
		return 0, fmt.Errorf("allocate inode: %w", err)
	}
	ino := kv.Uint64(v)
	return Ino(ino), tx.Set(keyNext, kv.AppendUint64(nil, ino+1))
}
