package tier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openTier(t testing.TB, dir string, opt Options) *Tier {
	t.Helper()
	tr, err := Open(dir, opt)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// crash abandons tr the way a crash would: nothing is synced and no map is
// written. The page cache survives, so data files may hold unsynced writes;
// what matters is what the maps on disk claim.
func crash(tr *Tier) {
	tr.closed.Store(true)
	for i := range tr.shards {
		sh := &tr.shards[i]
		sh.mu.Lock()
		for _, n := range sh.m {
			if f := n.f.Swap(nil); f != nil {
				f.Close()
			}
		}
		clear(sh.m)
		sh.mu.Unlock()
	}
	tr.lock.Close()
}

func fill(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func mustWrite(t testing.TB, tr *Tier, ino uint64, p []byte, off int64) {
	t.Helper()
	if n, err := tr.WriteAt(ino, p, off); err != nil || n != len(p) {
		t.Fatalf("WriteAt(%d, %d bytes, %d) = %d, %v", ino, len(p), off, n, err)
	}
}

func mustRead(t testing.TB, tr *Tier, ino uint64, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if c, err := tr.ReadAt(ino, tr.Epoch(ino), p, off); err != nil || c != n {
		t.Fatalf("ReadAt(%d, %d bytes, %d) = %d, %v", ino, n, off, c, err)
	}
	return p
}

func mustPresent(t testing.TB, tr *Tier, ino uint64, want int64) {
	t.Helper()
	if got, ok := tr.Present(ino); !ok || got != want {
		t.Fatalf("Present(%d) = %d, %v; want %d, true", ino, got, ok, want)
	}
}

func TestCreateMakesEveryByteUpToSizePresentAsZeros(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 10000); err != nil {
		t.Fatal(err)
	}
	mustPresent(t, tr, 1, 10000)
	if m := tr.Missing(1, 0, 10000); m != nil {
		t.Errorf("Missing = %v, want nil", m)
	}
	if got := mustRead(t, tr, 1, 0, 10000); !bytes.Equal(got, make([]byte, 10000)) {
		t.Error("fresh file does not read as zeros")
	}
	// Create again replaces what was there.
	mustWrite(t, tr, 1, []byte("hello"), 0)
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustPresent(t, tr, 1, 0)
	if sz, _ := tr.Size(1); sz != 0 {
		t.Errorf("Size after re-create = %d, want 0", sz)
	}
}

func TestMissingTracksFillsOfAnImportedObject(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	const ino = 7
	if err := tr.Init(ino, 100); err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Missing(ino, 0, 100), []Range{{0, 100}}; !slices.Equal(got, want) {
		t.Fatalf("Missing after Init = %v, want %v", got, want)
	}
	steps := []struct {
		off, n      int64
		wantMissing []Range
	}{
		{10, 10, []Range{{0, 10}, {20, 80}}},
		{30, 10, []Range{{0, 10}, {20, 10}, {40, 60}}},
		{20, 10, []Range{{0, 10}, {40, 60}}}, // adjacent on both sides
		{5, 40, []Range{{0, 5}, {45, 55}}},   // overlapping
		{0, 100, nil},
	}
	for _, s := range steps {
		if err := tr.Fill(ino, tr.Epoch(ino), fill('b', int(s.n)), s.off); err != nil {
			t.Fatal(err)
		}
		if got := tr.Missing(ino, 0, 100); !slices.Equal(got, s.wantMissing) {
			t.Fatalf("after Fill(%d, %d): Missing = %v, want %v", s.off, s.n, got, s.wantMissing)
		}
	}
	mustPresent(t, tr, ino, 100)
	if got := tr.Missing(99, 0, 10); !slices.Equal(got, []Range{{0, 10}}) {
		t.Errorf("Missing on an unknown inode = %v, want everything", got)
	}
}

func TestFillDoesNotOverwriteLocalWrites(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 30); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('L', 10), 10)
	if err := tr.Fill(1, tr.Epoch(1), fill('B', 30), 0); err != nil {
		t.Fatal(err)
	}
	want := append(append(fill('B', 10), fill('L', 10)...), fill('B', 10)...)
	if got := mustRead(t, tr, 1, 0, 30); !bytes.Equal(got, want) {
		t.Errorf("after Fill over a local write: %q, want %q", got, want)
	}
	// A second fill changes nothing at all.
	if err := tr.Fill(1, tr.Epoch(1), fill('X', 30), 0); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, tr, 1, 0, 30); !bytes.Equal(got, want) {
		t.Errorf("after a second Fill: %q, want %q", got, want)
	}
}

