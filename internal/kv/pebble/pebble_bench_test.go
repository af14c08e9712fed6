package pebble

import (
	"context"
	"testing"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"
)

// benchStore returns a store holding n keys "k"+uint64(i) with 64-byte
// values, the size of an encoded inode.
func benchStore(b *testing.B, n int) kv.Store {
	s := openPebble(b, b.TempDir())
	b.Cleanup(func() { s.Close() })
	val := make([]byte, 64)
	ctx := context.Background()
	for i := 0; i < n; i += 1000 {
		err := s.Update(ctx, func(tx kv.Txn) error {
			for j := i; j < min(i+1000, n); j++ {
				if err := tx.Set(kv.AppendUint64([]byte("k"), uint64(j)), val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func BenchmarkGet(b *testing.B) {
	const n = 10000
	s := benchStore(b, n)
	ctx := context.Background()
	key := make([]byte, 0, 9)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		key = kv.AppendUint64(append(key[:0], 'k'), (i*7919)%n)
		i++
		err := s.View(ctx, func(r kv.Reader) error {
			_, err := r.Get(key)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpdateSmall(b *testing.B) {
	s := benchStore(b, 0)
	ctx := context.Background()
	val := make([]byte, 64)
	key := make([]byte, 0, 9)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		key = kv.AppendUint64(append(key[:0], 'k'), i%100000)
		i++
		err := s.Update(ctx, func(tx kv.Txn) error { return tx.Set(key, val) })
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScan100(b *testing.B) {
	const n = 10000
	s := benchStore(b, n)
	ctx := context.Background()
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		start := (i * 7919) % (n - 100)
		i++
		lower := kv.AppendUint64([]byte("k"), start)
		upper := kv.AppendUint64([]byte("k"), start+100)
		count := 0
		err := s.View(ctx, func(r kv.Reader) error {
			return r.Scan(lower, upper, func(k, v []byte) bool { count++; return true })
		})
		if err != nil || count != 100 {
			b.Fatalf("scan saw %d keys, err %v", count, err)
		}
	}
}

// BenchmarkPebbleStore is kvtest.Bench, the comparison with kv/postgres.
func BenchmarkPebbleStore(b *testing.B) {
	kvtest.Bench(b, func(b *testing.B) kv.Store {
		s := openPebble(b, b.TempDir())
		b.Cleanup(func() { s.Close() })
		return s
	})
}
