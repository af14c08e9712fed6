package kvtest

import (
	"context"
	"errors"
	"testing"

	"bucketfs/internal/kv"
)

// Bench runs the benchmarks every backend is compared by, each on a fresh
// store from open holding 10,000 keys "k"+uint64(i) with 64-byte values
// (the size of an encoded inode):
//   - UpdateReadModifyWrite: an Update that reads one key and writes it
//     back changed (the shape of a setattr);
//   - ViewGet: a View of one Get (a lookup or getattr);
//   - Scan1000: a View scanning 1000 consecutive keys (a large directory).
func Bench(b *testing.B, open func(b *testing.B) kv.Store) {
	const n = 10000
	key := func(i uint64) []byte { return kv.AppendUint64([]byte("k"), i%n) }
	fill := func(b *testing.B) kv.Store {
		s := open(b)
		val := make([]byte, 64)
		for i := 0; i < n; i += 1000 {
			err := s.Update(context.Background(), func(tx kv.Txn) error {
				for j := i; j < min(i+1000, n); j++ {
					if err := tx.Set(key(uint64(j)), val); err != nil {
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
	ctx := context.Background()
	b.Run("UpdateReadModifyWrite", func(b *testing.B) {
		s := fill(b)
		b.ReportAllocs()
		i := uint64(0)
		for b.Loop() {
			k := key(i * 7919)
			i++
			err := s.Update(ctx, func(tx kv.Txn) error {
				v, err := tx.Get(k)
				if err != nil {
					return err
				}
				v[0]++
				return tx.Set(k, v)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ViewGet", func(b *testing.B) {
		s := fill(b)
		b.ReportAllocs()
		i := uint64(0)
		for b.Loop() {
			k := key(i * 7919)
			i++
			err := s.View(ctx, func(r kv.Reader) error {
				_, err := r.Get(k)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Scan1000", func(b *testing.B) {
		s := fill(b)
		b.ReportAllocs()
		i := uint64(0)
		for b.Loop() {
			start := (i * 7919) % (n - 1000)
			i++
			count := 0
			err := s.View(ctx, func(r kv.Reader) error {
				return r.Scan(key(start), key(start+1000), func(k, v []byte) bool { count++; return true })
			})
			if err == nil && count != 1000 {
				err = errors.New("scan saw the wrong number of keys")
			}
			if err != nil {
				b.Fatalf("%v (%d keys)", err, count)
			}
		}
	})
}
