package meta

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/kv"
)

// DataDirty marks an inode whose bytes (not only attributes) changed since
// the last export.
const DataDirty Flags = 1 << 8

// Change says what an Update did to an inode, and so what must reach the
// bucket.
type Change int

const (
	// NoChange: nothing the bucket keeps (atime, xattrs, lock state).
	NoChange Change = iota
	// AttrChange: mode, owner or times; exported as a metadata update.
	AttrChange
	// DataChange: the bytes changed; exported as a new object version.
	DataChange
)

// Entry is one directory entry.
type Entry struct {
	Name string
	Ino  Ino
	Type uint32 // S_IFMT bits
}

// Get returns the inode numbered ino.
func (s *Store) Get(ctx context.Context, ino Ino) (in Inode, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		in, err = s.getInode(r, ino)
		return err
	})
	return in, err
}

// GetMany returns the inodes numbered inos that exist, in one read
// transaction (one round trip on PostgreSQL).
func (s *Store) GetMany(ctx context.Context, inos []Ino) (out []Inode, err error) {
	keys := inodeKeys(inos)
	err = s.kv.View(ctx, func(r kv.Reader) error {
		if err := r.Prefetch(keys...); err != nil {
			return err
		}
		out = out[:0]
		for _, ino := range inos {
			in, err := s.getInode(r, ino)
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, in)
		}
		return nil
	})
	return out, err
}

// LookupIn returns directory parent and its child named name, read in
// one transaction: a lookup that checks the directory first costs one
// read. An error reading the directory is err with dir zero; a missing
// child is err (ENOENT) with dir read.
func (s *Store) LookupIn(ctx context.Context, parent Ino, name string) (dir, in Inode, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		if err := prefetchEntry(r, parent, name, inodeKey(parent)); err != nil {
			return err
		}
		if dir, err = s.getInode(r, parent); err != nil {
			return err
		}
		ino, err := getEntry(r, parent, name)
		if err != nil {
			return err
		}
		in, err = s.getInode(r, ino)
		return err
	})
	if err != nil {
		return dir, Inode{}, fmt.Errorf("lookup %q in %d: %w", name, parent, err)
	}
	return dir, in, nil
}

// Lookup returns the child named name in directory parent.
func (s *Store) Lookup(ctx context.Context, parent Ino, name string) (in Inode, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		if err := prefetchEntry(r, parent, name); err != nil {
			return err
		}
		ino, err := getEntry(r, parent, name)
		if err != nil {
			return err
		}
		in, err = s.getInode(r, ino)
		return err
	})
	if err != nil {
		return Inode{}, fmt.Errorf("lookup %q in %d: %w", name, parent, err)
	}
	return in, nil
}

// prefetchEntry reads ahead the entry name of parent, the inode it names
// (an entry's value begins with the inode's number) and keys, in one
// round trip on PostgreSQL.
func prefetchEntry(r kv.Reader, parent Ino, name string, keys ...[]byte) error {
	return r.PrefetchRef(entryKey(parent, name), []byte{pInode}, 8, keys...)
}

// Check is called inside a transaction with the current state of the
// inodes an operation touches, so that permission checks see exactly what
// the operation changes. A non-nil error aborts the operation. Like every
// function this package calls inside a transaction (the fn of Update,
// WriteData, ResizeData, Synced; the checks of Create, Link, Remove,
// Rename and SetXattr), it may be called more than once for one
// operation, as kv may run the transaction again: it must change nothing
// but the inodes it is given, and set any result of its own afresh.
type Check func(parent, child *Inode) error

// Create makes a new inode from tmpl (Mode, Uid, Gid, Rdev, Target, Size,
// Flags are used) under the name name in parent. It fails with EEXIST when
// the name is taken. check, if non-nil, sees the parent and the new inode,
// which it may change (a set-group-id parent's group): each run of the
// transaction hands it a fresh copy of tmpl, so a run that did not commit
// leaves nothing behind.
func (s *Store) Create(ctx context.Context, parent Ino, name string, tmpl Inode, check Check) (in Inode, err error) {
	return s.create1(ctx, parent, name, tmpl, check, false, 0)
}

