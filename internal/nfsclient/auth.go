package nfsclient

import (
	"bytes"
	"context"

	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

// Auth supplies the credential and verifier sent with each RPC call.
type Auth interface {
	Credential() (cred, verf rpcv2.OpaqueAuth, err error)
}

// AuthNone is the AUTH_NONE flavor: no identity at all.
type AuthNone struct{}

// Credential implements Auth.
func (AuthNone) Credential() (rpcv2.OpaqueAuth, rpcv2.OpaqueAuth, error) {
	return rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}, rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}, nil
}

// AuthSys is the AUTH_SYS flavor (RFC 5531 appendix A): a numeric uid,
// gid and up to 16 supplementary gids, plus the caller's machine name.
type AuthSys struct {
	Stamp       uint32
	MachineName string
	UID, GID    uint32
	GIDs        []uint32
}

// Credential implements Auth. It fails if the machine name is longer than
// 255 bytes or there are more than 16 supplementary gids; use RawAuth to
// send such a credential on purpose.
func (a AuthSys) Credential() (rpcv2.OpaqueAuth, rpcv2.OpaqueAuth, error) {
	parms := rpcv2.AuthsysParms{
		Stamp:       a.Stamp,
		Machinename: a.MachineName,
		Uid:         a.UID,
		Gid:         a.GID,
		Gids:        a.GIDs,
	}
	var body bytes.Buffer
	if _, err := parms.WriteTo(&body); err != nil {
		return rpcv2.OpaqueAuth{}, rpcv2.OpaqueAuth{}, err
	}
	return rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_SYS, Body: body.Bytes()},
		rpcv2.OpaqueAuth{Flavor: rpcv2.AUTH_NONE}, nil
}

// RawAuth sends the given credential and verifier verbatim, for tests of
// how a server treats odd or unsupported flavors.
type RawAuth struct {
	Cred, Verf rpcv2.OpaqueAuth
}

// Credential implements Auth.
func (a RawAuth) Credential() (rpcv2.OpaqueAuth, rpcv2.OpaqueAuth, error) {
	return a.Cred, a.Verf, nil
}

type authKey struct{}

// WithAuth returns a context whose calls carry a instead of the
// connection's default credential, e.g. to act as another user for one
// operation.
func WithAuth(ctx context.Context, a Auth) context.Context {
	return context.WithValue(ctx, authKey{}, a)
}

func authFromContext(ctx context.Context) Auth {
	a, _ := ctx.Value(authKey{}).(Auth)
	return a
}

type tagKey struct{}

// WithTag returns a context whose compounds sent by Client methods carry
// tag as their COMPOUND tag, which servers echo and may log.
func WithTag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

func tagFromContext(ctx context.Context) string {
	t, _ := ctx.Value(tagKey{}).(string)
	return t
}
