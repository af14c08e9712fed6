package meta

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// secretSize is the length of a secret made by Secret: 256 bits.
const secretSize = 32

// Secret returns the file system's secret named name, making it (random,
// secretSize bytes) the first time it is asked for. A secret is made once
// and never changes: everything derived from it (the NFS server's
// filehandles) stays valid across restarts. It is durable before Secret
// returns it, so nothing handed out under it can outlive it.
func (s *Store) Secret(ctx context.Context, name string) ([]byte, error) {
	key := append([]byte("c/secret/"), name...)
	var secret []byte
	made := false
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		made = false // this run's, should an earlier run not have committed
		v, err := tx.Get(key)
		if err == nil {
			if len(v) != secretSize {
				return fmt.Errorf("secret %q has %d bytes, want %d", name, len(v), secretSize)
			}
			secret = v
			return nil
		}
		if !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		secret = make([]byte, secretSize)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		made = true
		return tx.Set(key, secret)
	})
	if err == nil && made {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return secret, nil
}