// CreateOpen is Create that also records, in the same transaction, that
// server holds the new inode open (as MarkOpen does): a create and its
// open cost one transaction.
func (s *Store) CreateOpen(ctx context.Context, parent Ino, name string, tmpl Inode, check Check, server uint64) (in Inode, err error) {
	return s.create1(ctx, parent, name, tmpl, check, true, server)
}

func (s *Store) create1(ctx context.Context, parent Ino, name string, tmpl Inode, check Check, open bool, server uint64) (in Inode, err error) {
	if err := s.reserveInos(ctx, 1); err != nil {
		return Inode{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		// The parent and the name, in one round trip on PostgreSQL.
		if err := tx.Prefetch(inodeKey(parent), entryKey(parent, name)); err != nil {
			return err
		}
		p, err := s.getInode(tx, parent)
		if err != nil {
			return err
		}
		child := tmpl
		if check != nil {
			if err := check(&p, &child); err != nil {
				return err
			}
		}
		if in, err = s.createIn(tx, &p, name, child); err != nil || !open {
			return err
		}
		return tx.Set(serverInoKey(pOpen, in.Ino, server), nil)
	})
	if err != nil {
		return Inode{}, fmt.Errorf("create %q in %d: %w", name, parent, err)
	}
	return in, nil
}

func (s *Store) create(tx kv.Txn, parent Ino, name string, in Inode) (Inode, error) {
	p, err := s.getInode(tx, parent)
	if err != nil {
		return Inode{}, err
	}
	return s.createIn(tx, &p, name, in)
}

// createIn is create with the parent p already read in tx.
func (s *Store) createIn(tx kv.Txn, p *Inode, name string, in Inode) (Inode, error) {
	parent := p.Ino
	if !p.IsDir() {
		return Inode{}, syscall.ENOTDIR
	}
	if p.Nlink == 0 {
		return Inode{}, syscall.ENOENT
	}
	if _, err := getEntry(tx, parent, name); err == nil {
		return Inode{}, syscall.EEXIST
	} else if !errors.Is(err, syscall.ENOENT) {
		return Inode{}, err
	}
	var err error
	if in.Ino, err = s.allocIno(tx); err != nil {
		return Inode{}, err
	}
	in.link = Link{} // a new inode: no name yet, whatever in was copied from
	now := s.now()
	ns := now.UnixNano()
	in.Atime, in.Mtime, in.Ctime = ns, ns, ns
	in.Nlink = 1
	if in.IsDir() {
		in.Nlink = 2
		in.Flags |= Listed
		p.Nlink++
	}
	in.Backed = 0 // nothing of it is in the bucket
	if !in.Has(NoExport) {
		in.Gen = 1
		in.Flags |= DataDirty
		if err := s.enqueueNew(tx, in.Ino, now.Add(s.exportDelay)); err != nil {
			return Inode{}, err
		}
	}
	p.Mtime, p.Ctime = ns, ns
	if err := s.putInode(tx, p); err != nil {
		return Inode{}, err
	}
	if _, err := addLink(tx, parent, name, &in); err != nil {
		return Inode{}, err
	}
	if err := s.putNewInode(tx, &in); err != nil {
		return Inode{}, err
	}
	return in, nil
}