func TestFillRacingWriteAtNeverClobbersTheWrite(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	for ino := uint64(1); ino <= 200; ino++ {
		if err := tr.Init(ino, 4096); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := tr.WriteAt(ino, fill('L', 4096), 0); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := tr.Fill(ino, tr.Epoch(ino), fill('B', 4096), 0); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		if got := mustRead(t, tr, ino, 0, 4096); !bytes.Equal(got, fill('L', 4096)) {
			t.Fatalf("inode %d: bucket data overwrote a local write", ino)
		}
	}
}

func TestWriteAtPastTheSizeMakesTheGapPresentZeros(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 100); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, []byte("tail"), 200)
	// [0,100) is bucket data still to fetch; [100,200) is a local hole.
	if got, want := tr.Missing(1, 0, 204), []Range{{0, 100}}; !slices.Equal(got, want) {
		t.Errorf("Missing = %v, want %v", got, want)
	}
	if got := mustRead(t, tr, 1, 100, 104); !bytes.Equal(got, append(make([]byte, 100), "tail"...)) {
		t.Errorf("gap and write read %q", got)
	}
	if sz, _ := tr.Size(1); sz != 204 {
		t.Errorf("Size = %d, want 204", sz)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name        string
		init        func(tr *Tier) error // state of inode 1 before truncating
		size        int64
		wantMissing []Range // of [0, 300)
		wantData    []byte  // read of [0, len) after truncating
	}{
		{
			name: "shrink drops data and ranges past size",
			init: func(tr *Tier) error {
				_, err := tr.WriteAt(1, fill('a', 200), 0)
				return err
			},
			size:        50,
			wantMissing: []Range{{50, 250}},
			wantData:    fill('a', 50),
		},
		{
			name: "grow makes the new range present zeros",
			init: func(tr *Tier) error {
				_, err := tr.WriteAt(1, fill('a', 100), 0)
				return err
			},
			size:        300,
			wantMissing: nil,
			wantData:    append(fill('a', 100), make([]byte, 200)...),
		},
		{
			name: "shrink then grow reads zeros, not old data",
			init: func(tr *Tier) error {
				if _, err := tr.WriteAt(1, fill('a', 200), 0); err != nil {
					return err
				}
				return tr.Truncate(1, 10)
			},
			size:        300,
			wantMissing: nil,
			wantData:    append(fill('a', 10), make([]byte, 290)...),
		},
		{
			name: "grow of an imported object keeps its bucket range missing",
			init: func(tr *Tier) error {
				if err := tr.Reset(1, 100); err != nil {
					return err
				}
				return tr.Fill(1, tr.Epoch(1), fill('b', 20), 0)
			},
			size:        300,
			wantMissing: []Range{{20, 80}},
			wantData:    fill('b', 20),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := openTier(t, t.TempDir(), Options{})
			if err := tr.Create(1, 0); err != nil {
				t.Fatal(err)
			}
			if err := tt.init(tr); err != nil {
				t.Fatal(err)
			}
			if err := tr.Truncate(1, tt.size); err != nil {
				t.Fatal(err)
			}
			if got := tr.Missing(1, 0, 300); !slices.Equal(got, tt.wantMissing) {
				t.Errorf("Missing = %v, want %v", got, tt.wantMissing)
			}
			if got := mustRead(t, tr, 1, 0, len(tt.wantData)); !bytes.Equal(got, tt.wantData) {
				t.Errorf("data = %q, want %q", got, tt.wantData)
			}
			if sz, _ := tr.Size(1); sz != tt.size {
				t.Errorf("Size = %d, want %d", sz, tt.size)
			}
		})
	}
}

