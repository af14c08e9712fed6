package nfsclient

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// ErrClosed is returned by calls on a connection that has been closed,
// by Close or because the server or network ended it. Errors for calls
// cut off by a failed connection wrap both ErrClosed and the cause.
var ErrClosed = errors.New("nfsclient: connection closed")

// Status is an nfsstat4 usable as an errors.Is target:
//
//	errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_NOENT))
type Status nfsv4.Nfsstat4

func (s Status) Error() string { return statusName(nfsv4.Nfsstat4(s)) }

// StatusError is an NFS operation that failed with a status other than
// NFS4_OK. Op is the failing operation; it is zero when the COMPOUND as a
// whole failed before any operation ran (e.g. NFS4ERR_MINOR_VERS_MISMATCH).
type StatusError struct {
	Op     nfsv4.NfsOpnum4
	Status nfsv4.Nfsstat4
	// Denied describes the conflicting lock when LOCK or LOCKT fails
	// with NFS4ERR_DENIED.
	Denied *nfsv4.Lock4denied
}

func (e *StatusError) Error() string {
	op := "COMPOUND"
	if e.Op != 0 {
		op = opName(e.Op)
	}
	return fmt.Sprintf("nfs4 %s: %s", op, statusName(e.Status))
}

// Is matches a Status with the same value, a *StatusError with the same
// status (and the same Op, unless the target's Op is zero), and the io/fs
// sentinels for the statuses that mean the same thing.
func (e *StatusError) Is(target error) bool {
	switch t := target.(type) {
	case Status:
		return nfsv4.Nfsstat4(t) == e.Status
	case *StatusError:
		return t.Status == e.Status && (t.Op == 0 || t.Op == e.Op)
	}
	switch target {
	case fs.ErrNotExist:
		return e.Status == nfsv4.NFS4ERR_NOENT
	case fs.ErrExist:
		return e.Status == nfsv4.NFS4ERR_EXIST
	case fs.ErrPermission:
		return e.Status == nfsv4.NFS4ERR_ACCESS || e.Status == nfsv4.NFS4ERR_PERM
	}
	return false
}

// RPCError is an RPC reply that did not carry results: the call was
// accepted but not executed (Accepted, with Stat != SUCCESS) or it was
// denied (an RPC version mismatch or an authentication error).
type RPCError struct {
	Xid uint32
	// Accepted is true for MSG_ACCEPTED replies; AcceptStat says why the
	// procedure did not run (PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL,
	// GARBAGE_ARGS, SYSTEM_ERR).
	Accepted   bool
	AcceptStat rpcv2.AcceptStat
	// RejectStat is RPC_MISMATCH or AUTH_ERROR for denied replies;
	// AuthStat gives the reason for AUTH_ERROR.
	RejectStat rpcv2.RejectStat
	AuthStat   rpcv2.AuthStat
	// Low and High are the supported range for PROG_MISMATCH and
	// RPC_MISMATCH.
	Low, High uint32
}

func (e *RPCError) Error() string {
	if e.Accepted {
		s := fmt.Sprintf("rpc: call accepted but failed: %s", rpcv2.AcceptStat_name[e.AcceptStat])
		if e.AcceptStat == rpcv2.PROG_MISMATCH {
			s += fmt.Sprintf(" (supported %d-%d)", e.Low, e.High)
		}
		return s
	}
	if e.RejectStat == rpcv2.AUTH_ERROR {
		return fmt.Sprintf("rpc: call denied: AUTH_ERROR %s", rpcv2.AuthStat_name[e.AuthStat])
	}
	return fmt.Sprintf("rpc: call denied: RPC_MISMATCH (supported %d-%d)", e.Low, e.High)
}

// opError builds the error for a COMPOUND whose status is not NFS4_OK: per
// RFC 8881 §15.2 the failing operation is the last one in the results.
func opError(res *nfsv4.Compound4res) error {
	e := &StatusError{Status: res.Status}
	if n := len(res.Resarray); n > 0 {
		last := res.Resarray[n-1]
		e.Op = last.GetResop()
		switch r := last.(type) {
		case *nfsv4.NfsResop4_OP_LOCK:
			if d, ok := r.Oplock.(*nfsv4.Lock4res_NFS4ERR_DENIED); ok {
				e.Denied = &d.Denied
			}
		case *nfsv4.NfsResop4_OP_LOCKT:
			if d, ok := r.Oplockt.(*nfsv4.Lockt4res_NFS4ERR_DENIED); ok {
				e.Denied = &d.Denied
			}
		}
	}
	return e
}

func statusName(s nfsv4.Nfsstat4) string {
	if n, ok := nfsv4.Nfsstat4_name[s]; ok {
		return n
	}
	return fmt.Sprintf("nfsstat4(%d)", int32(s))
}

func opName(op nfsv4.NfsOpnum4) string {
	if n, ok := nfsv4.NfsOpnum4_name[op]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", int32(op))
}
