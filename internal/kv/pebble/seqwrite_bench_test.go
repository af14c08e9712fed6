package pebble

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"bucketfs/internal/kv"
)

// BenchmarkSeqWrite512MiB writes 512 MiB as the tier does a sequential
// write: transactions of 1 MiB, each 256 values of 4 KiB (random bytes,
// as file data rarely compresses), then one Sync, on a store with the
// default options (memtables sized to the disk of the temporary
// directory). MiB/s counts the whole, write-s the commits alone.
func BenchmarkSeqWrite512MiB(b *testing.B) {
	val := make([]byte, 4096*256)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range val {
		val[i] = byte(rng.Uint32())
	}
	for b.Loop() {
		s, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		start := time.Now()
		for piece := range uint64(512) {
			err := s.UpdateSized(ctx, 1<<20+256*64, func(tx kv.Txn) error {
				for j := range uint64(256) {
					key := kv.AppendUint64(kv.AppendUint64([]byte{'b'}, 7), piece*256+j)
					if err := tx.Set(key, val[j*4096:(j+1)*4096]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		wrote := time.Since(start)
		if err := s.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(512/time.Since(start).Seconds(), "MiB/s")
		b.ReportMetric(wrote.Seconds(), "write-s")
		s.Close()
	}
}