// Link adds the name newName in newParent for the existing non-directory ino.
func (s *Store) Link(ctx context.Context, ino, newParent Ino, newName string, check Check) (in Inode, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		if in, err = s.getInode(tx, ino); err != nil {
			return err
		}
		p, err := s.getInode(tx, newParent)
		if err != nil {
			return err
		}
		switch {
		case in.IsDir():
			return syscall.EPERM
		case !p.IsDir():
			return syscall.ENOTDIR
		case in.Nlink == 0 || p.Nlink == 0:
			return syscall.ENOENT
		}
		if check != nil {
			if err := check(&p, &in); err != nil {
				return err
			}
		}
		if _, err := getEntry(tx, newParent, newName); err == nil {
			return syscall.EEXIST
		}
		now := s.now()
		in.Nlink++
		in.Flags &^= DeletedInBucket
		in.Ctime = now.UnixNano()
		p.Mtime, p.Ctime = in.Ctime, in.Ctime
		if err := s.markChanged(tx, &in, NoChange, now, nil); err != nil {
			return err
		}
		if err := s.putInode(tx, &p); err != nil {
			return err
		}
		return s.putEntry(tx, newParent, newName, &in)
	})
	if err != nil {
		return Inode{}, fmt.Errorf("link %d as %q in %d: %w", ino, newName, newParent, err)
	}
	return in, nil
}

// Remove unlinks name from parent: a non-directory when dir is false
// (unlink), an empty directory when dir is true (rmdir). It returns the
// inode as it is after the removal (Nlink 0 when this was its last name).
func (s *Store) Remove(ctx context.Context, parent Ino, name string, dir bool, check Check) (in Inode, err error) {
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		p, err := s.getInode(tx, parent)
		if err != nil {
			return err
		}
		ino, err := getEntry(tx, parent, name)
		if err != nil {
			return err
		}
		if in, err = s.getInode(tx, ino); err != nil {
			return err
		}
		if check != nil {
			if err := check(&p, &in); err != nil {
				return err
			}
		}
		if in.Has(NoExport) && parent == RootIno {
			return syscall.EPERM // lost+found itself stays
		}
		if err := s.unlink(tx, &p, name, &in, dir); err != nil {
			return err
		}
		if err := s.putInode(tx, &p); err != nil {
			return err
		}
		return nameRemoved(tx, parent, name)
	})
	if err != nil {
		return Inode{}, fmt.Errorf("remove %q from %d: %w", name, parent, err)
	}
	return in, nil
}

// unlink removes the entry name of in from p, updating both in memory and in
// to the store (p is written by the caller).
func (s *Store) unlink(tx kv.Txn, p *Inode, name string, in *Inode, dir bool) error {
	if dir != in.IsDir() {
		if dir {
			return syscall.ENOTDIR
		}
		return syscall.EISDIR
	}
	if dir {
		empty, err := isEmpty(tx, in.Ino)
		if err != nil {
			return err
		}
		if !empty {
			return syscall.ENOTEMPTY
		}
		in.Nlink = 0
		p.Nlink--
		if err := dirRemoved(tx, p.Ino, in.Ino); err != nil {
			return err
		}
	} else {
		in.Nlink--
	}
	now := s.now()
	ns := now.UnixNano()
	p.Mtime, p.Ctime, in.Ctime = ns, ns, ns
	if _, err := dropLink(tx, p.Ino, name, in); err != nil {
		return err
	}
	return s.markChanged(tx, in, NoChange, now, nil) // writes in
}

func isEmpty(r kv.Reader, dir Ino) (bool, error) {
	empty := true
	prefix := entryPrefix(dir)
	err := r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		empty = false
		return false
	})
	return empty, err
}

// keptFile is a file that keepDeletedInBucket linked into lost+found in
// a transaction, as name (empty: none). The operation reports it
// (reportKept) after its transaction has committed, never from inside it:
// kv may run a transaction's fn more than once, and only the run that
// commits kept the file.
type keptFile struct {
	ino  Ino
	name string
}

// reportKept tells Options.OnKeptInLostFound of k, if it names a file.
func (s *Store) reportKept(k keptFile) {
	if k.name != "" && s.onKept != nil {
		s.onKept(k.ino, k.name)
	}
}

// markChanged records a change of in, writes it, and schedules it for
// export after the quiet period. A change other than NoChange may keep in
// in lost+found (keepDeletedInBucket): *kept says so, for the caller to
// report once its transaction has committed; kept may be nil for
// NoChange only.
func (s *Store) markChanged(tx kv.Txn, in *Inode, c Change, now time.Time, kept *keptFile) error {
	return s.markChangedUntil(tx, in, c, now.Add(s.exportDelay), kept)
}

