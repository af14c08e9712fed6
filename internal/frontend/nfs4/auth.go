package nfs4

import (
	"bytes"
	"fmt"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"

	"bucketfs/internal/vfs"
)

// caller is who sends a request: the vfs identity it runs as, and the
// principal client records are bound to (RFC 8881 2.4: with AUTH_SYS, the
// uid, gid and machine name the credential states, before any squashing).
type caller struct {
	cred      vfs.Cred
	principal string
}

// credOf turns an RPC credential into the caller of the request: AUTH_SYS
// with its supplementary groups, root squashed if configured; AUTH_NONE as
// nobody if allowed. Anything else is refused.
func (s *Server) credOf(a *rpcv2.OpaqueAuth) (caller, rpcv2.AuthStat) {
	switch a.Flavor {
	case rpcv2.AUTH_SYS:
		var p rpcv2.AuthsysParms
		r := bytes.NewReader(a.Body)
		if _, err := p.ReadFrom(r); err != nil || r.Len() != 0 {
			return caller{}, rpcv2.AUTH_BADCRED
		}
		who := caller{cred: vfs.Cred{Uid: p.Uid, Gid: p.Gid, Groups: p.Gids},
			principal: fmt.Sprintf("sys:%d:%d@%q", p.Uid, p.Gid, p.Machinename)}
		if s.opts.RootSquash {
			who.cred = squash(who.cred)
		}
		return who, rpcv2.AUTH_OK
	case rpcv2.AUTH_NONE:
		if !s.opts.AllowAuthNone {
			return caller{}, rpcv2.AUTH_TOOWEAK
		}
		return caller{cred: vfs.Cred{Uid: nobody, Gid: nobody}, principal: "none"}, rpcv2.AUTH_OK
	}
	return caller{}, rpcv2.AUTH_TOOWEAK
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
