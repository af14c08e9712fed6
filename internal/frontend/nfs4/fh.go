package nfs4

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// A filehandle is fhVersion, the 8-byte hash of the file system id, and the
// 8-byte inode number. Inode numbers are never reused, so a filehandle
// names one file for as long as the file system exists.
const (
	fhVersion = 1
	fhSize    = 17
)

func fsidHash(fsid string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(fsid))
	return h.Sum64()
}

func (s *Server) makeFH(ino vfs.Ino) []byte {
	b := make([]byte, fhSize)
	b[0] = fhVersion
	binary.BigEndian.PutUint64(b[1:], s.fsidHash)
	binary.BigEndian.PutUint64(b[9:], uint64(ino))
	return b
}

// parseFH returns the inode a filehandle names: NFS4ERR_BADHANDLE for
// something that is not one of ours, NFS4ERR_STALE for another file
// system's.
func (s *Server) parseFH(fh []byte) (vfs.Ino, nfsv4.Nfsstat4) {
	if len(fh) != fhSize || fh[0] != fhVersion {
		return 0, nfsv4.NFS4ERR_BADHANDLE
	}
	if binary.BigEndian.Uint64(fh[1:]) != s.fsidHash {
		return 0, nfsv4.NFS4ERR_STALE
	}
	ino := vfs.Ino(binary.BigEndian.Uint64(fh[9:]))
	if ino == 0 {
		return 0, nfsv4.NFS4ERR_BADHANDLE
	}
	return ino, nfsv4.NFS4_OK
}

// attrOf loads the attributes behind a filehandle. An inode that is gone,
// or that lost its last name and is not open, is NFS4ERR_STALE.
func (s *Server) attrOf(ctx context.Context, ino vfs.Ino) (vfs.Attr, nfsv4.Nfsstat4) {
	a, err := s.fs.GetAttr(ctx, ino)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return vfs.Attr{}, nfsv4.NFS4ERR_STALE
		}
		return vfs.Attr{}, statusOf(err)
	}
	if a.Nlink == 0 && !s.fs.IsOpen(ino) {
		return vfs.Attr{}, nfsv4.NFS4ERR_STALE
	}
	return a, nfsv4.NFS4_OK
}