func TestPunchLeavesTheRangePresentAsZeros(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 3*4096); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(1, tr.Epoch(1), fill('b', 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Punch(1, 0, 2*4096); err != nil {
		t.Fatal(err)
	}
	if got, want := tr.Missing(1, 0, 3*4096), []Range{{2 * 4096, 4096}}; !slices.Equal(got, want) {
		t.Errorf("Missing = %v, want %v", got, want)
	}
	if got := mustRead(t, tr, 1, 0, 2*4096); !bytes.Equal(got, make([]byte, 2*4096)) {
		t.Error("punched range does not read as zeros")
	}
}

func TestAllocateChangesNeitherRangesNorSize(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	before := tr.Usage()
	if err := tr.Allocate(1, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	mustPresent(t, tr, 1, 0)
	if sz, _ := tr.Size(1); sz != 0 {
		t.Errorf("Size = %d, want 0", sz)
	}
	if after := tr.Usage(); after < before+1<<20 {
		t.Errorf("Usage went from %d to %d; want at least 1 MiB more", before, after)
	}
}

func TestSeekDataAndSeekHoleOnASparseFile(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	const blk = 64 << 10 // well above any file system's block size
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('a', blk), 0)
	mustWrite(t, tr, 1, fill('b', blk), 4*blk)
	if err := tr.Truncate(1, 8*blk); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		seek func(uint64, int64) (int64, error)
		off  int64
		want int64
	}{
		{"data at the start", tr.SeekData, 0, 0},
		{"hole after the first block", tr.SeekHole, 0, blk},
		{"data after the hole", tr.SeekData, blk, 4 * blk},
		{"hole after the second block", tr.SeekHole, 4 * blk, 5 * blk},
		{"no data in the tail: hole at its start", tr.SeekHole, 6 * blk, 6 * blk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.seek(1, tt.off)
			if err != nil || got != tt.want {
				t.Errorf("seek(%d) = %d, %v; want %d", tt.off, got, err, tt.want)
			}
		})
	}
	if _, err := tr.SeekData(1, 5*blk); !errors.Is(err, unix.ENXIO) {
		t.Errorf("SeekData in the trailing hole: err = %v, want ENXIO", err)
	}
	if _, err := tr.SeekHole(1, 9*blk); !errors.Is(err, unix.ENXIO) {
		t.Errorf("SeekHole past the end: err = %v, want ENXIO", err)
	}
}

func TestReopenAfterSyncKeepsDataAndMap(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, []byte("file side"), 0)
	if err := tr.Init(2, 1000); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(2, tr.Epoch(2), fill('b', 100), 500); err != nil {
		t.Fatal(err)
	}
	for _, ino := range []uint64{1, 2} {
		if err := tr.Sync(ino); err != nil {
			t.Fatal(err)
		}
	}
	crash(tr)

	tr = openTier(t, dir, Options{})
	if got := mustRead(t, tr, 1, 0, 9); string(got) != "file side" {
		t.Errorf("inode 1 reads %q after reopen", got)
	}
	mustPresent(t, tr, 1, 9)
	if got, want := tr.Missing(2, 0, 1000), []Range{{0, 500}, {600, 400}}; !slices.Equal(got, want) {
		t.Errorf("inode 2 Missing after reopen = %v, want %v", got, want)
	}
	if sz, _ := tr.Size(2); sz != 1000 {
		t.Errorf("inode 2 Size after reopen = %d, want 1000", sz)
	}
	if got := mustRead(t, tr, 2, 500, 100); !bytes.Equal(got, fill('b', 100)) {
		t.Error("inode 2 filled data lost")
	}
	if got := slices.Sorted(slices.Values(tr.Inodes())); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("Inodes = %v, want [1 2]", got)
	}
}

