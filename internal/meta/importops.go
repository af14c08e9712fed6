package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/tier"
)

// Resolved is what a bucket key names on the file side.
type Resolved struct {
	// Parent is the directory that holds (or would hold) the key's last
	// segment; zero when some directory on the way has not been listed
	// yet, in which case its first listing will show the key as it is.
	Parent Ino
	Name   string
	// Child is the inode at the name, if any.
	Child *Inode
	// Missing lists the directory names between the deepest existing listed
	// directory and Name that do not exist yet (a new prefix).
	Missing []string
	// Unlisted is, when Parent is zero, the directory on the way whose
	// children have not been imported yet.
	Unlisted Ino
}

// Resolve walks key (relative to the file system's prefix; a trailing "/"
// names a directory marker) from the root through listed directories.
func (s *Store) Resolve(ctx context.Context, key string) (res Resolved, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		res, err = s.resolve(r, key)
		return err
	})
	return res, err
}

func (s *Store) resolve(r kv.Reader, key string) (res Resolved, err error) {
	key = strings.TrimSuffix(key, "/")
	parts := strings.Split(key, "/")
	err = func() error {
		dir, err := s.getInode(r, RootIno)
		if err != nil {
			return err
		}
		for i, name := range parts {
			last := i == len(parts)-1
			if dir.Ino == s.lostFound {
				return nil
			}
			ino, err := getEntry(r, dir.Ino, name)
			if errors.Is(err, syscall.ENOENT) && !dir.Has(Listed) {
				// Not imported yet (a directory only looked up in by
				// name): its first listing will see the bucket as it is.
				res.Unlisted = dir.Ino
				return nil
			}
			if errors.Is(err, syscall.ENOENT) {
				res.Parent, res.Name = dir.Ino, parts[len(parts)-1]
				res.Missing = parts[i : len(parts)-1]
				return nil
			}
			if err != nil {
				return err
			}
			child, err := s.getInode(r, ino)
			if err != nil {
				return err
			}
			if last {
				res.Parent, res.Name, res.Child = dir.Ino, name, &child
				return nil
			}
			if !child.IsDir() {
				// A file where the key needs a directory: the key cannot be
				// a path here.
				return fmt.Errorf("key %q: %q is not a directory: %w", key, name, syscall.ENOTDIR)
			}
			dir = child
		}
		return nil
	}()
	return res, err
}

