package fuse_test

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// Issue 21: the whole cached size of a clean file counted as new
// unexported data at its first write, so a file as large as the tier's
// capacity, once exported, could never be written again (ENOSPC for
// ever). Only what a write makes unexported counts against the capacity;
// and a write that would take the unexported data past it still fails.
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
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatal("the grown and overwritten file reads differently from what was written")
	}

	// 1.25 MiB are unexported now: 3 MiB more do not fit in 4 MiB.
	g, err := os.Create(e.path("g"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := g.Write(randomBytes(3 << 20))
	if err := g.Close(); werr == nil {
		werr = err
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 3 MiB with 1.25 MiB unexported in a 4 MiB tier: %v, want ENOSPC", werr)
	}
	if got := readFile(t, e.path("f")); !bytes.Equal(got, want) {
		t.Fatal("the file differs after a write elsewhere failed with ENOSPC")
	}
}