func TestReopenAfterCloseKeepsUnsyncedWork(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, []byte("closed cleanly"), 0)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	tr = openTier(t, dir, Options{})
	if got := mustRead(t, tr, 1, 0, 14); string(got) != "closed cleanly" {
		t.Errorf("reads %q after Close and reopen", got)
	}
}

func TestMapOnDiskNeverClaimsMoreThanWasSynced(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('a', 4096), 0)
	if err := tr.Sync(1); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('b', 4096), 4096) // never synced
	if err := tr.Init(2, 4096); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(2, tr.Epoch(2), fill('c', 4096), 0); err != nil { // never synced
		t.Fatal(err)
	}
	// What is on disk right now, before any crash.
	b, err := os.ReadFile(tr.mapPath(1))
	if err != nil {
		t.Fatal(err)
	}
	if size, ext, err := decodeMap(b); err != nil || size != 4096 || !slices.Equal(ext, extents{{0, 4096}}) {
		t.Errorf("map on disk = %d, %v, %v; want 4096, [{0 4096}]", size, ext, err)
	}
	crash(tr)

	tr = openTier(t, dir, Options{})
	mustPresent(t, tr, 1, 4096)
	if got, want := tr.Missing(1, 0, 8192), []Range{{4096, 4096}}; !slices.Equal(got, want) {
		t.Errorf("Missing = %v, want %v", got, want)
	}
	if _, ok := tr.Present(2); ok {
		t.Error("inode 2 was never synced but has state after reopen")
	}
	if _, err := os.Stat(tr.dataPath(2)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unsynced data file of inode 2 survived reopen: %v", err)
	}
	if fi, err := os.Stat(tr.dataPath(1)); err != nil || fi.Size() != 4096 {
		t.Errorf("data file of inode 1 not cut back to its synced size: %v, %v", fi, err)
	}
}

func TestDestructiveOperationsDurablyShrinkTheMapFirst(t *testing.T) {
	tests := []struct {
		name    string
		op      func(tr *Tier) error
		wantOK  bool
		wantExt []Range // Missing(1, 0, 8192) after reopen
	}{
		{"truncate down", func(tr *Tier) error { return tr.Truncate(1, 1000) }, true, []Range{{1000, 7192}}},
		{"reset", func(tr *Tier) error { return tr.Reset(1, 8192) }, false, nil},
		{"remove", func(tr *Tier) error { return tr.Remove(1) }, false, nil},
		{"create over", func(tr *Tier) error { return tr.Create(1, 8192) }, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tr := openTier(t, dir, Options{})
			if err := tr.Create(1, 0); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, tr, 1, fill('a', 8192), 0)
			if err := tr.Sync(1); err != nil {
				t.Fatal(err)
			}
			if err := tt.op(tr); err != nil {
				t.Fatal(err)
			}
			crash(tr)
			tr = openTier(t, dir, Options{})
			_, ok := tr.Present(1)
			if ok != tt.wantOK {
				t.Fatalf("state after reopen: %v, want %v", ok, tt.wantOK)
			}
			if ok {
				if got := tr.Missing(1, 0, 8192); !slices.Equal(got, tt.wantExt) {
					t.Errorf("Missing after reopen = %v, want %v", got, tt.wantExt)
				}
			}
		})
	}
}

func TestRemoveDeletesDataAndMap(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, []byte("x"), 0)
	if err := tr.Sync(1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Remove(1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tr.dataPath(1), tr.mapPath(1)} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists: %v", p, err)
		}
	}
	if _, ok := tr.Present(1); ok {
		t.Error("Present reports state after Remove")
	}
	if _, err := tr.ReadAt(1, tr.Epoch(1), make([]byte, 1), 0); !errors.Is(err, ErrNoState) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAt after Remove: %v, want ErrNoState", err)
	}
	if err := tr.Remove(1); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if u := tr.Usage(); u != 0 {
		t.Errorf("Usage after removing everything = %d", u)
	}
}

