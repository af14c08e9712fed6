package meta

import (
	"context"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/kv/testkv"
)

// BenchmarkSequentialWrite writes 256 MiB into one file in 1 MiB writes
// (what a FUSE mount hands over) and syncs: the path of a large copy into
// the file system, without FUSE.
func BenchmarkSequentialWrite(b *testing.B) {
	const total, chunk = 256 << 20, 1 << 20
	p := make([]byte, chunk)
	for i := range p {
		p[i] = byte(i * 7)
	}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		db, err := testkv.Open(b, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(ctx, db, Options{ExportDelay: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		in, err := s.Create(ctx, RootIno, "f", Inode{Mode: syscall.S_IFREG | 0o644}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for off := int64(0); off < total; off += chunk {
			if _, err := s.WriteData(ctx, in.Ino, p, off, false, 0, Limits{}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
	b.SetBytes(total)
}
