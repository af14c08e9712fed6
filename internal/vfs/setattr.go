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
	// DropSetID clears the set-uid bit, and the set-gid bit where group
	// execute is set: what a write or truncate by someone without
	// CAP_FSETID does to a file on Linux. The kernel asks for it (FUSE's
	// HANDLE_KILLPRIV_V2) after checking that the caller may write the
	// file, so it needs no ownership.
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
		if err := fs.truncate(ctx, ino, req.Size); err != nil {
			return Attr{}, err
		}
		if req.Valid == SetSize {
			return fs.meta.Get(ctx, ino)
		}
	}
	if req.Valid&DropSetID != 0 && req.Valid&^(SetSize|DropSetID) == 0 {
		// Only the kernel's kill of privileges is left: most files have
		// no set-id bits, and then nothing changes.
		if in, err := fs.meta.Get(ctx, ino); err != nil || in.Mode == withoutSetID(in.Mode) {
			return in, err
		}
	}
	now := fs.now()
	return fs.meta.Update(ctx, ino, func(in *meta.Inode) (meta.Change, error) {
		change := meta.NoChange
		owner := c.Uid == 0 || c.Uid == in.Uid
		if req.Valid&DropSetID != 0 && in.Mode != withoutSetID(in.Mode) {
			in.Mode = withoutSetID(in.Mode)
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
			if uid != in.Uid || gid != in.Gid {
				// A change of owner drops set-id bits, as on Linux.
				in.Mode = withoutSetID(in.Mode)
			}
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

// withoutSetID is mode after a write or truncate by someone without
// CAP_FSETID: no set-uid bit, and no set-gid bit where group execute is
// set (set-gid without it marks mandatory locking and stays). Directories
// keep theirs.
func withoutSetID(mode uint32) uint32 {
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return mode
	}
	mode &^= syscall.S_ISUID
	if mode&0o010 != 0 {
		mode &^= syscall.S_ISGID
	}
	return mode
}

// DropSetID is SetAttr with DropSetID alone, for a write or an open with
// O_TRUNC by someone without CAP_FSETID.
func (fs *FS) DropSetID(ctx context.Context, c Cred, ino Ino) error {
	_, err := fs.SetAttr(ctx, c, ino, SetAttrIn{Valid: DropSetID})
	return err
}

// truncate sets the size of a regular file, its bytes and its record in
// one transaction.
func (fs *FS) truncate(ctx context.Context, ino Ino, size int64) error {
	now := fs.now()
	_, err := fs.meta.ResizeData(ctx, ino, size, false, func(in *meta.Inode) {
		in.Mtime, in.Ctime = now, now
		in.Mode &^= syscall.S_ISUID
	})
	return err
}