// ImportObject makes the file at parent/name show obj, when the inode there
// is still expect (by number and Gen; expect nil means no entry may exist).
// Directories in missing are created first (implicit directories of a new
// prefix). A replaced inode's tier data must be dropped by the caller; the
// returned inode is the one now at the name. o is the observation of the
// bucket the import rests on: a name it would add that a file-side change
// stands against (see fences.go) fails with EAGAIN.
func (s *Store) ImportObject(ctx context.Context, o Observation, parent Ino, missing []string, name string, expect *Inode, it Imported) (in Inode, err error) {
	if err := s.reserveInos(ctx, len(missing)+1); err != nil {
		return Inode{}, fmt.Errorf("import into %d: %w", parent, err)
	}
	err = s.kv.Update(ctx, o.fenced(func(tx kv.Txn) error {
		p, err := s.getInode(tx, parent)
		if err != nil {
			return err
		}
		if p.Nlink == 0 {
			// Removed since the caller resolved it: a child added now
			// would have no path. Resolve again.
			return fmt.Errorf("directory %d removed meanwhile: %w", parent, syscall.EAGAIN)
		}
		for _, d := range missing {
			ino, err := getEntry(tx, p.Ino, d)
			if err == nil {
				if p, err = s.getInode(tx, ino); err != nil {
					return err
				}
				if !p.IsDir() {
					return syscall.ENOTDIR
				}
				continue
			}
			if !errors.Is(err, syscall.ENOENT) {
				return err
			}
			if removed, err := o.removedSince(tx, p.Ino, d); err != nil {
				return err
			} else if removed {
				return fmt.Errorf("import %q: removed on the file side after the bucket was looked at: %w", d, syscall.EAGAIN)
			}
			dir, err := s.addImported(tx, &p, Imported{Name: d, Mode: syscall.S_IFDIR, Defaulted: Defaulted, Mtime: it.Mtime})
			if err != nil {
				return err
			}
			dir.Flags |= Listed // a new prefix: the object is all it holds
			if err := s.putInode(tx, &dir); err != nil {
				return err
			}
			if err := s.putInode(tx, &p); err != nil {
				return err
			}
			p = dir
		}
		cur, err := getEntry(tx, p.Ino, name)
		switch {
		case err == nil && expect == nil, errors.Is(err, syscall.ENOENT) && expect != nil:
			return fmt.Errorf("import %q: the name changed meanwhile: %w", name, syscall.EAGAIN)
		case err != nil && !errors.Is(err, syscall.ENOENT):
			return err
		}
		if expect == nil {
			it.Name = name
			if ok, err := s.importAllowed(tx, o, p.Ino, &it); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("import %q: a file-side change the bucket was looked at before stands against it: %w", name, syscall.EAGAIN)
			}
			in, err = s.addImported(tx, &p, it)
			if err != nil {
				return err
			}
			return s.putInode(tx, &p)
		}
		if in, err = s.getInode(tx, cur); err != nil {
			return err
		}
		if in.Ino != expect.Ino || in.Gen != expect.Gen {
			return fmt.Errorf("import %q: changed on the file side meanwhile: %w", name, syscall.EAGAIN)
		}
		if in.IsDir() != (it.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
			return fmt.Errorf("import %q: type changed: %w", name, syscall.EAGAIN)
		}
		if in.Nlink == 1 && in.Type() != it.Mode&syscall.S_IFMT {
			// The bucket put an object of another type at the name (a
			// symlink over a regular file, or back). An inode's type
			// never changes (the kernel keeps it for the inode's life):
			// the old inode leaves the name as if the bucket had deleted
			// it, without its record of key (the new object is not its to
			// replace or delete), and a new inode of the new type takes
			// the name.
			if err := dropKey(tx, &in, it.Obj.Key); err != nil {
				return err
			}
			in.deletedInBucket(it.Obj.Key)
			if err := s.unlink(tx, &p, name, &in, false); err != nil {
				return err
			}
			if in, err = s.addImported(tx, &p, it); err != nil {
				return err
			}
			return s.putInode(tx, &p)
		}
		if !in.IsDir() && in.Nlink > 1 {
			// One name of a hard-linked file changed in the bucket: that
			// name alone shows the new object. It leaves the inode, which
			// keeps its other names, their objects and its bytes, and
			// drops its record of this key (the object is no longer its
			// to replace or delete).
			if err := s.detach(tx, &p, name, &in, it.Obj.Key); err != nil {
				return err
			}
			if in, err = s.addImported(tx, &p, it); err != nil {
				return err
			}
			return s.putInode(tx, &p)
		}
		in.Mode, in.Uid, in.Gid, in.Rdev = it.Mode, it.Uid, it.Gid, it.Rdev
		in.Flags = in.Flags&^Defaulted | it.Defaulted&Defaulted
		s.defaults.apply(&in)
		in.Mtime, in.Ctime = it.Mtime, s.now().UnixNano()
		in.Target = it.Target
		if !in.IsDir() {
			// The cached bytes belong to the old version, unless the
			// object is the very version they were cached from.
			if in.Base.VersionID != it.Obj.VersionID || in.Base.ETag != it.Obj.ETag || in.Base.Key != it.Obj.Key || in.Size != it.Obj.Size {
				if err := tier.Drop(tx, uint64(in.Ino)); err != nil {
					return err
				}
				in.dropHeld()
				in.Replaced++
			}
			in.Size = it.Obj.Size
			in.Base = it.Obj
			in.Backed = in.Size
			in.Flags &^= DataDirty
			if in.Type() != syscall.S_IFREG {
				in.Size = int64(len(in.Target))
				in.Backed = 0
			}
		}
		oldKeys := append([]Object(nil), in.Keys...)
		if it.Obj.Key != "" {
			in.Keys = withKey(in.Keys, it.Obj)
		}
		if err := indexKeys(tx, in.Ino, oldKeys, in.Keys); err != nil {
			return err
		}
		return s.putInode(tx, &in)
	}))
	if err != nil {
		return Inode{}, fmt.Errorf("import into %d: %w", parent, err)
	}
	return in, nil
}

