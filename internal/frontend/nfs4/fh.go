package nfs4

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"syscall"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// A filehandle is
//
//	[0]      fhVersion
//	[1:9]    the hash of the file system id (fsidHash)
//	[9:17]   the inode number
//	[17:33]  a MAC of bytes [0:17]: HMAC-SHA256 under the file system's
//	         handle secret, cut to 16 bytes
//
// Inode numbers are never reused, so a filehandle names one file for as
// long as the file system exists. The secret is made once per file system
// and kept in its kv (meta.Store.Secret), so handles survive restarts; only
// the server can make one, so a client cannot reach a file by building its
// handle from an inode number it learnt (fileid, READDIR) or guessed: it
// has to walk to the file with LOOKUP, which checks the directories on the
// way. Handles of version 1 (no MAC) are refused as stale: a client that
// held one remounts.
const (
	fhVersion = 2
	fhMACSize = 16
	fhSize    = 17 + fhMACSize
	// handleSecret names the file system secret filehandles are signed with.
	handleSecret = "nfs-filehandles"
)

func fsidHash(fsid string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(fsid))
	return h.Sum64()
}

// fhMAC is the MAC of a filehandle's first 17 bytes.
func (s *Server) fhMAC(head []byte) []byte {
	m := hmac.New(sha256.New, s.fhKey)
	m.Write(head)
	return m.Sum(nil)[:fhMACSize]
}

func (s *Server) makeFH(ino vfs.Ino) []byte {
	b := make([]byte, 17, fhSize)
	b[0] = fhVersion
	binary.BigEndian.PutUint64(b[1:], s.fsidHash)
	binary.BigEndian.PutUint64(b[9:], uint64(ino))
	return append(b, s.fhMAC(b)...)
}

// parseFH returns the inode a filehandle names: NFS4ERR_BADHANDLE for
// something that is not one of ours (a wrong length, an unknown version, a
// MAC that does not match), NFS4ERR_STALE for another file system's or an
// old version's. The MAC is compared in constant time.
func (s *Server) parseFH(fh []byte) (vfs.Ino, nfsv4.Nfsstat4) {
	if len(fh) == 17 && fh[0] == 1 {
		return 0, nfsv4.NFS4ERR_STALE // version 1: from before handles were signed
	}
	if len(fh) != fhSize || fh[0] != fhVersion {
		return 0, nfsv4.NFS4ERR_BADHANDLE
	}
	if binary.BigEndian.Uint64(fh[1:]) != s.fsidHash {
		return 0, nfsv4.NFS4ERR_STALE
	}
	if !hmac.Equal(fh[17:], s.fhMAC(fh[:17])) {
		return 0, nfsv4.NFS4ERR_BADHANDLE
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
