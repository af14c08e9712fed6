package nfsclient

import (
	"fmt"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// resultAt returns results[i] as a T, or an error if the reply is short
// or holds another operation there (a server bug, not a status).
func resultAt[T nfsv4.NfsResop4](results []nfsv4.NfsResop4, i int) (T, error) {
	var zero T
	if i >= len(results) {
		return zero, fmt.Errorf("nfsclient: reply has %d results, want at least %d", len(results), i+1)
	}
	r, ok := results[i].(T)
	if !ok {
		return zero, fmt.Errorf("nfsclient: result %d is %s, want %T", i, opName(results[i].GetResop()), zero)
	}
	return r, nil
}

// unionOK returns a result union's NFS4_OK arm as a T. Do has already
// turned failed statuses into errors, so a mismatch is a server bug.
func unionOK[T any](u any) (T, error) {
	r, ok := u.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("nfsclient: result union is %T, want %T", u, zero)
	}
	return r, nil
}