// addImported creates a child of p from it (p is updated in memory; the
// caller writes it).
func (s *Store) addImported(tx kv.Txn, p *Inode, it Imported) (Inode, error) {
	ino, err := s.allocIno(tx)
	if err != nil {
		return Inode{}, err
	}
	in := Inode{Ino: ino, Mode: it.Mode, Uid: it.Uid, Gid: it.Gid, Rdev: it.Rdev,
		Nlink: 1, Size: it.Obj.Size, Atime: it.Mtime, Mtime: it.Mtime, Ctime: it.Mtime,
		Target: it.Target, Flags: it.Defaulted & Defaulted}
	s.defaults.apply(&in) // what the record holds; reads fill them in again
	if in.IsDir() {
		in.Nlink = 2
		in.Size = 0
		in.Source = p.Source + it.Name + "/"
		p.Nlink++
		if it.Obj.Key != "" {
			in.Keys = []Object{it.Obj}
		}
	} else {
		in.Base = it.Obj
		in.Backed = in.Size
		in.Keys = []Object{it.Obj}
		if !in.IsRegular() {
			in.Size = int64(len(in.Target))
			in.Backed = 0
		}
	}
	if _, err := addLink(tx, p.Ino, it.Name, &in); err != nil {
		return Inode{}, err
	}
	if err := s.putNewInode(tx, &in); err != nil {
		return Inode{}, err
	}
	if err := indexKeys(tx, in.Ino, nil, in.Keys); err != nil {
		return Inode{}, err
	}
	return in, nil
}

// ForgetKey records that key no longer exists in the bucket for the inode
// at parent/name, still expect (number and Gen). With unlink set the name
// is removed as well (the object was deleted in the bucket and the file
// side had nothing newer); otherwise only the inode's record of the key
// goes (the file side keeps its newer version, to be exported as new).
func (s *Store) ForgetKey(ctx context.Context, parent Ino, name string, expect *Inode, key string, unlink bool) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		p, in, err := s.expectedChild(tx, parent, name, expect)
		if err != nil {
			return err
		}
		if err := dropKey(tx, &in, key); err != nil {
			return err
		}
		if !unlink {
			return s.putInode(tx, &in)
		}
		if in.IsDir() {
			empty, err := isEmpty(tx, in.Ino)
			if err != nil {
				return err
			}
			if !empty {
				return s.putInode(tx, &in) // keep a directory that still holds things
			}
		}
		if err := s.unlink(tx, &p, name, &in, in.IsDir()); err != nil {
			return err
		}
		if in.Nlink == 0 {
			in.deletedInBucket(key)
			if err := s.putInode(tx, &in); err != nil {
				return err
			}
		}
		return s.putInode(tx, &p)
	})
}

// FromBucketOnly reports whether in is a directory that came from the
// bucket alone: never changed on the file side (Gen 0), no marker object
// recorded, nothing to export, not lost+found.
func (in *Inode) FromBucketOnly() bool {
	return in.IsDir() && !in.Has(NoExport) && in.Gen == 0 && len(in.Keys) == 0 && !in.Dirty()
}

