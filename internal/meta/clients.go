package meta

import (
	"context"
	"fmt"

	"bucketfs/internal/kv"
)

// Client records are the NFS server's stable storage (RFC 8881 8.4.3, RFC
// 7530 9.6.3): one record per client that holds, or may hold, opens and
// locks, kept so that after a restart the server knows which clients may
// reclaim their state and refuses everyone else's new locks until they
// have. The value is the NFS server's; this package only keeps it.
// PutClientRecord and DeleteClientRecord are durable when they return.

const pClient = 'n'

func clientKey(owner string) []byte { return append([]byte{pClient}, owner...) }

// ClientRecords returns every client record, by owner.
func (s *Store) ClientRecords(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		lo := []byte{pClient}
		return r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			out[string(k[1:])] = append([]byte(nil), v...)
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("client records: %w", err)
	}
	return out, nil
}

// PutClientRecord stores the record of owner and makes it durable.
func (s *Store) PutClientRecord(ctx context.Context, owner string, rec []byte) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Set(clientKey(owner), rec) })
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("record client: %w", err)
	}
	return nil
}

// DeleteClientRecord removes the record of owner, if any, durably.
func (s *Store) DeleteClientRecord(ctx context.Context, owner string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(clientKey(owner)) })
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("forget client: %w", err)
	}
	return nil
}

// ChangeClientRecords stores the records of put and removes those of del
// in one atomic change, durable when it returns.
func (s *Store) ChangeClientRecords(ctx context.Context, put map[string][]byte, del []string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for owner, rec := range put {
			if err := tx.Set(clientKey(owner), rec); err != nil {
				return err
			}
		}
		for _, owner := range del {
			if err := tx.Delete(clientKey(owner)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("change client records: %w", err)
	}
	return nil
}
