package postgres

import (
	"fmt"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"
	"bucketfs/internal/pgtest"
)

// BenchmarkPostgresStore is kvtest.Bench on a server of its own on
// loopback, each benchmark in a fresh schema.
func BenchmarkPostgresStore(b *testing.B) {
	srv := pgtest.Start(b)
	url := srv.NewDatabase(b)
	n := 0
	kvtest.Bench(b, func(b *testing.B) kv.Store {
		n++
		return open(b, url, fmt.Sprint("bench", n))
	})
}

// BenchmarkPostgresStoreAsyncCommit is BenchmarkPostgresStore with
// AsyncCommit: Updates not durable until a Sync.
func BenchmarkPostgresStoreAsyncCommit(b *testing.B) {
	srv := pgtest.Start(b)
	url := srv.NewDatabase(b)
	n := 0
	kvtest.Bench(b, func(b *testing.B) kv.Store {
		n++
		return openWith(b, url, Options{Schema: fmt.Sprint("bench", n), AsyncCommit: true})
	})
}

// BenchmarkLookup reads an index entry and the key its value names, as a
// lookup of a name does (package meta), in a View on a table of 40,000
// keys: two Gets (two round trips) against one PrefetchRef (one
// statement). Compare ns/op.
func BenchmarkLookup(b *testing.B) {
	s := open(b, pgtest.Start(b).NewDatabase(b), "bucketfs").(*Store)
	ctx := b.Context()
	for batch := range 20 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for i := range 1000 {
				n := batch*1000 + i
				tx.Set([]byte(fmt.Sprintf("d%08d", n)), []byte(fmt.Sprintf("%08d", n)))
				tx.Set([]byte(fmt.Sprintf("i%08d", n)), make([]byte, 60))
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	lookup := func(b *testing.B, ahead bool) {
		for i := 0; b.Loop(); i++ {
			entry := []byte(fmt.Sprintf("d%08d", i%20000))
			err := s.View(ctx, func(r kv.Reader) error {
				if ahead {
					if err := r.PrefetchRef(entry, []byte("i"), 8); err != nil {
						return err
					}
				}
				v, err := r.Get(entry)
				if err != nil {
					return err
				}
				_, err = r.Get(append([]byte("i"), v[:8]...))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("two-gets", func(b *testing.B) { lookup(b, false) })
	b.Run("prefetch-ref", func(b *testing.B) { lookup(b, true) })
}
