package nfs4

import (
	"bytes"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// retransmit sends args with the xid of c's last call, as a client does
// when it lost the reply, and returns the raw reply.
func (c *tclient) retransmit(args []byte) []byte {
	c.xid--
	_, res := c.rpc(nfsProgram, 4, 1, args)
	return res
}

func (c *tclient) send(args []byte) []byte {
	_, res := c.rpc(nfsProgram, 4, 1, args)
	return res
}

// A 4.0 request sent again with the same xid, on the same connection or a
// new one, gets the first reply and does not run again (issue 11): a
// retransmitted CREATE does not fail with NFS4ERR_EXIST nor a REMOVE with
// NFS4ERR_NOENT. Another xid is another request.
func TestNFSv40RetransmittedRequestsGetTheFirstReply(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.dial(0, userCred)
	c.setclientid40("drc")
	mkdir := encodeArgs("mkdir", 0, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_CREATE{
		Opcreate: nfsv4.Create4args{Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "once"}}})
	first := c.send(mkdir)
	if st := decodeRes(t, first).Status; st != nfsv4.NFS4_OK {
		t.Fatalf("CREATE: %s", nfsv4.Nfsstat4_name[st])
	}
	if again := c.retransmit(mkdir); !bytes.Equal(again, first) {
		t.Errorf("a retransmitted CREATE was answered %s, not with its first reply", nfsv4.Nfsstat4_name[decodeRes(t, again).Status])
	}
	// After a reconnection too: the cache knows the client by address.
	other := e.dial(0, userCred)
	other.xid = c.xid
	if again := other.retransmit(mkdir); !bytes.Equal(again, first) {
		t.Errorf("a CREATE retransmitted on a new connection was answered %s", nfsv4.Nfsstat4_name[decodeRes(t, again).Status])
	}
	// The same request under a new xid runs.
	if st := decodeRes(t, c.send(mkdir)).Status; st != nfsv4.NFS4ERR_EXIST {
		t.Errorf("the same CREATE with a new xid: %s, want NFS4ERR_EXIST", nfsv4.Nfsstat4_name[st])
	}

	rmdir := encodeArgs("rmdir", 0, []nfsv4.NfsArgop4{putroot(), remove("once")})
	first = c.send(rmdir)
	if st := decodeRes(t, first).Status; st != nfsv4.NFS4_OK {
		t.Fatalf("REMOVE: %s", nfsv4.Nfsstat4_name[st])
	}
	if again := c.retransmit(rmdir); !bytes.Equal(again, first) {
		t.Errorf("a retransmitted REMOVE was answered %s, not with its first reply", nfsv4.Nfsstat4_name[decodeRes(t, again).Status])
	}
	// Another principal with the same xid and bytes is not answered from
	// the cache: its request runs (and finds nothing to remove).
	stranger := e.dial(0, authSys(1001, 1001))
	stranger.xid = c.xid
	if st := decodeRes(t, stranger.retransmit(rmdir)).Status; st != nfsv4.NFS4ERR_NOENT {
		t.Errorf("another principal's request with a cached xid: %s, want NFS4ERR_NOENT", nfsv4.Nfsstat4_name[st])
	}
}
