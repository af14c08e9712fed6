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
//	[9:17]   the inode number (pseudoRoot for the pseudo-root)
//	[17:25]  the id of the access point it was reached through, 0 for none
//	         (accesspoint.go)
//	[25:41]  a MAC of bytes [0:25]: HMAC-SHA256 under the file system's
//	         handle secret, cut to 16 bytes
//
// Inode numbers are never reused, so a filehandle names one file for as
// long as the file system exists. The secret is made once per file system
// and kept in its kv (meta.Store.Secret), so handles survive restarts; only
// the server can make one, so a client cannot reach a file by building its
// handle from an inode number it learnt (fileid, READDIR) or guessed, nor
// move a handle to another access point: it has to walk to the file with
// LOOKUP, which checks the directories on the way. Handles of versions 1
// (no MAC) and 2 (no access point) are refused as stale: a client that
// held one remounts.
const (
	fhVersion = 3
	fhHead    = 25 // the signed part
	fhMACSize = 16
	fhSize    = fhHead + fhMACSize
	// handleSecret names the file system secret filehandles are signed with.
	handleSecret = "nfs-filehandles"
)

func fsidHash(fsid string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(fsid))
	return h.Sum64()
}

// fhMAC is the MAC of a filehandle's signed part.
func (s *Server) fhMAC(head []byte) []byte {
	m := hmac.New(sha256.New, s.fhKey)
	m.Write(head)
	return m.Sum(nil)[:fhMACSize]
}

// makeFH makes the filehandle of ino reached through ap (nil: none).
func (s *Server) makeFH(ino vfs.Ino, ap *accessPoint) []byte {
	b := make([]byte, fhHead, fhSize)
	b[0] = fhVersion
	binary.BigEndian.PutUint64(b[1:], s.fsidHash)
	binary.BigEndian.PutUint64(b[9:], uint64(ino))
	if ap != nil {
		binary.BigEndian.PutUint64(b[17:], ap.id)
	}
	return append(b, s.fhMAC(b)...)
}

// parseFH returns the inode a filehandle names and the access point it
// carries: NFS4ERR_BADHANDLE for something that is not one of ours (a
// wrong length, an unknown version, a MAC that does not match),
// NFS4ERR_STALE for another file system's, an old version's, or one whose
// access point is not configured (or that has none while access points are
// configured: see accesspoint.go). The MAC is compared in constant time.
func (s *Server) parseFH(fh []byte) (vfs.Ino, *accessPoint, nfsv4.Nfsstat4) {
	switch {
	case len(fh) == 17 && fh[0] == 1, // from before handles were signed
		len(fh) == 33 && fh[0] == 2: // from before access points
		return 0, nil, nfsv4.NFS4ERR_STALE
	case len(fh) != fhSize || fh[0] != fhVersion:
		return 0, nil, nfsv4.NFS4ERR_BADHANDLE
	}
	if binary.BigEndian.Uint64(fh[1:]) != s.fsidHash {
		return 0, nil, nfsv4.NFS4ERR_STALE
	}
	if !hmac.Equal(fh[fhHead:], s.fhMAC(fh[:fhHead])) {
		return 0, nil, nfsv4.NFS4ERR_BADHANDLE
	}
	ino := vfs.Ino(binary.BigEndian.Uint64(fh[9:]))
	if ino == 0 {
		return 0, nil, nfsv4.NFS4ERR_BADHANDLE
	}
	id := binary.BigEndian.Uint64(fh[17:])
	if id == 0 {
		if s.aps.on() != (ino == pseudoRoot) {
			return 0, nil, nfsv4.NFS4ERR_STALE
		}
		return ino, nil, nfsv4.NFS4_OK
	}
	ap := s.aps.byID[id]
	if ap == nil || ino == pseudoRoot {
		return 0, nil, nfsv4.NFS4ERR_STALE
	}
	return ino, ap, nfsv4.NFS4_OK
}

// attrOf loads the attributes behind a filehandle (the pseudo-root's
// too). An inode that is gone, or that lost its last name and is not open,
// is NFS4ERR_STALE.
func (s *Server) attrOf(ctx context.Context, ino vfs.Ino) (vfs.Attr, nfsv4.Nfsstat4) {
	if ino == pseudoRoot && s.aps.on() {
		return s.aps.pseudo, nfsv4.NFS4_OK
	}
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
