package testkv

import (
	"context"
	"errors"
	"os"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A store opened again in the same directory holds what the first left
// there (a restart); one in another directory is empty.
func TestAStoreOpenedAgainInItsDirectoryFindsItsKeysAndAnotherDirectoryIsEmpty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	get := func(db kv.Store) (v []byte, err error) {
		err = db.View(ctx, func(r kv.Reader) error {
			v, err = r.Get([]byte("k"))
			return err
		})
		return v, err
	}
	again := MustOpen(t, dir)
	if v, err := get(again); err != nil || string(v) != "v" {
		t.Fatalf("reopened store: k = %q, %v; want v", v, err)
	}
	other := MustOpen(t, t.TempDir())
	if v, err := get(other); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("a store in another directory: k = %q, %v; want not found", v, err)
	}
	t.Logf("backend %s", backend())
}
