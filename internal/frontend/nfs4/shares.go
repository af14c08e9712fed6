package nfs4

import (
	"context"
	"sync"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/vfs"
)

// Share reservations across servers.
//
// When several servers serve one file system (vfs.FS.Shared), an OPEN's
// share access and deny must hold against the opens of the other servers'
// clients too. Each server publishes, per inode, the union of the access
// bits and the union of the deny bits of its open states there (the
// unions decide every conflict: an open conflicts with some open of a
// server exactly when it conflicts with that server's unions), and an
// OPEN is granted only if the store's transaction finds no conflict with
// the other live servers' unions (vfs.FS.ReserveShare).
//
// Invariant: what this server has published for an inode (published)
// includes the access and deny bits of every open state it holds there.
// An OPEN publishes before its open state is added; a CLOSE, a downgrade
// or a client's expiry publishes after the open state changed. An OPEN
// whose bits are all within what is published already needs no
// transaction: the other servers' records were checked against that when
// it was published, and they check theirs against it.
//
// shareTable.mu is taken before stateTable.mu, and held across the store:
// the state table's mutex never is.
type shareTable struct {
	mu        sync.Mutex
	published map[vfs.Ino]shareModes
}

// shareModes are the unions of the access and deny bits of a server's
// opens of one inode.
type shareModes struct{ access, deny uint32 }

// heldModes returns the unions over this server's open states on ino.
// Requires t.mu.
func (t *stateTable) heldModes(ino vfs.Ino) shareModes {
	var m shareModes
	for _, o := range t.opensByIno[ino] {
		m.access |= o.access
		m.deny |= o.deny
	}
	return m
}

// reserveShares checks a new OPEN of ino with access and deny against the
// other servers' reservations and publishes this server's with it.
// Requires s.shares.mu.
func (s *Server) reserveShares(ctx context.Context, ino vfs.Ino, access, deny uint32) nfsv4.Nfsstat4 {
	s.state.mu.Lock()
	want := s.state.heldModes(ino)
	s.state.mu.Unlock()
	want.access |= access
	want.deny |= deny
	pub := s.shares.published[ino]
	if want.access&^pub.access == 0 && want.deny&^pub.deny == 0 {
		return nfsv4.NFS4_OK
	}
	want.access |= pub.access // never published below what may be held
	want.deny |= pub.deny
	ok, err := s.fs.ReserveShare(ctx, ino, access, deny, want.access, want.deny)
	switch {
	case err != nil:
		return statusOf(err)
	case !ok:
		return nfsv4.NFS4ERR_SHARE_DENIED
	}
	if s.shares.published == nil {
		s.shares.published = map[vfs.Ino]shareModes{}
	}
	s.shares.published[ino] = want
	return nfsv4.NFS4_OK
}

// republishShares publishes this server's reservations on each of inos
// again after open states there closed or changed, where they shrank.
func (s *Server) republishShares(inos ...vfs.Ino) {
	if !s.fs.Shared() {
		return
	}
	s.shares.mu.Lock()
	defer s.shares.mu.Unlock()
	for _, ino := range inos {
		s.republishSharesLocked(ino)
	}
}

// republishSharesLocked is republishShares of one inode. Requires
// s.shares.mu.
func (s *Server) republishSharesLocked(ino vfs.Ino) {
	s.state.mu.Lock()
	held := s.state.heldModes(ino)
	s.state.mu.Unlock()
	pub, ok := s.shares.published[ino]
	if !ok || held == pub {
		return
	}
	if err := s.fs.PublishShares(context.Background(), ino, held.access, held.deny); err != nil {
		// What stays published is more than is held: the other servers
		// are refused more than they should be until the next change.
		s.log.Warn("publish the share reservations left on a file", "ino", ino, "err", err)
		return
	}
	if held == (shareModes{}) {
		delete(s.shares.published, ino)
	} else {
		s.shares.published[ino] = held
	}
}
