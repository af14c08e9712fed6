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
