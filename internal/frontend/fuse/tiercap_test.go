package fuse_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Issue 21: the whole cached size of a clean file counted as new
// unexported data at its first write, so a file as large as the tier's
// capacity, once exported, could never be written again (ENOSPC for
// ever). Only what a change makes unexported counts against the
// capacity, whatever the path (an append, an overwrite, copy_file_range, a
// truncate up, fallocate); and a write that would take the unexported data
// past it still fails.
func TestAnExportedFileAsLargeAsTheTierCanBeGrownAndOverwritten(t *testing.T) {
	const capacity = 4 << 20
	e := newEnv(t, withTierCapacity(capacity), withExportDelay(time.Hour))
	want := randomBytes(capacity)
	writeFileSynced(t, e.path("f"), want)
	e.flush()

	f, err := os.OpenFile(e.path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// dd bs=1M count=1 seek=4 conv=notrunc: one more MiB at the end.
	grow := randomBytes(1 << 20)
	if _, err := f.WriteAt(grow, capacity); err != nil {
		t.Fatalf("growing an exported file as large as the tier by 1 MiB: %v", err)
	}
	want = append(want, grow...)
	over := randomBytes(256 << 10)
	if _, err := f.WriteAt(over, 1<<20); err != nil {
		t.Fatalf("overwriting 256 KiB of it: %v", err)
	}
	copy(want[1<<20:], over)
	// The same range again makes nothing more unexported.
	for range 8 {
		if _, err := f.WriteAt(over, 1<<20); err != nil {
			t.Fatalf("overwriting the same 256 KiB again: %v", err)
		}
	}
	// copy_file_range within the file (the kernel copies through writes),
	// a truncate up and a fallocate: 256 KiB more unexported, then nothing.
	src, err := os.Open(e.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	srcOff, dstOff := int64(0), int64(2<<20)
	if n, err := unix.CopyFileRange(int(src.Fd()), &srcOff, int(f.Fd()), &dstOff, 256<<10, 0); err != nil || n != 256<<10 {
		t.Fatalf("copy_file_range of 256 KiB within the file: %d, %v", n, err)
	}
	copy(want[2<<20:], want[:256<<10])
	if err := f.Truncate(6 << 20); err != nil {
		t.Fatalf("truncating the file up to 6 MiB: %v", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 6<<20, 512<<10); err != nil {
		t.Fatalf("fallocate of 512 KiB past the end: %v", err)
	}
	want = append(want, make([]byte, 6<<20+512<<10-len(want))...)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatal("the changed file reads differently from what was written")
	}
	u, err := e.eng.Meta.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if u.Dirty != 1<<20+512<<10 {
		t.Fatalf("the tier counts %d unexported bytes, want 1.5 MiB", u.Dirty)
	}

	// 1.5 MiB are unexported now: 2 MiB more fit, 3 MiB more do not.
	writeFile(t, e.path("g"), randomBytes(2<<20))
	h, err := os.Create(e.path("h"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := h.Write(randomBytes(1 << 20))
	if err := h.Close(); werr == nil {
		werr = err
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 1 MiB with 3.5 MiB unexported in a 4 MiB tier: %v, want ENOSPC", werr)
	}
	if got := readFile(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatal("the file differs after a write elsewhere failed with ENOSPC")
	}
}
