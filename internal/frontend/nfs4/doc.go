// Package nfs4 is the NFSv4 front end of bucketfs: an NFSv4.1 server (with
// the NFSv4.0 forms and the useful NFSv4.2 operations, extended attributes
// included) over the vfs API, on the XDR types of
// github.com/buildbarn/go-xdr. It holds no file system logic: every name,
// permission, byte, extended attribute and byte-range lock is a vfs call.
//
// # Layers
//
// A connection (conn.go) reads ONC RPC records with TCP record marking,
// capped in size, and hands each CALL to the server with the caller's
// credential (auth.go: AUTH_SYS, optional AUTH_NONE, root squash). One
// goroutine reads each connection; requests run in short-lived goroutines
// bounded per connection and per server, so a client that pipelines cannot
// grow memory or goroutines without bound. Replies are written whole under
// a per-connection mutex.
//
// A COMPOUND (compound.go) is decoded one operation at a time, so an
// unknown operation number ends the request with NFS4ERR_OP_ILLEGAL instead
// of failing the whole RPC, and a truncated argument ends it with
// NFS4ERR_BADXDR. The operations run in order against an explicit
// per-request value (the current and saved filehandles, the current
// stateid, the session slot) until one fails. Each operation is one method
// with the same shape, grouped by area in the ops_*.go files.
//
// Extended attributes (RFC 8276, xattr.go) are 4.2 operations go-xdr does
// not know: their arguments are decoded and their results encoded by hand,
// and in 4.0 and 4.1 they are NFS4ERR_OP_ILLEGAL like any unknown
// operation. An NFS xattr name is a vfs name in the "user." namespace
// without the prefix; no other namespace is visible over NFS.
//
// # State
//
// Protocol state is plain data in one table guarded by one mutex
// (state.go): clients (from EXCHANGE_ID in session.go or SETCLIENTID in
// ops40.go), their sessions with slot tables and reply caches
// (session.go), open owners and their open states (each holding one
// vfs.Handle), lock owners and their lock states (the locks themselves
// // live in vfs, owned by locks.Owner{ID: lock owner, Client: client id}).
// Stateids name open and lock states; a stateid's "other" field is a
// random per-boot prefix, the client's id and a counter, so a stateid from
// an earlier server instance is recognisably stale, one of a client that
// expired is expired, and any other unknown one bad. The mutex is never
// held across a vfs call. A client record is bound to the principal that
// made it (AUTH_SYS uid, gid and machine name: auth.go).
//
// NFSv4.0 has no sessions: each open-owner and lock-owner orders its
// OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE, LOCK and LOCKU requests by
// seqid and keeps the encoded reply to its last one (seqid.go, RFC 7530
// 9.1). The last seqid again is a retransmission, answered
// from that reply (an OPEN's also restores the current filehandle to the
// opened file) rather than run twice; the next one runs; any other is
// NFS4ERR_BAD_SEQID. The stateid an owner's last CLOSE ended stays known
// so that a retransmitted CLOSE is answered too. Every other 4.0 request is
// covered by a duplicate request cache keyed by client address, xid and
// request (drc.go).
//
// 4.1 sessions enforce the limits negotiated at CREATE_SESSION: operation
// count and request size at SEQUENCE, reply size (and, for replies the
// client wants cached, the cached size) as each operation's result is
// added.
//
// Byte-range locks: CLOSE releases the locks the open-owner's lock-owners
// still hold on the file (RFC 8881 18.2.3 and RFC 7530 16.2.4 let a
// server either do that or refuse with NFS4ERR_LOCKS_HELD; Linux's own
// server releases them too). FREE_STATEID of a lock
// stateid and RELEASE_LOCKOWNER refuse with NFS4ERR_LOCKS_HELD while
// locks remain, and DESTROY_CLIENTID refuses with NFS4ERR_CLIENTID_BUSY
// while the client has sessions or open files. Blocking lock requests
// (READW_LT, WRITEW_LT) never wait in the server: a conflict is answered
// NFS4ERR_DENIED at once and the client polls, which RFC 8881 9.6 and
// RFC 7530 9.4 allow; a waiting request would hold a slot (4.1) or an
// owner's seqid (4.0) for as long as the conflict lasts. With no back
// channel there is no CB_NOTIFY_LOCK, so polling is the only way anyway.
//
// Leases: every SEQUENCE (4.1) or stateful operation and RENEW (4.0)
// renews a client's lease. A reaper expires clients whose lease ran out:
// their open handles are released and their locks dropped, so other
// clients can take them.
//
// Restarts (grace.go): which clients hold state is kept in stable storage
// (the file system's kv) before their first open is granted; a server that
// starts with such records runs a grace period in which those clients
// reclaim their opens and locks and nobody else takes new ones.
//
// # Filehandles and cookies
//
// A filehandle is a version byte, a hash of the file system id, the inode
// number, the access point it was reached through and a MAC of them under
// a per-file-system secret (fh.go), so only the server makes them. Inode numbers are never reused and the secret is
// kept in the kv, so handles stay valid across restarts and a handle for a
// deleted inode is NFS4ERR_STALE.
// READDIR cookies are a hash of the entry name (readdir.go): stable across
// restarts and concurrent changes; a small cache maps recent cookies back
// to names so that resuming a listing of 100,000 entries never rereads it
// from the start, and a cache miss costs one scan of the directory.
//
// # Access points
//
// With access points configured (Options.AccessPoints, accesspoint.go),
// PUTROOTFH is a read-only pseudo-root listing only their names, and
// LOOKUP of a name gives that access point's root. Its handles carry the
// access point: every operation through one runs as the access point's
// identity whatever AUTH_SYS claims, LOOKUPP at its root stays there,
// PUTFH refuses (NFS4ERR_STALE) a handle whose file is no longer under the
// root, and RENAME, LINK and COPY across access points are NFS4ERR_XDEV.
//
// # Several servers
//
// Several servers may serve one file system from one store (identity.go):
// filehandles work through all of them; each keeps its own clients,
// sessions, stateids and leases, and its own client records under an
// identity that survives its restarts; locks, opens and share
// reservations bind the clients of every server (vfs's shared.go), and a
// dead server's stop binding the others after the registry's lease time,
// which every client's lease is shorter than.
//
// Delegations are never granted and no back channel is offered.
package nfs4