// DropImportedDir removes the directory parent/name (still expect) because
// the bucket holds no current object under its prefix any more, if it is
// a directory that came from the bucket alone: never changed on the file
// side (Gen 0), no marker object recorded, nothing queued for export, and
// empty. Anything else stays (a directory the file side made, or one that
// holds names), and ENOTEMPTY says so. Rule: a directory exists on the
// file side only if the file side made it or the bucket holds a current
// object under it.
func (s *Store) DropImportedDir(ctx context.Context, parent Ino, name string, expect *Inode) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		p, in, err := s.expectedChild(tx, parent, name, expect)
		if err != nil {
			return err
		}
		if !in.FromBucketOnly() {
			return syscall.ENOTEMPTY
		}
		if _, queued, err := queuedAt(tx, in.Ino); err != nil {
			return err
		} else if queued {
			return syscall.ENOTEMPTY
		}
		if err := s.unlink(tx, &p, name, &in, true); err != nil {
			return err
		}
		in.Flags |= DeletedInBucket
		if err := s.putInode(tx, &in); err != nil {
			return err
		}
		return s.putInode(tx, &p)
	})
}

// expectedChild loads directory parent and its child name, which must still
// be expect (same number and Gen); EAGAIN says it changed meanwhile.
func (s *Store) expectedChild(tx kv.Txn, parent Ino, name string, expect *Inode) (p, in Inode, err error) {
	if p, err = s.getInode(tx, parent); err != nil {
		return
	}
	ino, err := getEntry(tx, parent, name)
	if err != nil {
		return
	}
	if in, err = s.getInode(tx, ino); err != nil {
		return
	}
	if in.Ino != expect.Ino || in.Gen != expect.Gen {
		err = fmt.Errorf("%q changed meanwhile: %w", name, syscall.EAGAIN)
	}
	return
}

// dropKey removes key from in.Keys and from the key index (in is written by
// the caller).
func dropKey(tx kv.Txn, in *Inode, key string) error {
	var keys []Object
	for _, k := range in.Keys {
		if k.Key != key {
			keys = append(keys, k)
		}
	}
	if err := indexKeys(tx, in.Ino, in.Keys, keys); err != nil {
		return err
	}
	in.Keys = keys
	return nil
}

// LostFoundEntryName is the name in lost+found of the file-side version
// of key that lost a conflict at t: the key's path and the time in one
// file name, "a%2Fb%2Fc.txt.20261130T105500.123456789Z". Over-long names
// keep their end.
func LostFoundEntryName(key string, t time.Time) string {
	name := strings.ReplaceAll(strings.ReplaceAll(key, "%", "%25"), "/", "%2F") +
		"." + t.UTC().Format("20060102T150405.000000000Z")
	if len(name) > 255 {
		name = name[len(name)-255:]
	}
	return name
}

// deletedInBucket marks in, which an import took its last name from, as
// deleted in the bucket; a file also keeps key, the key it had, which names
// its copy in lost+found should a handle change it (keepDeletedInBucket).
func (in *Inode) deletedInBucket(key string) {
	in.Flags |= DeletedInBucket
	if !in.IsDir() {
		in.Source = key
	}
}

// keepDeletedInBucket links in, a file whose last name an import removed
// (the bucket deleted its object) and which the file side now changes
// through a handle it still holds, into lost+found. Both sides changed the
// file: the bucket's delete keeps the name away, and the file side's
// version is kept as a conflict's loser is, instead of vanishing with the
// unlinked inode at the last close. The caller writes in (and queues it:
// under lost+found it wants no object) and reports the conflict.
func (s *Store) keepDeletedInBucket(tx kv.Txn, in *Inode, now time.Time) (name string, err error) {
	lf, err := s.getInode(tx, s.lostFound)
	if err != nil {
		return "", err
	}
	name = LostFoundEntryName(in.Source, now)
	if _, err := getEntry(tx, lf.Ino, name); err == nil {
		name = LostFoundEntryName(fmt.Sprintf("%s.%d", in.Source, in.Ino), now)
	}
	in.Nlink = 1
	in.Flags &^= DeletedInBucket
	in.Source = ""
	in.Ctime = now.UnixNano()
	lf.Mtime, lf.Ctime = in.Ctime, in.Ctime
	if err := s.putInode(tx, &lf); err != nil {
		return "", err
	}
	return name, s.putEntry(tx, lf.Ino, name, in)
}