// markChangedUntil is markChanged with the end of the quiet period given.
func (s *Store) markChangedUntil(tx kv.Txn, in *Inode, c Change, due time.Time, kept *keptFile) error {
	if c != NoChange && in.Nlink == 0 && in.Has(DeletedInBucket) {
		now := s.now()
		name, err := s.keepDeletedInBucket(tx, in, now)
		if err != nil {
			return err
		}
		*kept = keptFile{ino: in.Ino, name: name}
	}
	// A file-side change fixes the attributes the inode shows now: its
	// export records them (see Defaults).
	in.Flags &^= Defaulted
	switch c {
	case AttrChange:
		in.Gen++
	case DataChange:
		in.Gen++
		in.Flags |= DataDirty
	}
	if err := s.putInode(tx, in); err != nil {
		return err
	}
	if in.Has(NoExport) {
		return nil
	}
	if c == NoChange {
		// A change of names leaves Gen alone: the new queue token is all
		// that tells an export under way (meta.Synced) that the names it
		// worked from are gone, so it is always written.
		return s.enqueue(tx, in.Ino, due)
	}
	return s.restartQuietPeriod(tx, in.Ino, due)
}

// restartQuietPeriod moves ino's export to due. A burst of writes would
// rewrite the queue entry on every write; when due is later than the
// entry by a small fraction of the delay only, the entry is left as it
// is, so the export may come that much earlier than a full quiet period.
// An earlier due (the end of a split write, see PieceGrace) is always
// taken.
func (s *Store) restartQuietPeriod(tx kv.Txn, ino Ino, due time.Time) error {
	if at, queued, err := queuedAt(tx, ino); err != nil {
		return err
	} else if d := due.UnixNano() - at; queued && d >= 0 && d < int64(s.exportDelay/64) {
		return nil
	}
	return s.enqueue(tx, ino, due)
}

// Update applies fn to the current inode in one transaction. fn says what it
// changed; anything but NoChange schedules the inode for export. fn may run
// more than once (see kv's rules for callers), each time on the inode as it
// is then: it must only change the inode it is given.
func (s *Store) Update(ctx context.Context, ino Ino, fn func(in *Inode) (Change, error)) (in Inode, err error) {
	var kept keptFile
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		kept = keptFile{}
		if in, err = s.getInode(tx, ino); err != nil {
			return err
		}
		c, err := fn(&in)
		if err != nil {
			return err
		}
		if c == NoChange {
			return s.putInode(tx, &in)
		}
		return s.markChanged(tx, &in, c, s.now(), &kept)
	})
	if err != nil {
		return Inode{}, fmt.Errorf("update inode %d: %w", ino, err)
	}
	s.reportKept(kept)
	return in, nil
}

// ReadDir returns up to limit entries of dir whose names sort after after,
// in name order.
func (s *Store) ReadDir(ctx context.Context, dir Ino, after string, limit int) (out []Entry, err error) {
	prefix := entryPrefix(dir)
	lower := prefix
	if after != "" {
		lower = append(entryKey(dir, after), 0)
	}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(lower, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			ino, typ, ok := decodeEntry(v)
			if !ok {
				return true
			}
			out = append(out, Entry{Name: string(k[len(prefix):]), Ino: ino, Type: typ})
			return len(out) < limit
		})
	})
	if err != nil {
		return nil, fmt.Errorf("readdir %d: %w", dir, err)
	}
	return out, nil
}

// Links returns the (parent, name) pairs that name ino.
func (s *Store) Links(ctx context.Context, ino Ino) (out []Link, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		out, err = links(r, ino)
		return err
	})
	return out, err
}

// Link is one name of an inode.
type Link struct {
	Parent Ino
	Name   string
}

