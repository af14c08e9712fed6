package fuse_test

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"bucketfs/internal/meta"
)

// copyInto copies n bytes of the file at path into f at off with
// copy_file_range(2), as often as it takes.
func copyInto(t *testing.T, f *os.File, path string, off int64, n int) {
	t.Helper()
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var from int64
	for n > 0 {
		got, err := unix.CopyFileRange(int(src.Fd()), &from, int(f.Fd()), &off, n, 0)
		if err != nil || got == 0 {
			t.Fatalf("copy_file_range: %d, %v", got, err)
		}
		n -= got
	}
}

// Issue 21, corner 8, end to end: the kernel hands a large write(2) to
// bucketfs in pieces (1 MiB requests, and a write that starts inside a
// page as that page's part first), and `bucketfs flush` while a process
// wrote exported the state between two pieces of one syscall (183 of
// 4,544 versions under fsx with a flush loop). Here a writer makes large
// writes at unaligned offsets (write(2) or copy_file_range(2)), each with
// its own recognisable bytes, while flushes of the file and of everything
// run in a loop; every version the bucket received must be the file as one
// of the writes left it.
func TestEveryVersionAFlushExportsIsTheFileBetweenTwoWrites(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	e := newEnv(t, withExportDelay(time.Hour), withPoll(-1), withRevalidateTTL(-1))
	f, err := os.OpenFile(e.path("f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := meta.Ino(statIno(t, e.path("f")))
	states := map[[32]byte]uint64{} // the file after each write: which write
	var model []byte
	states[sha256.Sum256(model)] = 0

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Flushes cannot fail for a conflict (only this mount writes); one of
	// the file gives up after 100 exports while the writer goes on.
	wg.Go(func() {
		for ctx.Err() == nil {
			e.eng.Exporter.FlushInode(ctx, ino)
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			e.eng.Exporter.Flush(ctx)
		}
	})
	const writes, maxSize = 24, 6 << 20
	for v := uint64(1); v <= writes; v++ {
		off := rng.Int64N(maxSize - 3<<20)
		p := make([]byte, 2<<20+rng.IntN(1<<20+1))
		word(p, off, v)
		if rng.IntN(3) > 0 {
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
		} else {
			// A copy_file_range(2) from another file of the mount.
			if err := os.WriteFile(e.path("src"), p, 0o644); err != nil {
				t.Fatal(err)
			}
			copyInto(t, f, e.path("src"), off, len(p))
		}
		if end := off + int64(len(p)); end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		copy(model[off:], p)
		states[sha256.Sum256(model)] = v
	}
	cancel()
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e.flush()

	out, err := e.s3.ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{Bucket: &e.bucket, Prefix: aws.String("f")})
	if err != nil {
		t.Fatal(err)
	}
	var versions int
	for i, ov := range out.Versions {
		if aws.ToString(ov.Key) != "f" {
			continue
		}
		versions++
		b, _, err := e.readObject(context.Background(), "f", aws.ToString(ov.VersionId))
		if err != nil {
			t.Fatal(err)
		}
		v, ok := states[sha256.Sum256(b)]
		if !ok {
			// Which writes does it show, and where does it stop?
			var last uint64
			for off := 0; off+8 <= len(b); off += 8 {
				if w := uint64(b[off+4])<<24 | uint64(b[off+5])<<16 | uint64(b[off+6])<<8 | uint64(b[off+7]); w > last && w <= writes {
					last = w
				}
			}
			t.Fatalf("version %d (newest first) of %d bytes, newest write seen in it %d, is not the file as a write left it (seed %d)",
				i, len(b), last, seed)
		}
		if i == 0 && v != writes {
			t.Fatalf("the current version is the file after write %d, want after the last, %d", v, writes)
		}
	}
	if versions < 3 {
		t.Fatalf("only %d versions exported: the flushes did not race the writer", versions)
	}
	t.Logf("%d versions exported, each the file after one of the %d writes", versions, writes)
}
