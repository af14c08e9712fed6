package meta

import (
	"context"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// Export intents. Before the exporter writes an object for an inode it
// records the key as an intent, durably (its sync before touching the
// bucket covers the record): a crash between the object landing in the
// bucket and the record of it (Synced) would otherwise leave an object of
// ours that no inode knows, which the importer would take for a bucket-side
// file, resurrecting a name the file side removed. With the intent, the
// next reconcile of the inode adopts the object if the inode still wants
// the key, and deletes it (if it is still ours) if not; the importer leaves
// alone an object of ours that an intent names. Synced drops an inode's
// intents with the record of what it exported, Forget with the inode.
//
//	e<ino><key>   an object key ino may have written without a record

func intentPrefix(ino Ino) []byte { return kv.AppendUint64([]byte{pIntent}, uint64(ino)) }

// intentKey is the record of ino's intent for the object key.
func intentKey(ino Ino, key string) []byte { return append(intentPrefix(ino), key...) }

// AddIntents records that the exporter may write keys for ino.
func (s *Store) AddIntents(ctx context.Context, ino Ino, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		if _, err := s.getInode(tx, ino); err != nil {
			return err
		}
		for _, k := range keys {
			if err := tx.Set(intentKey(ino, k), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// Intents returns the keys ino has intents for.
func (s *Store) Intents(ctx context.Context, ino Ino) (keys []string, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		keys = keys[:0]
		p := intentPrefix(ino)
		return r.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool {
			keys = append(keys, string(k[len(p):]))
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("intents of %d: %w", ino, err)
	}
	return keys, nil
}

// HasIntent reports whether ino has an intent for key.
func (s *Store) HasIntent(ctx context.Context, ino Ino, key string) (ok bool, err error) {
	err = s.kv.View(ctx, func(r kv.Reader) error {
		_, err := r.Get(intentKey(ino, key))
		switch {
		case err == nil:
			ok = true
		case errors.Is(err, kv.ErrNotFound):
			ok = false
		default:
			return err
		}
		return nil
	})
	return ok, err
}

// DropIntent removes one intent of ino (its object is gone, or not ours).
func (s *Store) DropIntent(ctx context.Context, ino Ino, key string) error {
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		return tx.Delete(intentKey(ino, key))
	})
}

func dropIntents(tx kv.Txn, ino Ino) error {
	p := intentPrefix(ino)
	return tx.DeleteRange(p, kv.PrefixEnd(p))
}