func TestOperationsOnAnInodeWithoutStateFail(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	p := make([]byte, 10)
	ops := map[string]func() error{
		"ReadAt":   func() error { _, err := tr.ReadAt(5, tr.Epoch(5), p, 0); return err },
		"WriteAt":  func() error { _, err := tr.WriteAt(5, p, 0); return err },
		"Fill":     func() error { return tr.Fill(5, tr.Epoch(5), p, 0) },
		"Truncate": func() error { return tr.Truncate(5, 10) },
		"Punch":    func() error { return tr.Punch(5, 0, 10) },
		"Allocate": func() error { return tr.Allocate(5, 0, 10) },
		"SeekData": func() error { _, err := tr.SeekData(5, 0); return err },
		"SeekHole": func() error { _, err := tr.SeekHole(5, 0); return err },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			err := op()
			if !errors.Is(err, ErrNoState) {
				t.Errorf("err = %v, want ErrNoState", err)
			}
			if err != nil && !bytes.Contains([]byte(err.Error()), []byte("inode 5")) {
				t.Errorf("error %q does not name the inode", err)
			}
		})
	}
	if err := tr.Sync(5); err != nil {
		t.Errorf("Sync of an inode without state: %v", err)
	}
}

func TestClosedTierRefusesOperations(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WriteAt(1, []byte("x"), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteAt after Close: %v, want ErrClosed", err)
	}
	if err := tr.Create(2, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	if err := tr.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

func TestOpenRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	openTier(t, dir, Options{})
	if tr, err := Open(dir, Options{}); err == nil {
		tr.Close()
		t.Fatal("second Open of the same directory succeeded")
	}
}

func TestUsageCountsAllocatedBlocksNotSparseSize(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 1<<30); err != nil {
		t.Fatal(err)
	}
	if u := tr.Usage(); u >= 1<<20 {
		t.Errorf("Usage of an empty 1 GiB sparse file = %d", u)
	}
	mustWrite(t, tr, 1, fill('a', 1<<20), 0)
	if u := tr.Usage(); u < 1<<20 {
		t.Errorf("Usage after writing 1 MiB = %d", u)
	}
}

func TestEvictFreesLeastRecentlyUsedFirstAndSkipsPinned(t *testing.T) {
	const size = 256 << 10
	tr := openTier(t, t.TempDir(), Options{Capacity: 3 * size})
	for ino := uint64(1); ino <= 5; ino++ {
		if err := tr.Create(ino, 0); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, tr, ino, fill(byte('0'+ino), size), 0)
	}
	// LRU order now 1 2 3 4 5; touching 1 makes it 2 3 4 5 1.
	tr.Touch(1)
	pinned := func(ino uint64) bool { return ino == 2 }
	freed, err := tr.Evict(pinned)
	if err != nil {
		t.Fatal(err)
	}
	// Over by two inodes: 2 is pinned, so 3 and 4 go.
	if freed < 2*size {
		t.Errorf("freed %d, want at least %d", freed, 2*size)
	}
	for ino, want := range map[uint64]bool{1: true, 2: true, 3: false, 4: false, 5: true} {
		if _, ok := tr.Present(ino); ok != want {
			t.Errorf("inode %d kept = %v, want %v", ino, ok, want)
		}
	}
	if u := tr.Usage(); u > 3*size {
		t.Errorf("Usage after Evict = %d, over capacity %d", u, 3*size)
	}
	if freed, err := tr.Evict(pinned); err != nil || freed != 0 {
		t.Errorf("Evict under capacity = %d, %v; want 0, nil", freed, err)
	}
}

func TestEvictWithUnlimitedCapacityDoesNothing(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('a', 1<<20), 0)
	if freed, err := tr.Evict(nil); err != nil || freed != 0 {
		t.Errorf("Evict = %d, %v; want 0, nil", freed, err)
	}
	mustPresent(t, tr, 1, 1<<20)
}

