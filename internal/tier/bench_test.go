package tier

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The benchmarks run each workload against the tier and against a plain
// os.File in the same directory, so the tier's overhead reads as the ratio
// of the two. Data stays in the page cache: they measure the tier's code
// path, not the disk.

const benchFileSize = 64 << 20

type ioTarget interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
}

type tierFile struct {
	tr  *Tier
	ino uint64
}

func (f tierFile) ReadAt(p []byte, off int64) (int, error) {
	return f.tr.ReadAt(f.ino, f.tr.Epoch(f.ino), p, off)
}
func (f tierFile) WriteAt(p []byte, off int64) (int, error) { return f.tr.WriteAt(f.ino, p, off) }

// benchTargets returns a tier inode and a plain file, each benchFileSize
// long and fully written.
func benchTargets(b *testing.B) map[string]ioTarget {
	dir := b.TempDir()
	tr := openTier(b, filepath.Join(dir, "tier"), Options{})
	if err := tr.Create(1, 0); err != nil {
		b.Fatal(err)
	}
	plain, err := os.Create(filepath.Join(dir, "plain"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { plain.Close() })
	targets := map[string]ioTarget{"tier": tierFile{tr, 1}, "os.File": plain}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for _, tg := range targets {
		for off := int64(0); off < benchFileSize; off += int64(len(chunk)) {
			if _, err := tg.WriteAt(chunk, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	return targets
}

// randomOffsets returns block-aligned offsets inside the bench file.
func randomOffsets(blk int) []int64 {
	rng := rand.New(rand.NewPCG(3, 4))
	offs := make([]int64, 4096)
	for i := range offs {
		offs[i] = rng.Int64N(benchFileSize/int64(blk)) * int64(blk)
	}
	return offs
}

type benchCase struct {
	name  string
	size  int
	write bool
	next  func(i int) int64
}

func benchCases() []benchCase {
	rnd := randomOffsets(4 << 10)
	random := func(i int) int64 { return rnd[i%len(rnd)] }
	sequential := func(i int) int64 { return int64(i) * (1 << 20) % benchFileSize }
	return []benchCase{
		{"ReadAt/4KiB-random", 4 << 10, false, random},
		{"ReadAt/1MiB-sequential", 1 << 20, false, sequential},
		{"WriteAt/4KiB-random", 4 << 10, true, random},
		{"WriteAt/1MiB-sequential", 1 << 20, true, sequential},
	}
}

func BenchmarkIO(b *testing.B) {
	targets := benchTargets(b)
	for _, c := range benchCases() {
		for _, name := range []string{"os.File", "tier"} {
			tg := targets[name]
			b.Run(c.name+"/"+name, func(b *testing.B) {
				p := make([]byte, c.size)
				b.SetBytes(int64(c.size))
				i := 0
				for b.Loop() {
					var err error
					if c.write {
						_, err = tg.WriteAt(p, c.next(i))
					} else {
						_, err = tg.ReadAt(p, c.next(i))
					}
					if err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkIOParallel runs 4 KiB random reads and writes from GOMAXPROCS
// goroutines on one inode, the case where per-inode locking could contend.
func BenchmarkIOParallel(b *testing.B) {
	targets := benchTargets(b)
	offs := randomOffsets(4 << 10)
	for _, write := range []bool{false, true} {
		op := "ReadAt"
		if write {
			op = "WriteAt"
		}
		for _, name := range []string{"os.File", "tier"} {
			tg := targets[name]
			b.Run(op+"/4KiB-random/"+name, func(b *testing.B) {
				b.SetBytes(4 << 10)
				b.RunParallel(func(pb *testing.PB) {
					p := make([]byte, 4<<10)
					i := rand.IntN(len(offs))
					for pb.Next() {
						var err error
						if write {
							_, err = tg.WriteAt(p, offs[i%len(offs)])
						} else {
							_, err = tg.ReadAt(p, offs[i%len(offs)])
						}
						if err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
	}
}
