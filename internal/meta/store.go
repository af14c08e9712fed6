package meta

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"bucketfs/internal/kv"
)

// Key layout. Integers are big-endian so that keys sort by number. No key
// is read and written by every operation (see counters.go).
//
//	c/fsid                      file system id (hex)
//	c/next                      first inode number no Store has claimed
//	i<ino>                      inode record
//	d<parent><name>             directory entry: child ino + type byte
//	l<ino><parent><name>        link record (empty value): a name of ino besides the one its record holds (addLink)
//	x<ino><name>                extended attribute value
//	q<ino>                      export queue: earliest reconcile time (unix ns)
//	Q<due><ino>                 the same entries ordered by time
//	c/queued/<store><sub>       a cell of the number of q entries (counters.go)
//	k<object key>               the inode whose Keys hold that object key
//	b<ino><block index>         a block of file data (package tier)
//	c/usage/<store><sub>        a cell of the bytes the blocks hold: in all,
//	                            unexported (Usage; counters.go)
//	u<upload id>                object key of a multipart upload in flight (uploads.go)
//	e<ino><key>                 an object key the exporter may have written for ino (intents.go)
//	U<key>                      a multipart upload of key about to be created (uploads.go)
//	c/secret/<name>             a secret made once per file system (secret.go)
//	N<identity><client owner>   a client of one NFS server that may reclaim state after its restart (clients.go)
//	n<client owner>             the same, of the earlier single-server form, taken over at a start (clients.go)
//	C<unix ns><server><seq>     what one transaction changed, for the other servers (changes.go)
//	c/bucket                    s3://bucket/prefix the file system mirrors (origin.go)
//	c/changes-trimmed           the time below which change records were deleted
//	f<dir>                      a directory's fence sequence (fences.go)
//	g<dir><name>                a name removed from dir: its fence number (fences.go)
//	G<object key>               a key whose record an export dropped: <dir><fence number> (fences.go)
//	F<dir>                      a removed directory: <parent><fence number of the removal> (fences.go)
//	r<server id>                a running server: host, pid, addresses, heartbeat (servers.go)
//	L<lease name>               a lease's holder and fencing token (lease.go)
//	L<lease name>/renewal       its renewals: count, times (lease.go)
//	c/flush/asked, c/flush/done flushes asked of the lease holder, and done (servers.go)
//	w<object key>               an event's key handed to the lease holder (servers.go)
//	a<dir ino>                  a directory used through some server, for the holder's poller (servers.go)
//	P<ino><server>              the locks one server's clients hold on ino (shared.go)
//	O<ino><server>              one server holds ino open (shared.go)
//	S<ino><server>              the NFS share reservations of one server's opens of ino (shared.go)
//	B<ino><identity>            another server dropped a dead run's locks on ino (shared.go)
//	I<server>                   the NFS identity of one run of an NFS server (shared.go)
//	W<ino>                      the file's size and times before a write still in pieces (unfinished.go)
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
	keyFsid = []byte("c/fsid")
	keyNext = []byte("c/next")
	// keyFormat holds the file system's metadata format: the newest
	// that a bucketfs which opened it writes (checkFormat).
	keyFormat = []byte("c/format")
)

// MetaFormat is the metadata format this bucketfs writes: 3 since inode
// records of version 3 and a file's first name kept in its inode record
// (record.go, addLink); 4 since the markers of unfinished writes
// (unfinished.go), which an older bucketfs would neither undo nor delete,
// so that a later start of this one would set back a file by a marker
// the older one had left stale. It reads every earlier format. A
// bucketfs from before format 3 has no check and reports a corrupt inode
// record on a file system at format 3: every server of a file system
// must run a bucketfs that knows its format.
const MetaFormat = 4

// ErrNewerFormat says the file system was written by a newer bucketfs.
var ErrNewerFormat = errors.New("meta: the file system was written by a newer bucketfs")

// checkFormat refuses a file system whose metadata format is newer than
// MetaFormat, and records MetaFormat on one that is older (or from before
// the format was recorded): from now on records of this format are
// written to it.
func checkFormat(tx kv.Txn) error {
	v, err := tx.Get(keyFormat)
	switch {
	case errors.Is(err, kv.ErrNotFound):
	case err != nil:
		return err
	case len(v) != 8:
		return fmt.Errorf("metadata format record: %w", errCorrupt)
	case kv.Uint64(v) > MetaFormat:
		return fmt.Errorf("%w (metadata format %d; this bucketfs knows up to %d): run that version or a later one", ErrNewerFormat, kv.Uint64(v), MetaFormat)
	case kv.Uint64(v) == MetaFormat:
		return nil
	}
	return tx.Set(keyFormat, kv.AppendUint64(nil, MetaFormat))
}

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
	// won). It is called once per file kept, after the change's
	// transaction has committed (a transaction's fn may run more than
	// once, see package kv), by the goroutine that made the change.
	OnKeptInLostFound func(ino Ino, name string)
	// KeepUnfinished leaves the markers of writes a crash cut short
	// (unfinished.go) for the next Open to undo: for a look at a stopped
	// file system (bucketfs status) that must not change files.
	KeepUnfinished bool
	// Defaults are the owner and modes of what carries no attributes of
	// its own (nil: StandardDefaults).
	Defaults *Defaults

	// ChangeLog records what each transaction changes for the other
	// servers sharing the store (changes.go); Server names this one in
	// the log (0: a random id). ChangeWindow and ChangeRetention default
	// to DefaultChangeWindow and DefaultChangeRetention.
	// Bucket names the bucket and prefix the file system mirrors
	// ("s3://name/prefix"): Open records it in a new namespace and
	// refuses a namespace made for another (origin.go). "" skips the check.
	Bucket string

	ChangeLog                     bool
	Server                        uint64
	ChangeWindow, ChangeRetention time.Duration

	// EarlierRun, if set, tells whether a server is an earlier run of
	// this one (shared.go): its lock, open and share records, while it is
	// alive, neither bind this server nor are deleted by it. It is asked
	// inside kv transactions: it must answer from memory.
	EarlierRun func(server uint64) bool

	// MaxObservationAge bounds how long an Observation serves imports
	// (fences.go); 0 means DefaultMaxObservationAge.
	MaxObservationAge time.Duration
}