func TestEvictIdleRemovesOnlyInodesUnusedSinceTheCutoff(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	for ino := uint64(1); ino <= 3; ino++ {
		if err := tr.Create(ino, 0); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, tr, ino, []byte("data"), 0)
	}
	last, _ := tr.LastUse(3)
	cutoff := last.Add(time.Nanosecond)
	tr.Touch(2) // used after the cutoff
	if _, err := tr.EvictIdle(cutoff, func(ino uint64) bool { return ino == 1 }); err != nil {
		t.Fatal(err)
	}
	for ino, want := range map[uint64]bool{1: true, 2: true, 3: false} {
		if _, ok := tr.Present(ino); ok != want {
			t.Errorf("inode %d kept = %v, want %v", ino, ok, want)
		}
	}
}

func TestOpenFilesStayBoundedAndDataStaysCorrect(t *testing.T) {
	const maxOpen = 4
	tr := openTier(t, t.TempDir(), Options{MaxOpenFiles: maxOpen})
	for round := range 3 {
		for ino := uint64(1); ino <= 50; ino++ {
			if round == 0 {
				if err := tr.Create(ino, 0); err != nil {
					t.Fatal(err)
				}
				mustWrite(t, tr, ino, []byte(fmt.Sprintf("inode %d", ino)), 0)
				continue
			}
			want := fmt.Sprintf("inode %d", ino)
			if got := mustRead(t, tr, ino, 0, len(want)); string(got) != want {
				t.Fatalf("round %d: read %q, want %q", round, got, want)
			}
		}
	}
	open := 0
	for i := range tr.shards {
		for _, n := range tr.shards[i].m {
			if n.f.Load() != nil {
				open++
			}
		}
	}
	if open > maxOpen {
		t.Errorf("%d data files open, want at most %d", open, maxOpen)
	}
}

func TestConcurrentReadsAndWrites(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{MaxOpenFiles: 8})
	const (
		workers = 8
		blocks  = 64
		blk     = 4096
	)
	for ino := uint64(1); ino <= workers+1; ino++ {
		if err := tr.Create(ino, 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		// Worker w owns inode w+1 alone, and every workers-th block of the
		// shared inode (workers+1).
		wg.Go(func() {
			own := uint64(w + 1)
			shared := uint64(workers + 1)
			for i := range blocks {
				b := byte(w*blocks + i)
				for _, target := range []struct {
					ino uint64
					off int64
				}{{own, int64(i * blk)}, {shared, int64((i*workers + w) * blk)}} {
					if _, err := tr.WriteAt(target.ino, fill(b, blk), target.off); err != nil {
						t.Error(err)
						return
					}
					p := make([]byte, blk)
					if _, err := tr.ReadAt(target.ino, tr.Epoch(target.ino), p, target.off); err != nil {
						t.Error(err)
						return
					}
					if !bytes.Equal(p, fill(b, blk)) {
						t.Errorf("inode %d at %d: read back other data", target.ino, target.off)
						return
					}
					tr.Missing(target.ino, 0, blocks*workers*blk)
					tr.Touch(target.ino)
				}
				if i%16 == 0 {
					if err := tr.Sync(shared); err != nil {
						t.Error(err)
					}
					tr.Usage()
				}
			}
		})
	}
	wg.Wait()
	mustPresent(t, tr, workers+1, workers*blocks*blk)
	if m := tr.Missing(workers+1, 0, workers*blocks*blk); m != nil {
		t.Errorf("shared inode Missing = %v", m)
	}
}

func TestReadAtPastTheEndReturnsEOF(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, []byte("abc"), 0)
	p := make([]byte, 10)
	n, err := tr.ReadAt(1, tr.Epoch(1), p, 0)
	if n != 3 || err != io.EOF {
		t.Errorf("ReadAt = %d, %v; want 3, io.EOF", n, err)
	}
}

