package fuse

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"bucketfs/internal/vfs"
)

// dirHandle is one open directory stream. The kernel addresses entries by
// offset; offsets 1 and 2 are "." and "..", and entry i of the listing has
// offset i+3. The listing is read in pages as the stream advances, resuming
// after the last name seen, so entries added or removed meanwhile never
// make the stream repeat or skip a name that stayed.
type dirHandle struct {
	ino     vfs.Ino
	cred    vfs.Cred
	entries []vfs.DirEntry // entries read so far, in name order
	eof     bool
}

const dirPage = 1024

func (s *server) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	if _, err := s.fs.OpenDir(ctx, s.cred(&in.InHeader), s.ino(in.NodeId)); err != nil {
		return status(err)
	}
	s.mu.Lock()
	s.next++
	s.dirs[s.next] = &dirHandle{ino: s.ino(in.NodeId), cred: s.cred(&in.InHeader)}
	out.Fh = s.next
	s.mu.Unlock()
	return fuse.OK
}

func (s *server) ReleaseDir(in *fuse.ReleaseIn) {
	s.mu.Lock()
	delete(s.dirs, in.Fh)
	s.mu.Unlock()
}

func (s *server) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return s.readDir(cancel, in, out, false)
}

func (s *server) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return s.readDir(cancel, in, out, true)
}

func (s *server) readDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	s.mu.Lock()
	d := s.dirs[in.Fh]
	s.mu.Unlock()
	if d == nil {
		return fuse.EBADF
	}
	ctx, done := untilKilled(cancel, &in.InHeader)
	defer done()
	off := in.Offset
	if off == 0 {
		// A rewind (or the first read) starts a fresh listing.
		d.entries, d.eof = nil, false
	}
	for off < 2 {
		name := "."
		if off == 1 {
			name = ".."
		}
		e := fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: uint64(d.ino), Off: off + 1}
		if plus {
			if out.AddDirLookupEntry(e) == nil {
				return fuse.OK
			}
		} else if !out.AddDirEntry(e) {
			return fuse.OK
		}
		off++
	}
	// The attributes of READDIRPLUS are read a batch of entries at a
	// time, for this call only: what it answers is as fresh as a LOOKUP.
	var attrs map[vfs.Ino]vfs.Attr
	attrsEnd := 0 // entries before it are in attrs, if they exist
	for {
		i := int(off - 2)
		if i >= len(d.entries) {
			if d.eof {
				return fuse.OK
			}
			after := ""
			if len(d.entries) > 0 {
				after = d.entries[len(d.entries)-1].Name
			}
			page, err := s.fs.ReadDir(ctx, d.cred, d.ino, after, dirPage)
			if err != nil {
				return status(err)
			}
			d.entries = append(d.entries, page...)
			d.eof = len(page) < dirPage
			continue
		}
		ent := d.entries[i]
		e := fuse.DirEntry{Name: ent.Name, Mode: ent.Type, Ino: uint64(ent.Ino), Off: off + 1}
		if plus {
			if i >= attrsEnd {
				var err error
				attrsEnd = min(i+plusBatch, len(d.entries))
				if attrs, err = s.fs.AttrsOf(ctx, d.entries[i:attrsEnd]); err != nil {
					return status(err)
				}
			}
			a, ok := attrs[ent.Ino]
			if !ok {
				off++ // removed meanwhile
				continue
			}
			eo := out.AddDirLookupEntry(e)
			if eo == nil {
				return fuse.OK
			}
			s.fillEntry(&a, eo)
			s.fs.Remember(a.Ino)
		} else if !out.AddDirEntry(e) {
			return fuse.OK
		}
		off++
	}
}

// plusBatch is how many entries' attributes READDIRPLUS reads at once:
// about what one reply of the kernel's buffer holds.
const plusBatch = 64
