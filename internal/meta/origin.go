package meta

import (
	"context"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// keyBucket records which bucket (and prefix) the file system mirrors, as
// "s3://bucket/prefix". Invariant: a namespace is only ever opened for the
// bucket it was made for. Its inodes record object versions, its queue
// names keys to write and delete; applied to another bucket, or to another
// prefix of the same one, they would delete or overwrite objects that are
// not the file system's. This matters most where the store is shared and
// named by a URL (several servers on one database), where a mistyped
// --bucket or two file systems in one schema would otherwise mix.
var keyBucket = []byte("c/bucket")

// ErrOtherBucket is returned by Open when the namespace belongs to
// another bucket or prefix than Options.Bucket.
var ErrOtherBucket = errors.New("the metadata store belongs to another bucket")

// checkBucket records bucket on a namespace that has none recorded (a new
// one, or one made before the record existed) and refuses one that
// records another.
func checkBucket(tx kv.Txn, bucket string) error {
	if bucket == "" {
		return nil
	}
	v, err := tx.Get(keyBucket)
	if errors.Is(err, kv.ErrNotFound) {
		return tx.Set(keyBucket, []byte(bucket))
	}
	if err != nil {
		return err
	}
	if string(v) != bucket {
		return fmt.Errorf("%w: it is the file system of %s, not of %s (give each file system its own state directory or database schema)",
			ErrOtherBucket, v, bucket)
	}
	return nil
}

// Described reads, without opening a Store (which would make a file system
// in an empty store), whether db holds a file system and the bucket it
// mirrors ("" if none is recorded).
func Described(ctx context.Context, db kv.Store) (exists bool, bucket string, err error) {
	err = db.View(ctx, func(r kv.Reader) error {
		exists, bucket = false, ""
		if _, err := r.Get(keyFsid); errors.Is(err, kv.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		exists = true
		v, err := r.Get(keyBucket)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		bucket = string(v)
		return err
	})
	return exists, bucket, err
}
