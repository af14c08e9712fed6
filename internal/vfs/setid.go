package vfs

import (
	"context"
	"syscall"

	"bucketfs/internal/meta"
)

// Set-id bits across writes, truncates and chown.
//
// The rule kept is Linux's since 6.2 (setattr_should_drop_suidgid,
// setattr_should_drop_sgid, chown_common; checked against ext4 on 6.18):
//
//   - A write or a truncate (truncate, ftruncate, an open with O_TRUNC of
//     an existing file) by a caller without CAP_FSETID clears a regular
//     file's set-user-id bit, and its set-group-id bit where group execute
//     is set or the caller is not in the file's group (set-group-id without
//     group execute marks mandatory locking). A caller with CAP_FSETID
//     keeps both.
//   - A chown of a non-directory (any owner or group change asked for, even
//     to the same ids) clears set-user-id whoever makes it, root included,
//     and set-group-id by the rule above, root counting as having
//     CAP_FSETID.
//
// Only a front end knows whether its caller has CAP_FSETID:
//
//   - FUSE: the kernel flags the requests of callers without it (with
//     HANDLE_KILLPRIV_V2 negotiated: WRITE_KILL_SUIDGID on a write,
//     FATTR_KILL_SUIDGID on a truncate, OPEN_KILL_SUIDGID on an O_TRUNC
//     open or create), and the front end passes the flag on.
//   - NFS: knfsd runs a request with CAP_FSETID when its uid (after root
//     squash) is 0 and without it otherwise; the NFS front end does the
//     same.
//
// So Write, CopyRange without a clearFor, and a SetAttr or Open without
// the flags below keep the bits (a writer with CAP_FSETID, or the engine
// itself); WriteClearingSetID, CopyRange with clearFor, SetAttr with
// DropSetID and Open or Create with ClearSetID clear them for the caller
// they are given, in the same transaction as the write or truncate.

// ClearSetID is an open flag, beside open(2)'s: the opener lacks
// CAP_FSETID, so an O_TRUNC of an existing file clears its set-id bits.
const ClearSetID = 1 << 30

// clearSetID clears in's set-id bits as a write or truncate by c, who
// lacks CAP_FSETID, does, and reports whether the mode changed.
func clearSetID(in *meta.Inode, c Cred) bool {
	if !in.IsRegular() {
		return false
	}
	mode := in.Mode &^ syscall.S_ISUID
	if mode&syscall.S_ISGID != 0 && (mode&0o010 != 0 || !c.inGroup(in.Gid)) {
		mode &^= syscall.S_ISGID
	}
	changed := mode != in.Mode
	in.Mode = mode
	return changed
}

// clearSetIDOnChown clears in's set-id bits as a chown by c does, before
// the owner changes (the group that counts is the file's old one).
func clearSetIDOnChown(in *meta.Inode, c Cred) {
	if in.IsDir() {
		return
	}
	in.Mode &^= syscall.S_ISUID
	if in.Mode&syscall.S_ISGID != 0 && (in.Mode&0o010 != 0 || c.Uid != 0 && !c.inGroup(in.Gid)) {
		in.Mode &^= syscall.S_ISGID
	}
}

// WriteClearingSetID is Write by c, who lacks CAP_FSETID: the transaction
// of the first piece also clears the file's set-id bits. cleared says
// whether that changed the mode, which a client caching the file's
// attributes does not expect from a write (a FUSE kernel keeps its cached
// mode across one). The transaction's fn may run more than once (see
// package kv): each run sets cleared, so the run that commits decides.
func (h *Handle) WriteClearingSetID(ctx context.Context, c Cred, p []byte, off int64) (n int, cleared bool, err error) {
	n, err = h.write(ctx, p, off, false, func(in *meta.Inode) {
		cleared = clearSetID(in, c)
	})
	return n, cleared, err
}

// hasSetID reports whether a write or truncate by someone without
// CAP_FSETID may change in's mode.
func hasSetID(in *meta.Inode) bool {
	return in.IsRegular() && in.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
}
