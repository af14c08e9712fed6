package fuse_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"
)

// word fills p with the 8-byte word of version v, aligned to the file
// offset off, so that every aligned word of a file tells which write put
// it there.
func word(p []byte, off int64, v uint64) {
	var w [8]byte
	binary.BigEndian.PutUint64(w[:], 0x5EED0000_00000000|v)
	for i := range p {
		p[i] = w[(off+int64(i))%8]
	}
}

// readObject reads the version of key's object (the current one for "")
// and returns its bytes and version id.
func (e *env) readObject(ctx context.Context, key, version string) ([]byte, string, error) {
	o, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &e.bucket, Key: &key, VersionId: optional(version)})
	if err != nil {
		return nil, "", err
	}
	defer o.Body.Close()
	b, err := io.ReadAll(o.Body)
	return b, aws.ToString(o.VersionId), err
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// objectVersions returns the body of every version of key, newest first.
func (e *env) objectVersions(key string) [][]byte {
	e.t.Helper()
	ctx := context.Background()
	out, err := e.s3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &e.bucket, Prefix: &key})
	if err != nil {
		e.t.Fatal(err)
	}
	var bodies [][]byte
	for _, v := range out.Versions {
		if *v.Key != key {
			continue
		}
		b, _, err := e.readObject(ctx, key, aws.ToString(v.VersionId))
		if err != nil {
			e.t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	return bodies
}

// Issue 9, reproduction 5: the exporter read a file's size and generation,
// then copied its bytes, so a truncate or rewrite in between uploaded a
// state the file never had. Here a writer changes the file as fast as it
// can, with syscalls that are one request each (so the states it records
// are every state the file had), while the exporter uploads as often as it
// can; every version the bucket received must be one of those states.
func TestEveryExportedVersionIsAStateTheFileHad(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	e := newEnv(t, withExportDelay(time.Millisecond), withPoll(-1), withRevalidateTTL(-1))
	f, err := os.OpenFile(e.path("f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	states := map[[32]byte]bool{}
	var model []byte
	var history [][]byte
	record := func() { states[sha256.Sum256(model)] = true; history = append(history, bytes.Clone(model)) }
	record()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			e.eng.Exporter.Flush(ctx) // conflicts cannot happen: only this mount writes
		}
	})
	const maxSize = 96 << 10
	for v := uint64(1); v <= 400; v++ {
		switch rng.IntN(4) {
		case 0: // truncate up or down
			n := rng.Int64N(maxSize)
			if err := f.Truncate(n); err != nil {
				t.Fatal(err)
			}
			model = append(model[:min(int64(len(model)), n)], make([]byte, max(n-int64(len(model)), 0))...)
		case 1, 2: // a write of at most 32 KiB at a page boundary (the
			// kernel sends an unaligned write as two requests, and the
			// file really has the state between them)
			off := rng.Int64N(maxSize) &^ 4095
			p := make([]byte, rng.IntN(32<<10)+1)
			word(p, off, v)
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			if end := off + int64(len(p)); end > int64(len(model)) {
				model = append(model, make([]byte, end-int64(len(model)))...)
			}
			copy(model[off:], p)
		case 3: // a punched hole
			if len(model) == 0 {
				continue
			}
			off := rng.Int64N(int64(len(model)))
			n := rng.Int64N(int64(len(model))-off) + 1
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+n])
		}
		record()
	}
	cancel()
	wg.Wait()
	e.flush()
	versions := e.objectVersions("f")
	if len(versions) < 3 {
		t.Fatalf("only %d versions exported: the test did not race the exporter", len(versions))
	}
	for i, b := range versions {
		if !states[sha256.Sum256(b)] {
			best, bestDiff := -1, 1<<30
			for j, h := range history {
				if len(h) != len(b) {
					continue
				}
				d := 0
				for k := range h {
					if h[k] != b[k] {
						d++
					}
				}
				if d < bestDiff {
					best, bestDiff = j, d
				}
			}
			if best >= 0 {
				h := history[best]
				first := -1
				for k := range h {
					if h[k] != b[k] {
						first = k
						break
					}
				}
				t.Logf("closest state %d differs in %d bytes, first at %d: got %x want %x", best, bestDiff, first, b[first:min(first+16, len(b))], h[first:min(first+16, len(h))])
			}
			t.Fatalf("version %d of %d (newest first) of %d bytes is not a state the file had (seed %d)", i, len(versions), len(b), seed)
		}
	}
	if !bytes.Equal(versions[0], model) {
		t.Fatalf("the current object (%d bytes) is not the file's last state (%d bytes)", len(versions[0]), len(model))
	}
	t.Logf("%d versions exported, all of them states the file had", len(versions))
}

// Issue 9, reproduction 6: every export copied the file into the tier
// first, so a full tier never drained, and a dirty file larger than the
// free space was never exported. Now a write that would take the
// unexported data past the capacity fails with ENOSPC, exports still run
// (they need no room), clean data is evicted, and writes succeed again
// without anyone stepping in.
func TestAFullTierDrainsByItself(t *testing.T) {
	const capacity = 4 << 20
	e := newEnv(t, withTierCapacity(capacity), withExportDelay(50*time.Millisecond))
	chunk := make([]byte, 1<<20)
	word(chunk, 0, 1)
	// A file bigger than the free space left once the others are written.
	var werr error
	var written int
	for i := 0; i < 12 && werr == nil; i++ {
		werr = os.WriteFile(e.path("f"+string(rune('a'+i))), chunk, 0o644)
		if werr == nil {
			written++
		}
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 12 MiB of files into a 4 MiB tier: %v, want ENOSPC", werr)
	}
	// Nobody flushes, frees or restarts anything: the exports and the
	// eviction make room.
	eventually(t, "a write to succeed again", func() bool {
		return os.WriteFile(e.path("later"), chunk, 0o644) == nil
	})
	for i := 0; i < written; i++ {
		if got := readFile(t, e.path("f"+string(rune('a'+i)))); !bytes.Equal(got, chunk) {
			t.Fatalf("f%c differs after the tier drained", 'a'+i)
		}
	}
	eventually(t, "everything exported", func() bool {
		b, _, ok := e.get("later")
		return ok && bytes.Equal(b, chunk)
	})
}
