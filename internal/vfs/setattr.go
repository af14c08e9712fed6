package vfs

import (
	"context"
	"syscall"

	"bucketfs/internal/meta"
)

// Which attributes a SetAttr changes.
const (
	SetMode = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime // to Atime
	SetMtime // to Mtime
	SetAtimeNow
	SetMtimeNow
	// DropSetID: the caller lacks CAP_FSETID, so a size change clears
	// the file's set-id bits (setid.go), in the same transaction; alone,
	// the request clears them for a write or an O_TRUNC open that the
	// kernel reports (FUSE's HANDLE_KILLPRIV_V2), after checking that the
	// caller may write the file, so it needs no ownership. A chown has its
	// own rule and ignores it.
	DropSetID
)

// SetAttrIn is a setattr request.
type SetAttrIn struct {
	Valid        uint32
	Mode         uint32 // permission bits (type bits ignored)
	Uid, Gid     uint32
	Size         int64
	Atime, Mtime int64 // unix ns
	// Handle is the open file the request came through (ftruncate,
	// futimens), or nil.
	Handle *Handle
}

// SetAttr changes attributes with POSIX permission rules.
func (fs *FS) SetAttr(ctx context.Context, c Cred, ino Ino, req SetAttrIn) (Attr, error) {
	fs.counters.metaOps.Add(1)
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	if req.Valid&SetSize != 0 {
		if req.Size < 0 {
			return Attr{}, syscall.EINVAL
		}
		in, err := fs.meta.Get(ctx, ino)
		if err != nil {
			return Attr{}, err
		}
		if in.IsDir() {
			return Attr{}, syscall.EISDIR
		}
		if !in.IsRegular() {
			return Attr{}, syscall.EINVAL
		}
		if req.Handle == nil || !req.Handle.writable {
			if err := access(c, &in, mayWrite); err != nil {
				return Attr{}, err
			}
		}
		var clear *Cred
		if req.Valid&DropSetID != 0 {
			clear = &c
		}
		if in, err = fs.truncate(ctx, ino, req.Size, clear); err != nil {
			return Attr{}, err
		}
		if req.Valid&^(SetSize|DropSetID) == 0 {
			return in, nil
		}
		req.Valid &^= SetSize | DropSetID
	}
	chown := req.Valid&(SetUid|SetGid) != 0
	if req.Valid == DropSetID {
		// The kernel's clearing of set-id bits alone, for a write or an
		// O_TRUNC open: most files have none, and then nothing changes.
		if in, err := fs.meta.Get(ctx, ino); err != nil || !hasSetID(&in) {
			return in, err
		}
	}
	now := fs.now()
	return fs.meta.Update(ctx, ino, func(in *meta.Inode) (meta.Change, error) {
		change := meta.NoChange
		owner := c.Uid == 0 || c.Uid == in.Uid
		if req.Valid&DropSetID != 0 && !chown && clearSetID(in, c) {
			change = meta.AttrChange
		}
		if req.Valid&SetMode != 0 {
			if !owner {
				return 0, syscall.EPERM
			}
			mode := req.Mode & 0o7777
			if c.Uid != 0 && !c.inGroup(in.Gid) {
				mode &^= syscall.S_ISGID
			}
			in.Mode = in.Type() | mode
			change = meta.AttrChange
		}
		if req.Valid&(SetUid|SetGid) != 0 {
			uid, gid := in.Uid, in.Gid
			if req.Valid&SetUid != 0 {
				uid = req.Uid
			}
			if req.Valid&SetGid != 0 {
				gid = req.Gid
			}
			if c.Uid != 0 && (uid != in.Uid || !owner || gid != in.Gid && !c.inGroup(gid)) {
				return 0, syscall.EPERM
			}
			clearSetIDOnChown(in, c)
			in.Uid, in.Gid = uid, gid
			change = meta.AttrChange
		}
		if req.Valid&(SetAtime|SetMtime|SetAtimeNow|SetMtimeNow) != 0 {
			// Setting explicit times needs ownership; setting them to now
			// needs only write permission.
			explicit := req.Valid&(SetAtime|SetMtime) != 0
			switch {
			case owner:
			case explicit:
				return 0, syscall.EPERM
			default:
				if err := access(c, in, mayWrite); err != nil {
					return 0, err
				}
			}
			if req.Valid&SetAtimeNow != 0 {
				in.Atime = now
			} else if req.Valid&SetAtime != 0 {
				in.Atime = req.Atime
			}
			if req.Valid&SetMtimeNow != 0 {
				in.Mtime = now
				change = meta.AttrChange
			} else if req.Valid&SetMtime != 0 {
				in.Mtime = req.Mtime
				change = meta.AttrChange
			}
		}
		in.Ctime = now
		return change, nil
	})
}

// truncate sets the size of a regular file, its bytes and its record in
// one transaction; with clear set, that transaction also clears the
// file's set-id bits as a truncate by *clear, who lacks CAP_FSETID, does
// (setid.go).
func (fs *FS) truncate(ctx context.Context, ino Ino, size int64, clear *Cred) (meta.Inode, error) {
	now := fs.now()
	return fs.meta.ResizeData(ctx, ino, size, false, func(in *meta.Inode) {
		in.Mtime, in.Ctime = now, now
		if clear != nil {
			clearSetID(in, *clear)
		}
	})
}
