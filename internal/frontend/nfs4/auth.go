package nfs4

import (
	"bytes"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"bucketfs/internal/vfs"
)

// credOf turns an RPC credential into the vfs identity the request runs
// as: AUTH_SYS with its supplementary groups, root squashed if configured;
// AUTH_NONE as nobody if allowed. Anything else is refused.
func (s *Server) credOf(a *rpcv2.OpaqueAuth) (vfs.Cred, rpcv2.AuthStat) {
	switch a.Flavor {
	case rpcv2.AUTH_SYS:
		var p rpcv2.AuthsysParms
		r := bytes.NewReader(a.Body)
		if _, err := p.ReadFrom(r); err != nil || r.Len() != 0 {
			return vfs.Cred{}, rpcv2.AUTH_BADCRED
		}
		c := vfs.Cred{Uid: p.Uid, Gid: p.Gid, Groups: p.Gids}
		if s.opts.RootSquash {
			c = squash(c)
		}
		return c, rpcv2.AUTH_OK
	case rpcv2.AUTH_NONE:
		if !s.opts.AllowAuthNone {
			return vfs.Cred{}, rpcv2.AUTH_TOOWEAK
		}
		return vfs.Cred{Uid: nobody, Gid: nobody}, rpcv2.AUTH_OK
	}
	return vfs.Cred{}, rpcv2.AUTH_TOOWEAK
}

// squash maps root to nobody, in the uid, the gid and the groups.
func squash(c vfs.Cred) vfs.Cred {
	if c.Uid == 0 {
		c.Uid = nobody
	}
	if c.Gid == 0 {
		c.Gid = nobody
	}
	var groups []uint32
	for _, g := range c.Groups {
		if g == 0 {
			g = nobody
		}
		groups = append(groups, g)
	}
	c.Groups = groups
	return c
}