func TestAFillThatLandsAfterATruncationDoesNotBringTheCutDataBack(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 100); err != nil {
		t.Fatal(err)
	}
	// A read fetched the object before an ftruncate to 0; its Fill comes
	// after.
	if err := tr.Truncate(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(1, tr.Epoch(1), fill('B', 100), 0); err != nil {
		t.Fatal(err)
	}
	if size, _ := tr.Size(1); size != 0 {
		t.Errorf("size after the late Fill: %d, want 0", size)
	}
	// The file grows again: the grown range is zeros, not the old bytes.
	if err := tr.Truncate(1, 50); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, tr, 1, 0, 50); !bytes.Equal(got, make([]byte, 50)) {
		t.Errorf("after truncating to 0 and growing to 50: %q, want zeros", got)
	}
}

// A fill fetched for the content before a reset carries the old version's
// bytes: it must not land under the new one.
func TestFillStartedBeforeAResetIsRefused(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 100); err != nil {
		t.Fatal(err)
	}
	epoch := tr.Epoch(1) // a reader takes it, then fetches the old version
	if err := tr.Reset(1, 100); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(1, epoch, fill('o', 100), 0); !errors.Is(err, ErrStale) {
		t.Fatalf("Fill with the epoch from before Reset = %v, want ErrStale", err)
	}
	mustPresent(t, tr, 1, 0)
	if err := tr.Fill(1, tr.Epoch(1), fill('n', 100), 0); err != nil {
		t.Fatalf("Fill with the current epoch: %v", err)
	}
	mustPresent(t, tr, 1, 100)
}

// ResetWith and Guard model an import of a new version racing a file
// write: the import commits only if the namespace has no record of a local
// write (else it gives up), and the write records itself under Guard. The
// import is started while the write is between its bytes and its record,
// and then must still never discard the bytes.
func TestResetWithNeverDiscardsAGuardedWriteItsCommitDidNotSee(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	errDirty := errors.New("dirty")
	for ino := uint64(1); ino <= 100; ino++ {
		if err := tr.Init(ino, 4096); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		recorded := false // the namespace's dirty flag
		writing := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			defer tr.Guard(ino)()
			mustWrite(t, tr, ino, fill('w', 512), 1024)
			close(writing)
			for range 100 {
				runtime.Gosched() // give the import every chance to run now
			}
			mu.Lock()
			recorded = true
			mu.Unlock()
		})
		wg.Go(func() {
			<-writing
			err := tr.ResetWith(ino, func() (int64, error) {
				mu.Lock()
				defer mu.Unlock()
				if recorded {
					return 0, errDirty
				}
				return 4096, nil
			})
			if err != nil && !errors.Is(err, errDirty) {
				t.Errorf("ResetWith: %v", err)
			}
		})
		wg.Wait()
		if got := tr.Missing(ino, 1024, 512); len(got) != 0 {
			t.Fatalf("ino %d: the write's bytes were discarded (missing %v)", ino, got)
		}
		if got := mustRead(t, tr, ino, 1024, 512); !bytes.Equal(got, fill('w', 512)) {
			t.Fatalf("ino %d: the write's bytes read back as %q", ino, got[:8])
		}
	}
}

// An inode removed and started again gets a new epoch, so a fill fetched
// for its earlier content is refused even though the state is new.
func TestEpochsAreNeverReusedAcrossRemoval(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Init(1, 100); err != nil {
		t.Fatal(err)
	}
	old := tr.Epoch(1)
	if err := tr.Remove(1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Init(1, 100); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(1, old, fill('o', 100), 0); !errors.Is(err, ErrStale) {
		t.Fatalf("Fill with the epoch of removed state = %v, want ErrStale", err)
	}
}

// A commit that fails leaves the tier's data as it was, and claimed on disk
// again at once: fsynced data survives a crash right after.
func TestResetWithAFailedCommitKeepsTheData(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('L', 100), 0)
	if err := tr.Sync(1); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("changed meanwhile")
	if err := tr.ResetWith(1, func() (int64, error) { return 0, failed }); !errors.Is(err, failed) {
		t.Fatalf("ResetWith = %v, want the commit's error", err)
	}
	if got := mustRead(t, tr, 1, 0, 100); !bytes.Equal(got, fill('L', 100)) {
		t.Fatalf("after a failed ResetWith: %q", got[:8])
	}
	crash(tr)
	tr2 := openTier(t, dir, Options{})
	mustPresent(t, tr2, 1, 100)
}