// MoveToLostFound moves the inode at parent/name (still expect) into the
// lost+found directory as newName, forgetting the bucket object at key, the
// key of parent/name: the bucket's version wins the name, and this one is
// kept only on the file side.
func (s *Store) MoveToLostFound(ctx context.Context, parent Ino, name string, expect *Inode, newName, key string) error {
	if err := s.reserveInos(ctx, 1); err != nil { // for a copy (copyToLostFound)
		return err
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		p, in, err := s.expectedChild(tx, parent, name, expect)
		if err != nil {
			return err
		}
		lf, err := s.getInode(tx, s.lostFound)
		if err != nil {
			return err
		}
		if _, err := getEntry(tx, s.lostFound, newName); err == nil {
			return fmt.Errorf("lost+found already has %q: %w", newName, syscall.EEXIST)
		}
		if parent == s.lostFound {
			return syscall.EINVAL
		}
		if !in.IsDir() && in.Nlink > 1 {
			return s.copyToLostFound(tx, &p, name, &in, &lf, newName, key)
		}
		// Only the name's own object is no longer the inode's. Objects of
		// names it had before (a rename or unlink not exported yet) are
		// still its to delete, and the exporter deletes them: under
		// lost+found it wants no key.
		if err := dropKey(tx, &in, key); err != nil {
			return err
		}
		if err := s.move(tx, &p, name, &lf, newName, &in); err != nil {
			return err
		}
		return nil
	})
}

// detach takes the name p/name away from in, a file with other names,
// together with its record of key, that name's object (no longer in's to
// replace or delete), and writes in. Nothing is queued: the other names
// and their objects stay as they were.
func (s *Store) detach(tx kv.Txn, p *Inode, name string, in *Inode, key string) error {
	if _, err := dropLink(tx, p.Ino, name, in); err != nil {
		return err
	}
	in.Nlink--
	in.Ctime = s.now().UnixNano()
	if err := dropKey(tx, in, key); err != nil {
		return err
	}
	return s.putInode(tx, in)
}

// copyToLostFound is MoveToLostFound for a file with other names: they
// keep the inode (its bytes, its other objects, its pending export), and
// lost+found gets a frozen copy of the file as it is now, a new inode that
// later writes through the other names do not change. The name leaves the
// inode, with its record of key, the name's object.
func (s *Store) copyToLostFound(tx kv.Txn, p *Inode, name string, in, lf *Inode, newName, key string) error {
	if err := s.detach(tx, p, name, in, key); err != nil {
		return err
	}
	now := in.Ctime
	p.Mtime, p.Ctime = now, now
	if err := s.putInode(tx, p); err != nil {
		return err
	}
	ino, err := s.allocIno(tx)
	if err != nil {
		return err
	}
	// The copy keeps Gen, ExportedGen and flags: dirty as the file was,
	// its bytes are not in the bucket and are never evicted.
	cp := *in
	cp.Ino, cp.Nlink, cp.Keys, cp.Replaced = ino, 1, nil, 0
	cp.link = Link{} // in's names are not the copy's
	if err := tier.Clone(tx, uint64(in.Ino), uint64(ino)); err != nil {
		return err
	}
	if _, err := addLink(tx, lf.Ino, newName, &cp); err != nil {
		return err
	}
	if err := s.putInode(tx, &cp); err != nil {
		return err
	}
	lf.Mtime, lf.Ctime = now, now
	return s.putInode(tx, lf)
}

// LostFoundCount counts the entries in lost+found.
func (s *Store) LostFoundCount(ctx context.Context) (n int, err error) {
	prefix := entryPrefix(s.lostFound)
	err = s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			n++
			return true
		})
	})
	return n, err
}

// DropKey removes key from the Keys of ino: the bucket's object at key is
// no longer this inode's to delete or replace.
func (s *Store) DropKey(ctx context.Context, ino Ino, key string) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		in, err := s.getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := dropKey(tx, &in, key); err != nil {
			return err
		}
		return s.putInode(tx, &in)
	})
}