// links returns the names of ino: the one its record holds and its link
// records (addLink), in the order of (parent, name) as link records sort.
func links(r kv.Reader, ino Ino) (out []Link, err error) {
	var inRecord Link
	v, err := r.Get(inodeKey(ino))
	switch {
	case err == nil:
		in, err := decodeInode(ino, v)
		if err != nil {
			return nil, err
		}
		inRecord = in.link
		if inRecord.Parent != 0 && in.IsDir() {
			return []Link{inRecord}, nil // its only name (addLink)
		}
	case !errors.Is(err, kv.ErrNotFound):
		return nil, err
	}
	prefix := linkPrefix(ino)
	err = r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		rest := k[len(prefix):]
		if len(rest) >= 8 {
			out = append(out, Link{Parent: Ino(kv.Uint64(rest)), Name: string(rest[8:])})
		}
		return true
	})
	if err != nil || inRecord.Parent == 0 {
		return out, err
	}
	i, _ := slices.BinarySearchFunc(out, inRecord, func(l, t Link) int {
		return cmp.Or(cmp.Compare(l.Parent, t.Parent), strings.Compare(l.Name, t.Name))
	})
	return slices.Insert(out, i, inRecord), nil
}

// Paths returns every path of ino, relative to the root and without a
// leading slash ("" for the root itself). A path under the lost+found
// directory is returned with underLostFound set, so the exporter can leave it
// alone.
func (s *Store) Paths(ctx context.Context, ino Ino) (paths []string, underLostFound []bool, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		paths, underLostFound, err = s.paths(r, ino)
		return err
	})
	return paths, underLostFound, err
}

func (s *Store) paths(r kv.Reader, ino Ino) (paths []string, underLostFound []bool, err error) {
	ls, err := links(r, ino)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range ls {
		dir, lf, err := s.dirPath(r, l.Parent)
		if err != nil {
			return nil, nil, err
		}
		paths = append(paths, dir+l.Name)
		underLostFound = append(underLostFound, lf)
	}
	return paths, underLostFound, nil
}

// dirPath returns the path of directory ino with a trailing slash ("" for
// the root), and whether it lies under lost+found.
func (s *Store) dirPath(r kv.Reader, ino Ino) (string, bool, error) {
	var parts []string
	lf := false
	for depth := 0; ino != RootIno; depth++ {
		if depth > 4096 {
			return "", false, fmt.Errorf("path of %d: %w", ino, syscall.ELOOP)
		}
		if ino == s.lostFound {
			lf = true
		}
		ls, err := links(r, ino)
		if err != nil {
			return "", false, err
		}
		if len(ls) == 0 {
			return "", false, fmt.Errorf("path of %d: %w", ino, syscall.ENOENT)
		}
		parts = append(parts, ls[0].Name)
		ino = ls[0].Parent
	}
	var b bytes.Buffer
	for i := len(parts) - 1; i >= 0; i-- {
		b.WriteString(parts[i])
		b.WriteByte('/')
	}
	return b.String(), lf, nil
}

// Within reports whether ino is dir or lies below it: whether one of the
// names of ino (a hard-linked file has several; a directory has one) has
// dir among its ancestors. An inode without a name (removed, still held
// open) is within nothing but itself. The walk is one read transaction of
// one link scan per level.
func (s *Store) Within(ctx context.Context, ino, dir Ino) (within bool, err error) {
	if ino == dir {
		return true, nil
	}
	err = s.kv.View(ctx, func(r kv.Reader) error {
		ls, err := links(r, ino)
		if err != nil {
			return err
		}
		for _, l := range ls {
			ok, err := s.isAncestor(r, dir, l.Parent)
			if err != nil {
				return err
			}
			if ok {
				within = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("is %d within %d: %w", ino, dir, err)
	}
	return within, nil
}

// isAncestor reports whether dir a is dir b or one of b's ancestors.
func (s *Store) isAncestor(r kv.Reader, a, b Ino) (bool, error) {
	for depth := 0; ; depth++ {
		if a == b {
			return true, nil
		}
		if b == RootIno || depth > 4096 {
			return false, nil
		}
		ls, err := links(r, b)
		if err != nil || len(ls) == 0 {
			return false, err
		}
		b = ls[0].Parent
	}
}
