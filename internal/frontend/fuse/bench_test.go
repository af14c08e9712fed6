package fuse_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The hot paths of a FUSE mount, each beside a go-fuse loopback mount of a
// local directory: the ceiling of any FUSE file system on this machine.
// Compare the two (ns/op), not absolute times:
//
//	go test -run '^$' -bench . ./internal/frontend/fuse/

// benchMounts runs fn on a bucketfs mount (export delay one hour, so
// nothing is uploaded while it runs) and on a loopback mount. Besides
// ns/op it reports cpu-ns/op: the CPU time (user and system) of the whole
// process per op, client and server together, which on this small, noisy
// machine varies far less between runs than the elapsed time.
func benchMounts(b *testing.B, fn func(b *testing.B, dir string)) {
	b.Run("bucketfs", func(b *testing.B) {
		e := newEnv(b, withExportDelay(time.Hour))
		withCPU(b, func() { fn(b, e.mnt) })
	})
	b.Run("loopback", func(b *testing.B) {
		dir := loopbackMount(b)
		withCPU(b, func() { fn(b, dir) })
	})
}

func withCPU(b *testing.B, fn func()) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	fn()
	b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
}

// loopbackMount mounts a go-fuse loopback of a new local directory, with
// the same kernel cache timeouts as bucketfs's mount.
func loopbackMount(b *testing.B) string {
	root, err := gofs.NewLoopbackRoot(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	mnt := b.TempDir()
	sec := time.Second
	srv, err := gofs.Mount(mnt, root, &gofs.Options{EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{Name: "loopback-bench"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			b.Errorf("unmount loopback: %v", err)
		}
	})
	return mnt
}

// BenchmarkCreateSmallFile is the create workload: open(O_CREAT), one
// 4 KiB write, close, in a directory that grows by one file per op.
func BenchmarkCreateSmallFile(b *testing.B) {
	data := make([]byte, 4096)
	benchMounts(b, func(b *testing.B, dir string) {
		for i := 0; b.Loop(); i++ {
			name := filepath.Join(dir, fmt.Sprintf("f%07d", i))
			if err := os.WriteFile(name, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRandomWrite4KiB is fio's randwrite on one open file: a 4 KiB
// pwrite at a pseudo-random 4 KiB-aligned offset of a 64 MiB file.
func BenchmarkRandomWrite4KiB(b *testing.B) {
	const size = 64 << 20
	data := make([]byte, 4096)
	benchMounts(b, func(b *testing.B, dir string) {
		f, err := os.Create(filepath.Join(dir, "rw"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			b.Fatal(err)
		}
		x := uint64(1)
		for b.Loop() {
			x = x*6364136223846793005 + 1442695040888963407
			off := int64(x>>33) % (size / 4096) * 4096
			if _, err := f.WriteAt(data, off); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppend10000 is a log writer: appends of 10,000 bytes, so each
// starts inside a page and crosses page boundaries. The kernel sends the
// first page's part on its own and then the rest, and bucketfs syncs its
// store at the end of such a write(2) to keep it whole across a crash.
func BenchmarkAppend10000(b *testing.B) {
	data := make([]byte, 10000)
	benchMounts(b, func(b *testing.B, dir string) {
		f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for b.Loop() {
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
