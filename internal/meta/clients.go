package meta

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// Client records are the NFS server's stable storage (RFC 8881 8.4.3, RFC
// 7530 9.6.3): one record per client that holds, or may hold, opens and
// locks, kept so that after a restart the server knows which clients may
// reclaim their state and refuses everyone else's new locks until they
// have. The value is the NFS server's; this package only keeps it.
//
// Each NFS server keeps its own records, under its identity: a number it
// keeps in its state directory, the same at every start, so that a
// restarted server finds exactly the clients it had, and several servers
// on one store never read, reclaim or delete each other's:
//
//	N<identity><client owner>   a client of the NFS server identity
//
// A server writes only keys under its own identity, with one exception:
// the records of a server that has been gone for good (package nfs4 says
// when) are deleted by another, all at once, and only if they are still
// exactly as it read them (DeleteClientRecordsOf), so that a server that
// came back meanwhile keeps what it wrote.
//
// Records of the earlier form, n<client owner>, were written when one
// server was the only one; the first server that starts takes them over
// as its own (AdoptLegacyClientRecords), in one transaction, so they go
// to exactly one server.
//
// Every change here is durable when it returns.

const (
	pClient       = 'N'
	pLegacyClient = 'n'
)

func clientPrefix(server uint64) []byte { return kv.AppendUint64([]byte{pClient}, server) }

func clientKey(server uint64, owner string) []byte { return append(clientPrefix(server), owner...) }

// ClientRecords returns every client record of the NFS server identity
// server, by owner.
func (s *Store) ClientRecords(ctx context.Context, server uint64) (map[string][]byte, error) {
	var out map[string][]byte
	err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		out, err = clientRecords(r, server)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("client records: %w", err)
	}
	return out, nil
}

func clientRecords(r kv.Reader, server uint64) (map[string][]byte, error) {
	out := map[string][]byte{}
	lo := clientPrefix(server)
	err := r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
		out[string(k[len(lo):])] = append([]byte(nil), v...)
		return true
	})
	return out, err
}

// ClientRecordServers returns the identities of the NFS servers that have
// client records, with how many each has.
func (s *Store) ClientRecordServers(ctx context.Context) (map[uint64]int, error) {
	out := map[uint64]int{}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		clear(out)
		lo := []byte{pClient}
		return r.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			if len(k) >= 9 {
				out[kv.Uint64(k[1:])]++
			}
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("client records: %w", err)
	}
	return out, nil
}

// PutClientRecord stores the record of owner of the NFS server identity
// server and makes it durable.
func (s *Store) PutClientRecord(ctx context.Context, server uint64, owner string, rec []byte) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Set(clientKey(server, owner), rec) })
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("record client: %w", err)
	}
	return nil
}

// DeleteClientRecord removes the record of owner of the NFS server
// identity server, if any, durably.
func (s *Store) DeleteClientRecord(ctx context.Context, server uint64, owner string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(clientKey(server, owner)) })
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("forget client: %w", err)
	}
	return nil
}

// ChangeClientRecords stores the records of put and removes those of del,
// all of the NFS server identity server, in one atomic change, durable
// when it returns.
func (s *Store) ChangeClientRecords(ctx context.Context, server uint64, put map[string][]byte, del []string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		for owner, rec := range put {
			if err := tx.Set(clientKey(server, owner), rec); err != nil {
				return err
			}
		}
		for _, owner := range del {
			if err := tx.Delete(clientKey(server, owner)); err != nil {
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

// ErrClientRecordsChanged is DeleteClientRecordsOf's answer when the
// records are no longer those the caller read.
var ErrClientRecordsChanged = errors.New("the client records changed since they were read")

// DeleteClientRecordsOf deletes every client record of the NFS server
// identity server, in one transaction, if they are exactly seen (as
// ClientRecords returned them); otherwise it deletes nothing and returns
// ErrClientRecordsChanged.
func (s *Store) DeleteClientRecordsOf(ctx context.Context, server uint64, seen map[string][]byte) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		now, err := clientRecords(tx, server)
		if err != nil {
			return err
		}
		if len(now) != len(seen) {
			return ErrClientRecordsChanged
		}
		for owner, v := range now {
			if w, ok := seen[owner]; !ok || !bytes.Equal(v, w) {
				return ErrClientRecordsChanged
			}
		}
		for owner := range now {
			if err := tx.Delete(clientKey(server, owner)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("delete the client records of NFS server %016x: %w", server, err)
	}
	return nil
}

// AdoptLegacyClientRecords moves every client record of the earlier,
// single-server form (n<owner>) under the NFS server identity server, in
// one transaction, keeping a record server has already for the same
// owner. It returns how many it moved.
func (s *Store) AdoptLegacyClientRecords(ctx context.Context, server uint64) (int, error) {
	var moved int
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		moved = 0
		type rec struct{ k, v []byte }
		var old []rec
		lo := []byte{pLegacyClient}
		if err := tx.Scan(lo, kv.PrefixEnd(lo), func(k, v []byte) bool {
			old = append(old, rec{append([]byte(nil), k...), append([]byte(nil), v...)})
			return true
		}); err != nil {
			return err
		}
		for _, r := range old {
			key := clientKey(server, string(r.k[1:]))
			_, err := tx.Get(key)
			switch {
			case errors.Is(err, kv.ErrNotFound):
				if err := tx.Set(key, r.v); err != nil {
					return err
				}
				moved++
			case err != nil:
				return err
			}
			if err := tx.Delete(r.k); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && moved > 0 {
		err = s.kv.Sync(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("adopt client records: %w", err)
	}
	return moved, nil
}