func TestCheckpointMakesUnsyncedWritesSurviveACrash(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	for ino := uint64(1); ino <= 3; ino++ {
		if err := tr.Create(ino, 0); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, tr, ino, fill(byte('a'+ino), 1000), 0)
	}
	if n, _, err := tr.Checkpoint(); err != nil || n != 3 {
		t.Fatalf("Checkpoint = %d, %v; want 3 inodes", n, err)
	}
	mustWrite(t, tr, 3, fill('z', 500), 1000) // after the checkpoint: lost
	crash(tr)
	tr2 := openTier(t, dir, Options{})
	for ino := uint64(1); ino <= 3; ino++ {
		mustPresent(t, tr2, ino, 1000)
		if got := mustRead(t, tr2, ino, 0, 1000); !bytes.Equal(got, fill(byte('a'+ino), 1000)) {
			t.Fatalf("ino %d after the crash: %q", ino, got[:8])
		}
	}
	if n, _, err := tr2.Checkpoint(); err != nil || n != 0 {
		t.Fatalf("Checkpoint with nothing changed = %d, %v", n, err)
	}
}

// Content replaced or cut between a checkpoint's snapshot and its map
// writes may not be durable as the snapshot saw it: the checkpoint must not
// claim it.
func TestCheckpointSkipsContentReplacedOrCutAfterItsSnapshot(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	for ino := uint64(1); ino <= 3; ino++ {
		if err := tr.Init(ino, 1000); err != nil {
			t.Fatal(err)
		}
		if err := tr.Fill(ino, tr.Epoch(ino), fill('o', 1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	tr.afterSnapshot = func() {
		if err := tr.Reset(1, 1000); err != nil { // a new version arrives
			t.Error(err)
		}
		if err := tr.Fill(1, tr.Epoch(1), fill('n', 1000), 0); err != nil {
			t.Error(err)
		}
		if err := tr.Punch(2, 0, 500); err != nil {
			t.Error(err)
		}
	}
	if n, skipped, err := tr.Checkpoint(); err != nil || n != 1 || skipped != 2 {
		t.Fatalf("Checkpoint = %d (skipped %d), %v; want only the untouched inode 3", n, skipped, err)
	}
	crash(tr)
	tr2 := openTier(t, dir, Options{})
	for _, ino := range []uint64{1, 2} {
		if got, ok := tr2.Present(ino); ok && got != 0 {
			t.Errorf("ino %d: %d bytes claimed after the crash, want none", ino, got)
		}
	}
	mustPresent(t, tr2, 3, 1000)
}

// A Sync between a checkpoint's snapshot and its map write made a newer
// state durable: the checkpoint must not replace that map with its older
// one, nor leave the inode counted as synced.
func TestCheckpointNeverUndoesASyncAfterItsSnapshot(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, dir, Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('a', 100), 0)
	tr.afterSnapshot = func() {
		mustWrite(t, tr, 1, fill('b', 50), 100)
		if err := tr.Sync(1); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := tr.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tr.afterSnapshot = nil
	if err := tr.Sync(1); err != nil { // nothing changed since the Sync
		t.Fatal(err)
	}
	crash(tr)
	tr2 := openTier(t, dir, Options{})
	mustPresent(t, tr2, 1, 150)
}

func TestReadAtRefusesContentReplacedSinceItsEpoch(t *testing.T) {
	tr := openTier(t, t.TempDir(), Options{})
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('a', 100), 0)
	epoch := tr.Epoch(1)
	p := make([]byte, 100)
	if n, err := tr.ReadAt(1, epoch, p, 0); err != nil || n != 100 || !bytes.Equal(p, fill('a', 100)) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if err := tr.Reset(1, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ReadAt(1, epoch, p, 0); !errors.Is(err, ErrStale) {
		t.Fatalf("ReadAt after Reset = %v, want ErrStale", err)
	}
}
