package nfsclient

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

func TestStatusErrorsCompareByStatusOpAndFSMeaning(t *testing.T) {
	err := fmt.Errorf("lookup %q: %w", "x", &StatusError{Op: nfsv4.OP_LOOKUP, Status: nfsv4.NFS4ERR_NOENT})
	matches := []error{
		Status(nfsv4.NFS4ERR_NOENT),
		&StatusError{Status: nfsv4.NFS4ERR_NOENT},
		&StatusError{Op: nfsv4.OP_LOOKUP, Status: nfsv4.NFS4ERR_NOENT},
		fs.ErrNotExist,
	}
	for _, target := range matches {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%v, %v) = false, want true", err, target)
		}
	}
	misses := []error{
		Status(nfsv4.NFS4ERR_EXIST),
		&StatusError{Op: nfsv4.OP_OPEN, Status: nfsv4.NFS4ERR_NOENT},
		fs.ErrExist,
		fs.ErrPermission,
	}
	for _, target := range misses {
		if errors.Is(err, target) {
			t.Errorf("errors.Is(%v, %v) = true, want false", err, target)
		}
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Op != nfsv4.OP_LOOKUP {
		t.Fatalf("errors.As did not find the StatusError")
	}
	if got, want := se.Error(), "nfs4 OP_LOOKUP: NFS4ERR_NOENT"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestOpErrorNamesTheLastOperationOfAFailedCompound(t *testing.T) {
	res := &nfsv4.Compound4res{Status: nfsv4.NFS4ERR_DENIED, Resarray: []nfsv4.NfsResop4{
		&nfsv4.NfsResop4_OP_PUTFH{},
		&nfsv4.NfsResop4_OP_LOCK{Oplock: &nfsv4.Lock4res_NFS4ERR_DENIED{Denied: nfsv4.Lock4denied{Offset: 10, Length: 5}}},
	}}
	var se *StatusError
	if !errors.As(opError(res), &se) {
		t.Fatal("opError did not return a StatusError")
	}
	if se.Op != nfsv4.OP_LOCK || se.Status != nfsv4.NFS4ERR_DENIED || se.Denied == nil || se.Denied.Offset != 10 {
		t.Fatalf("got %+v", se)
	}
	empty := opError(&nfsv4.Compound4res{Status: nfsv4.NFS4ERR_MINOR_VERS_MISMATCH})
	if got, want := empty.Error(), "nfs4 COMPOUND: NFS4ERR_MINOR_VERS_MISMATCH"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestSeqidIsConsumedUnlessTheServerCouldNotPlaceTheRequest(t *testing.T) {
	ran := []nfsv4.NfsResop4{&nfsv4.NfsResop4_OP_PUTFH{}, &nfsv4.NfsResop4_OP_OPEN{}}
	tests := []struct {
		name    string
		results []nfsv4.NfsResop4
		err     error
		want    bool
	}{
		{"succeeded", ran, nil, true},
		{"failed with NOENT", ran, &StatusError{Op: nfsv4.OP_OPEN, Status: nfsv4.NFS4ERR_NOENT}, true},
		{"failed with BAD_SEQID", ran, &StatusError{Op: nfsv4.OP_OPEN, Status: nfsv4.NFS4ERR_BAD_SEQID}, false},
		{"failed with STALE_CLIENTID", ran, &StatusError{Op: nfsv4.OP_OPEN, Status: nfsv4.NFS4ERR_STALE_CLIENTID}, false},
		{"never reached", ran[:1], &StatusError{Op: nfsv4.OP_PUTFH, Status: nfsv4.NFS4ERR_STALE}, false},
		{"no reply", nil, errors.New("connection reset"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := seqidConsumed(tc.results, tc.err, 1); got != tc.want {
				t.Fatalf("seqidConsumed = %v, want %v", got, tc.want)
			}
		})
	}
}
