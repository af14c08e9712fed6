package posixtest

// Workloads on what a file holds: reads and writes anywhere, appends,
// truncation, holes, allocation, mappings.

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadsAndWritesAtArbitraryOffsetsKeepEveryByte: writes at random offsets
// through one descriptor read back exactly, a read across the end is short,
// and a new open sees the same bytes (not the old open's page cache).
func ReadsAndWritesAtArbitraryOffsetsKeepEveryByte(t testing.TB, dir string) {
	p := filepath.Join(dir, "rw")
	f := openFile(t, p, os.O_RDWR|os.O_CREATE, 0o644)
	// A model of the file, updated with each write.
	var model []byte
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		off := rng.IntN(300 << 10)
		buf := make([]byte, 1+rng.IntN(20<<10))
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + len(buf); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], buf)
		// Read back a window around the write through the same descriptor.
		lo, hi := max(0, off-100), min(len(model), off+len(buf)+100)
		got := make([]byte, hi-lo)
		if _, err := f.ReadAt(got, int64(lo)); err != nil {
			t.Fatalf("read [%d,%d): %v", lo, hi, err)
		}
		if !bytes.Equal(got, model[lo:hi]) {
			t.Fatalf("write %d at %d: read back [%d,%d) differs", i, off, lo, hi)
		}
	}
	// A read that starts inside the file and runs past its end is short.
	tail := make([]byte, 1000)
	n, err := f.ReadAt(tail, int64(len(model)-10))
	if n != 10 || err != io.EOF {
		t.Fatalf("read across the end: %d bytes, %v; want 10, EOF", n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A new open does not use the kernel's page cache of the old one.
	if got := readFile(t, p); !bytes.Equal(got, model) {
		t.Fatalf("file after reopen differs from what was written (%d bytes, want %d)", len(got), len(model))
	}
}

// AppendsFromTwoDescriptorsInterleaveWithoutLoss: two O_APPEND descriptors
// writing at once each land every line whole, in their order, after what
// the file held.
func AppendsFromTwoDescriptorsInterleaveWithoutLoss(t testing.TB, dir string) {
	p := filepath.Join(dir, "log")
	writeFile(t, p, []byte("start\n"))
	const perWriter = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, who := range []string{"a", "b"} {
		f := openFile(t, p, os.O_WRONLY|os.O_APPEND, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				if _, err := fmt.Fprintf(f, "%s%04d\n", who, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(readFile(t, p)), "\n"), "\n")
	if len(lines) != 1+2*perWriter || lines[0] != "start" {
		t.Fatalf("file has %d lines starting %q; want %d starting \"start\"", len(lines), lines[0], 1+2*perWriter)
	}
	next := map[byte]int{}
	for _, l := range lines[1:] {
		if len(l) != 5 || (l[0] != 'a' && l[0] != 'b') {
			t.Fatalf("torn line %q", l)
		}
		if n, _ := strconv.Atoi(l[1:]); n != next[l[0]] {
			t.Fatalf("line %q out of order or duplicated; want %c%04d", l, l[0], next[l[0]])
		}
		next[l[0]]++
	}
}

// OpenWithTruncEmptiesAnExistingFile: O_TRUNC, with or without O_CREAT,
// empties an existing file before the first write.
func OpenWithTruncEmptiesAnExistingFile(t testing.TB, dir string) {
	p := filepath.Join(dir, "t")
	writeFile(t, p, bytes.Repeat([]byte("old content "), 1000))
	f := openFile(t, p, os.O_WRONLY|os.O_TRUNC, 0)
	if st, err := f.Stat(); err != nil || st.Size() != 0 {
		t.Fatalf("size after O_TRUNC: %v %v", st.Size(), err)
	}
	if _, err := f.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := readFile(t, p); string(got) != "new" {
		t.Fatalf("file is %q, want \"new\"", got)
	}
	// O_CREAT|O_TRUNC on an existing name truncates too.
	writeFile(t, p, []byte("x"))
	if got := readFile(t, p); string(got) != "x" {
		t.Fatalf("file is %q after os.WriteFile, want \"x\"", got)
	}
}

// FtruncateShrinksAndGrowsAndTheGrownPartReadsZeros: ftruncate and
// truncate set the size both ways, and what a shrink cut off comes back as
// zeros when the file grows again.
func FtruncateShrinksAndGrowsAndTheGrownPartReadsZeros(t testing.TB, dir string) {
	p := filepath.Join(dir, "f")
	orig := bytes.Repeat([]byte{0xab}, 10000)
	writeFile(t, p, orig)
	f := openFile(t, p, os.O_RDWR, 0)
	if err := f.Truncate(3000); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 3000 {
		t.Fatalf("size after shrink %d, want 3000", st.Size())
	}
	if err := f.Truncate(9000); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 9000 {
		t.Fatalf("size after grow %d, want 9000", st.Size())
	}
	f.Close()
	want := append(bytes.Repeat([]byte{0xab}, 3000), make([]byte, 6000)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("after shrink and grow the file is not its first 3000 bytes followed by zeros")
	}
	// truncate(2) by path.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, want[:100]) {
		t.Fatalf("after truncate to 100 the file has %d bytes", len(got))
	}
}

// sparseOffset is where the data of the sparse files below starts.
const sparseOffset = 10 << 20

// writeSparse makes a file of sparseOffset bytes of hole followed by data,
// checks its size and returns it open, with the data.
func writeSparse(t testing.TB, p string) (*os.File, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte("data"), 1024)
	f := openFile(t, p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if _, err := f.WriteAt(data, sparseOffset); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != int64(sparseOffset+len(data)) {
		t.Fatalf("size %d, want %d", st.Size(), sparseOffset+len(data))
	}
	return f, data
}

// ASparseFileReadsZerosInItsHole: a write far past the end leaves a hole
// that reads as zeros, and the data after it reads back.
func ASparseFileReadsZerosInItsHole(t testing.TB, dir string) {
	p := filepath.Join(dir, "sparse")
	f, data := writeSparse(t, p)
	f.Close()
	got := readFile(t, p)
	if len(got) != sparseOffset+len(data) {
		t.Fatalf("read %d bytes, want %d", len(got), sparseOffset+len(data))
	}
	if i := bytes.IndexFunc(got[:sparseOffset], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("the hole has a non-zero byte at %d", i)
	}
	if !bytes.Equal(got[sparseOffset:], data) {
		t.Fatal("the data after the hole differs")
	}
}

// SeekDataAndSeekHoleFindTheDataOfASparseFile: SEEK_DATA skips the hole to
// the data, SEEK_HOLE finds the hole before it and the implicit hole at the
// end, and SEEK_DATA at the end answers ENXIO.
func SeekDataAndSeekHoleFindTheDataOfASparseFile(t testing.TB, dir string) {
	const off = sparseOffset
	f, data := writeSparse(t, filepath.Join(dir, "sparse"))
	size := int64(off + len(data))
	fd := int(f.Fd())
	if pos, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil || pos != off {
		t.Fatalf("SEEK_DATA from 0: %d, %v; want %d", pos, err, off)
	}
	if pos, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || pos != 0 {
		t.Fatalf("SEEK_HOLE from 0: %d, %v; want 0", pos, err)
	}
	if pos, err := unix.Seek(fd, off+10, unix.SEEK_DATA); err != nil || pos != off+10 {
		t.Fatalf("SEEK_DATA inside the data: %d, %v; want %d", pos, err, off+10)
	}
	if pos, err := unix.Seek(fd, off, unix.SEEK_HOLE); err != nil || pos != size {
		t.Fatalf("SEEK_HOLE inside the data: %d, %v; want the end, %d", pos, err, size)
	}
	_, err := unix.Seek(fd, size, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA at the end", err, syscall.ENXIO)
}

// fileSize is the size of f by fstat.
func fileSize(t testing.TB, f *os.File) int64 {
	t.Helper()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// FallocateGrowsAFileAndPunchesAHole: fallocate mode 0 grows the file with
// zeros, a punched hole reads zeros without changing the size, fsync and
// fdatasync succeed after both, and a directory can be fsync'ed.
func FallocateGrowsAFileAndPunchesAHole(t testing.TB, dir string) {
	p := filepath.Join(dir, "fa")
	writeFile(t, p, bytes.Repeat([]byte{'a'}, 8192))
	f := openFile(t, p, os.O_RDWR, 0)
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, 8192, 8192); err != nil {
		t.Fatalf("fallocate mode 0: %v", err)
	}
	if s := fileSize(t, f); s != 16384 {
		t.Fatalf("size after fallocate mode 0 is %d, want 16384", s)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1000, 2000); err != nil {
		t.Fatalf("fallocate PUNCH_HOLE: %v", err)
	}
	if s := fileSize(t, f); s != 16384 {
		t.Fatalf("size after punching a hole is %d, want 16384", s)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatalf("fdatasync: %v", err)
	}
	f.Close()
	want := bytes.Repeat([]byte{'a'}, 8192)
	clear(want[1000:3000])
	want = append(want, make([]byte, 8192)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("file differs from 'a's with [1000,3000) punched, followed by 8192 allocated zeros")
	}
	// A directory can be fsync'ed too.
	d := openFile(t, dir, os.O_RDONLY, 0)
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
}

// FallocateWithKeepSizeLeavesTheSizeAlone: fallocate with
// FALLOC_FL_KEEP_SIZE past the end keeps the size; a hole punched after it
// and the space it allocated both read as zeros once the file grows over
// them.
func FallocateWithKeepSizeLeavesTheSizeAlone(t testing.TB, dir string) {
	p := filepath.Join(dir, "fa")
	writeFile(t, p, bytes.Repeat([]byte{'a'}, 16384))
	f := openFile(t, p, os.O_RDWR, 0)
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 16384, 1<<20); err != nil {
		t.Fatalf("fallocate KEEP_SIZE: %v", err)
	}
	if s := fileSize(t, f); s != 16384 {
		t.Fatalf("size after fallocate KEEP_SIZE is %d, want 16384", s)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1000, 2000); err != nil {
		t.Fatalf("fallocate PUNCH_HOLE: %v", err)
	}
	if s := fileSize(t, f); s != 16384 {
		t.Fatalf("size after punching a hole is %d, want 16384", s)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	want := bytes.Repeat([]byte{'a'}, 16384)
	clear(want[1000:3000])
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("file differs from 16384 'a's with [1000,3000) punched")
	}
	if err := f.Truncate(32768); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want = append(want, make([]byte, 16384)...)
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Fatal("the space allocated past the end does not read as zeros once the file grows over it")
	}
}

// ASharedWritableMappingReachesTheFile: a store into a MAP_SHARED mapping
// is in the file after msync, and the size does not change.
func ASharedWritableMappingReachesTheFile(t testing.TB, dir string) {
	p := filepath.Join(dir, "mapped")
	writeFile(t, p, make([]byte, 3*4096))
	f := openFile(t, p, os.O_RDWR, 0)
	m, err := unix.Mmap(int(f.Fd()), 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(m[4096+10:], "through the mapping")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := readFile(t, p)
	if string(got[4096+10:4096+29]) != "through the mapping" || len(got) != 3*4096 {
		t.Fatalf("after msync the file holds %q at 4106 (%d bytes)", got[4096+10:4096+29], len(got))
	}
}
