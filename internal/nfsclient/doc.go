// Package nfsclient is an NFSv4 client for bucketfs's tests and
// benchmarks, built on the XDR types of github.com/buildbarn/go-xdr
// (pkg/protocols/nfsv4 and rpcv2). It exists to drive an NFS server over
// real TCP the way a kernel client would, and to let tests step outside
// what a well-behaved client does. It is not a file system client for
// production use: it caches nothing and retries nothing.
//
// # Layers
//
// Conn is ONC RPC (RFC 5531) over one TCP connection: record marking
// (records split into fragments on the way out if asked, fragments joined
// on the way in, a bound on record size), CALL messages with AUTH_SYS or
// AUTH_NONE credentials (or any raw credential), and XIDs. Calls may run
// concurrently: a request is written whole under a write lock and a
// single reader goroutine hands each reply to the call waiting for its
// XID. A call whose context ends stops waiting; its late reply is
// dropped. Conn.Compound sends any COMPOUND as given and Conn.RawCall
// any bytes, so tests can send unknown operations, wrong minor versions
// or broken XDR.
//
// Client is the NFSv4 protocol state on a Conn. With Config.MinorVersion
// 1 or 2 it performs EXCHANGE_ID (no pNFS, no state protection),
// CREATE_SESSION (fore channel only; no callbacks are ever accepted) and
// RECLAIM_COMPLETE, and then every Do or DoCompound takes a slot from the
// session's slot table and prepends SEQUENCE with the slot's next
// sequence id. A slot is released only when its reply has arrived (or the
// connection has died), even if the caller gave up, so the client's
// sequence ids never fall out of step with the server's. Retransmit and
// RetransmitSlot resend a slot's last request with the same sequence id
// to exercise the server's reply cache; SequenceOp builds SEQUENCE
// operations by hand for misordering tests. With MinorVersion 0 the
// Client performs SETCLIENTID and SETCLIENTID_CONFIRM, sends RENEW for
// Renew, confirms a new open-owner's first OPEN with OPEN_CONFIRM, and
// keeps open-owner and lock-owner seqids (RFC 7530 §9.1.7), serializing
// each owner's seqid-bearing operations. Config.RenewInterval keeps the
// lease alive in the background.
//
// The convenience methods (LookupPath, GetAttr, Create, Open, Read,
// Write, Commit, CloseFile, Mkdir, Symlink, Readlink, Remove, Rename,
// Link, SetAttr, Access, Lock, LockT, LockU, Seek, Allocate, Deallocate)
// each send one compound; ReadDir sends one per page. Filehandles are
// plain byte slices. An OpenFile is one OPEN: its handle, open stateid
// and open-owner (a fresh owner per open unless OpenOptions.Owner names
// one), and a lock-owner of its own once it has been locked.
//
// # Errors
//
// A failed operation is a *StatusError carrying the nfsstat4 and the
// operation that failed; errors.Is matches it against Status(nfsv4.X),
// another *StatusError, and fs.ErrNotExist, fs.ErrExist and
// fs.ErrPermission. RPC-level refusals are *RPCError. A reply that does
// not fit the request (results out of order, an NFS4_OK compound with
// missing results, stray bytes) is a plain error: the server is wrong.
//
// # Attributes
//
// attrs.go decodes and encodes fattr4 values per RFC 8881 §5 from one
// table of attribute numbers, names and XDR types. Decoding fails on an
// attribute it does not know, on truncated values and on leftover bytes,
// which makes it strict enough to catch a server that encodes one wrong.
package nfsclient
