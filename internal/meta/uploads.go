package meta

import (
	"context"
	"fmt"

	"bucketfs/internal/kv"
)

// Upload is one record of the journal of multipart uploads in flight: an
// upload bucketfs started in the bucket and has not yet seen completed or
// aborted. A crash in the middle of an upload leaves its parts stored (and
// billed) in the bucket, with nothing to say that bucketfs made them; the
// record says so, and the next start aborts the upload. Uploads other tools
// make in the same bucket have no record and are never touched.
type Upload struct {
	ID  string // the store's upload id
	Key string // the object key, relative to the file system's prefix
}

func uploadKey(id string) []byte { return append([]byte{pUpload}, id...) }

// BeginUpload records the multipart upload id of key and makes the record
// durable, with every change committed before it, before it returns: call
// it before the upload's first part is sent.
func (s *Store) BeginUpload(ctx context.Context, id, key string) error {
	if err := s.setDurably(ctx, uploadKey(id), []byte(key)); err != nil {
		return fmt.Errorf("record upload %s of %q: %w", id, key, err)
	}
	return nil
}

// setDurably sets k to v and syncs the store, so that the record, and
// every change committed before it, survives a crash once it returns.
func (s *Store) setDurably(ctx context.Context, k, v []byte) error {
	if err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Set(k, v) }); err != nil {
		return err
	}
	return s.kv.Sync(ctx)
}

// EndUpload deletes the record of upload id once the upload is completed
// or aborted. The deletion need not be durable: a record that comes back
// after a crash names an upload the store no longer has, and aborting it
// again is harmless.
func (s *Store) EndUpload(ctx context.Context, id string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(uploadKey(id)) })
	if err != nil {
		return fmt.Errorf("forget upload %s: %w", id, err)
	}
	return nil
}

// A multipart upload is also recorded by its key before it is created
// (BeginUploadOf), since its id comes only with the creation: a crash
// between the creation and BeginUpload leaves an upload no id record names.
// At the next start every upload of a key recorded so is aborted.

func uploadOfKey(key string) []byte { return append([]byte{pUploadOf}, key...) }

// BeginUploadOf records, durably, that a multipart upload of key is about
// to be created.
func (s *Store) BeginUploadOf(ctx context.Context, key string) error {
	if err := s.setDurably(ctx, uploadOfKey(key), nil); err != nil {
		return fmt.Errorf("record an upload of %q: %w", key, err)
	}
	return nil
}

// EndUploadOf deletes the record of BeginUploadOf once the upload of key
// is completed, aborted or recorded by its id (no sync needed, as for
// EndUpload).
func (s *Store) EndUploadOf(ctx context.Context, key string) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(uploadOfKey(key)) })
	if err != nil {
		return fmt.Errorf("forget the upload of %q: %w", key, err)
	}
	return nil
}

// UploadsOf returns the keys recorded by BeginUploadOf.
func (s *Store) UploadsOf(ctx context.Context) ([]string, error) {
	var out []string
	prefix := []byte{pUploadOf}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		out = out[:0]
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			out = append(out, string(k[1:]))
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list recorded uploads: %w", err)
	}
	return out, nil
}

// Uploads returns the recorded uploads, by id.
func (s *Store) Uploads(ctx context.Context) ([]Upload, error) {
	var out []Upload
	prefix := []byte{pUpload}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		out = out[:0]
		return r.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			out = append(out, Upload{ID: string(k[1:]), Key: string(v)})
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list recorded uploads: %w", err)
	}
	return out, nil
}