// Store is the namespace of one file system. It is safe for concurrent use.
type Store struct {
	kv          kv.Store
	fsid        string
	lostFound   Ino
	exportDelay time.Duration
	now         func() time.Time
	onKept      func(ino Ino, name string)
	// undo counts what Open did with the markers of writes the last run
	// left unfinished (unfinished.go).
	undo     struct{ done, skipped int }
	defaults Defaults
	inos     inoRange // the numbers this Store gives out (counters.go)
	cells    uint64   // names this Store's counter cells (counters.go)
	deltas   deltaSeq // this Store's counter deltas (counters.go)
	// Observation fences (fences.go): the age bound, and what
	// TrimFences saw of the tombstones, by key.
	maxObservationAge time.Duration
	fenceTrim         sync.Mutex
	fenceSeen         map[string]fenceSighting

	changes                       changeLog // see changes.go
	changeWindow, changeRetention time.Duration

	earlier func(server uint64) bool // Options.EarlierRun
}

// Open loads the namespace from db, creating a new file system when db is
// empty: a root directory with the owner and directory mode of
// opt.Defaults, and the lost+found directory (the same owner,
// LostFoundMode). An existing file system's lost+found made 0700 is given
// LostFoundMode once (shareLostFound). Each Open claims its first range of
// inode numbers and folds the counters' cells into its own (counters.go),
// so that two Stores open on one db (two servers sharing one database)
// give out different numbers and write different cells.
func Open(ctx context.Context, db kv.Store, opt Options) (*Store, error) {
	// Transactions under a lease holder's fence check it (lease.go).
	db = fencedKV{db}
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
	s.earlier = opt.EarlierRun
	s.changeRetention = cmp.Or(opt.ChangeRetention, DefaultChangeRetention)
	s.maxObservationAge = cmp.Or(opt.MaxObservationAge, DefaultMaxObservationAge)
	if opt.ChangeLog {
		s.kv = loggingStore{Store: db, s: s}
		db = s.kv
	}
	s.kv = foldingKV{Store: s.kv, s: s}
	db = s.kv
	var inos Ino
	err := db.Update(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(keyFsid)
		switch {
		case err == nil:
			s.fsid = string(v)
			if err := s.shareLostFound(tx); err != nil {
				return err
			}
		case errors.Is(err, kv.ErrNotFound):
			if err := s.format(tx); err != nil {
				return err
			}
		default:
			return err
		}
		if err := checkFormat(tx); err != nil {
			return err
		}
		if err := checkBucket(tx, opt.Bucket); err != nil {
			return err
		}
		// The Store's first range of inode numbers, whose first number
		// names its counter cells; the cells of earlier Stores, and the
		// counters of a file system made before cells, fold into them.
		if inos, err = claimInos(tx, inoClaim); err != nil {
			return err
		}
		s.cells = uint64(inos)
		if err := queuedCounter.fold(tx, s.cell(queuedCounter)); err != nil {
			return err
		}
		return usageCounter.fold(tx, s.cell(usageCounter))
	})
	if err != nil {
		return nil, fmt.Errorf("open namespace: %w", err)
	}
	s.inos.set(inos, inoClaim)
	if !opt.KeepUnfinished {
		if err := s.undoUnfinished(ctx); err != nil {
			return nil, fmt.Errorf("open namespace: %w", err)
		}
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
	if err := s.putInode(tx, &root); err != nil {
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

// inodeKeys returns the keys of inos' records, in order.
func inodeKeys(inos []Ino) [][]byte {
	keys := make([][]byte, len(inos))
	for i, ino := range inos {
		keys[i] = inodeKey(ino)
	}
	return keys
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
		if err := s.putInode(tx, &prev); err != nil {
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
	in, err := decodeInode(ino, v)
	if err != nil {
		return Inode{}, err
	}
	s.defaults.apply(&in)
	return in, nil
}

// putInode writes in, keeping the tier's usage counters in step with what
// changed of its cached bytes and whether it is dirty.
func (s *Store) putInode(tx kv.Txn, in *Inode) error {
	if in.IsRegular() {
		if err := s.account(tx, in); err != nil {
			return err
		}
	}
	return tx.Set(inodeKey(in.Ino), in.encode(nil))
}

// putNewInode is putInode for an inode whose number nothing held (a new
// one: allocIno and inos.take give out numbers no record has, see
// counters.go): its usage is added to the counters whole, with no read
// of an earlier record.
func (s *Store) putNewInode(tx kv.Txn, in *Inode) error {
	if in.IsRegular() {
		if err := s.addUsage(tx, in.Ino, usageOf(in)); err != nil {
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

// appendEntry appends the value of a directory entry of child, an inode
// of file type typ: child in 8 bytes big-endian (what prefetchEntry reads
// ahead by), then typ>>12 in one byte.
func appendEntry(b []byte, child Ino, typ uint32) []byte {
	return append(kv.AppendUint64(b, uint64(child)), byte(typ>>12))
}

// decodeEntry reads the value appendEntry wrote.
func decodeEntry(v []byte) (child Ino, typ uint32, ok bool) {
	if len(v) < 9 {
		return 0, 0, false
	}
	return Ino(kv.Uint64(v)), uint32(v[8]) << 12, true
}

// putEntry adds the name parent/name of child: its directory entry, and
// its link (addLink), writing child's record when the link went there.
// A caller that changes child further writes it again.
func (s *Store) putEntry(tx kv.Txn, parent Ino, name string, child *Inode) error {
	inRecord, err := addLink(tx, parent, name, child)
	if err != nil || !inRecord {
		return err
	}
	return s.putInode(tx, child)
}

// addLink writes the directory entry parent/name of child and records
// the link: in child's record when that holds none (child.link; the
// caller writes child), otherwise as a link record of its own.
//
// Invariant: the names of an inode are the link its record holds (if
// any) and its link records, each name once: a link record never repeats
// the record's link. A directory entry and its link are added and removed
// together (addLink, dropLink). An inode made by this version has its
// first name in its record, so that a file with one name, the usual case,
// costs no row besides its record, its directory entry and its object
// key; stores written before hold link records only, and both are read
// (links). A directory has one name: when its record holds it, it has no
// link record (its name leaves the record only by dropLink, and the next
// addLink of it puts one back there), so links reads no link records of it.
func addLink(tx kv.Txn, parent Ino, name string, child *Inode) (inRecord bool, err error) {
	if err := tx.Set(entryKey(parent, name), appendEntry(make([]byte, 0, 9), child.Ino, child.Type())); err != nil {
		return false, err
	}
	if child.link.Parent == 0 {
		child.link = Link{Parent: parent, Name: name}
		return true, nil
	}
	return false, tx.Set(linkKey(child.Ino, parent, name), nil)
}

// delEntry removes the name parent/name of child (dropLink), writing
// child's record when the link was there. A caller that changes child
// further writes it again.
func (s *Store) delEntry(tx kv.Txn, parent Ino, name string, child *Inode) error {
	inRecord, err := dropLink(tx, parent, name, child)
	if err != nil || !inRecord {
		return err
	}
	return s.putInode(tx, child)
}

// dropLink deletes the directory entry parent/name of child and its link:
// from child's record when it holds that one (the caller writes child),
// otherwise its link record.
func dropLink(tx kv.Txn, parent Ino, name string, child *Inode) (inRecord bool, err error) {
	if err := tx.Delete(entryKey(parent, name)); err != nil {
		return false, err
	}
	if child.link == (Link{Parent: parent, Name: name}) {
		child.link = Link{}
		return true, nil
	}
	return false, tx.Delete(linkKey(child.Ino, parent, name))
}

// enqueue schedules ino for reconciliation at due, replacing an earlier time.
func (s *Store) enqueue(tx kv.Txn, ino Ino, due time.Time) error {
	old, queued, err := queuedAt(tx, ino)
	if err != nil {
		return err
	}
	return s.enqueueAt(tx, ino, due, old, queued)
}

// enqueueNew queues an inode allocated in tx: inode numbers are never
// used twice, so it has no queue entry to replace.
func (s *Store) enqueueNew(tx kv.Txn, ino Ino, due time.Time) error {
	return s.enqueueAt(tx, ino, due, 0, false)
}

// enqueueAt is enqueue once the inode's current entry (old, if queued) is
// known.
func (s *Store) enqueueAt(tx kv.Txn, ino Ino, due time.Time, old int64, queued bool) error {
	t := due.UnixNano()
	if queued {
		if old == t {
			return nil
		}
		if err := tx.Delete(dueKey(old, ino)); err != nil {
			return err
		}
	} else if err := s.addQueued(tx, ino, 1); err != nil {
		return err
	}
	if err := tx.Set(queueKey(ino), kv.AppendUint64(nil, uint64(t))); err != nil {
		return err
	}
	return tx.Set(dueKey(t, ino), nil)
}

// dequeue takes ino out of the queue, if it is there.
func (s *Store) dequeue(tx kv.Txn, ino Ino) error {
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
	return s.addQueued(tx, ino, -1)
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
