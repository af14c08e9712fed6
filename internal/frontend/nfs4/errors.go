package nfs4

import (
	"errors"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/locks"
	"bucketfs/internal/vfs"
)

// errnoStatus is the one table from errno (as vfs.Errno reports it) to
// NFSv4 status. Errnos missing from it are NFS4ERR_IO.
var errnoStatus = map[syscall.Errno]nfsv4.Nfsstat4{
	syscall.EPERM:        nfsv4.NFS4ERR_PERM,
	syscall.ENOENT:       nfsv4.NFS4ERR_NOENT,
	syscall.EIO:          nfsv4.NFS4ERR_IO,
	syscall.ENXIO:        nfsv4.NFS4ERR_NXIO,
	syscall.EBADF:        nfsv4.NFS4ERR_OPENMODE,
	syscall.EACCES:       nfsv4.NFS4ERR_ACCESS,
	syscall.EEXIST:       nfsv4.NFS4ERR_EXIST,
	syscall.EXDEV:        nfsv4.NFS4ERR_XDEV,
	syscall.ENOTDIR:      nfsv4.NFS4ERR_NOTDIR,
	syscall.EISDIR:       nfsv4.NFS4ERR_ISDIR,
	syscall.EINVAL:       nfsv4.NFS4ERR_INVAL,
	syscall.EFBIG:        nfsv4.NFS4ERR_FBIG,
	syscall.ENOSPC:       nfsv4.NFS4ERR_NOSPC,
	syscall.EROFS:        nfsv4.NFS4ERR_ROFS,
	syscall.EMLINK:       nfsv4.NFS4ERR_MLINK,
	syscall.ENAMETOOLONG: nfsv4.NFS4ERR_NAMETOOLONG,
	syscall.ENOTEMPTY:    nfsv4.NFS4ERR_NOTEMPTY,
	syscall.EDQUOT:       nfsv4.NFS4ERR_DQUOT,
	syscall.ESTALE:       nfsv4.NFS4ERR_STALE,
	syscall.EAGAIN:       nfsv4.NFS4ERR_DENIED, // a lock held by another owner
	syscall.EDEADLK:      nfsv4.NFS4ERR_DEADLOCK,
	syscall.ENOTSUP:      nfsv4.NFS4ERR_NOTSUPP,
	syscall.ENOSYS:       nfsv4.NFS4ERR_NOTSUPP,
	syscall.ENODATA:      nfsv4.NFS4ERR_NOENT,
	syscall.ELOOP:        nfsv4.NFS4ERR_SYMLINK,
	syscall.EINTR:        nfsv4.NFS4ERR_DELAY,
	syscall.ETIMEDOUT:    nfsv4.NFS4ERR_DELAY,
	syscall.EBUSY:        nfsv4.NFS4ERR_DELAY,
	syscall.EOVERFLOW:    nfsv4.NFS4ERR_INVAL,
	syscall.ERANGE:       nfsv4.NFS4ERR_INVAL,
}

// statusOf maps an error from vfs to an NFSv4 status.
func statusOf(err error) nfsv4.Nfsstat4 {
	if err == nil {
		return nfsv4.NFS4_OK
	}
	if errors.Is(err, locks.ErrWouldBlock) {
		return nfsv4.NFS4ERR_DENIED
	}
	if st, ok := errnoStatus[vfs.Errno(err)]; ok {
		return st
	}
	return nfsv4.NFS4ERR_IO
}

// xattrErrnoStatus overrides errnoStatus for the extended attribute
// operations (RFC 8276): there ENODATA is a name that is not set, E2BIG a
// value over the limit, ERANGE a name vfs refused for its length.
var xattrErrnoStatus = map[syscall.Errno]nfsv4.Nfsstat4{
	syscall.ENODATA: nfs4errNoxattr,
	syscall.E2BIG:   nfs4errXattr2big,
	syscall.ERANGE:  nfsv4.NFS4ERR_NAMETOOLONG,
}

// statusOfXattr maps an error from a vfs xattr call to an NFSv4 status.
func statusOfXattr(err error) nfsv4.Nfsstat4 {
	if st, ok := xattrErrnoStatus[vfs.Errno(err)]; ok {
		return st
	}
	return statusOf(err)
}
