package tier

import (
	"bytes"
	"testing"
)

func TestSnapshotIsUntouchedByLaterWritesAndReportsMissingRanges(t *testing.T) {
	tr, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	// An imported file of 1 MiB with only [4096, 8192) written locally.
	if err := tr.Init(7, 1<<20); err != nil {
		t.Fatal(err)
	}
	local := bytes.Repeat([]byte("L"), 4096)
	if _, err := tr.WriteAt(7, local, 4096); err != nil {
		t.Fatal(err)
	}
	snap, missing, err := tr.Snapshot(7, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	want := []Range{{0, 4096}, {8192, 1<<20 - 8192}}
	if len(missing) != 2 || missing[0] != want[0] || missing[1] != want[1] {
		t.Fatalf("missing %v, want %v", missing, want)
	}
	if _, err := tr.WriteAt(7, bytes.Repeat([]byte("X"), 4096), 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if _, err := snap.ReadAt(got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, local) {
		t.Fatal("a write after the snapshot changed it")
	}
	st, err := snap.Stat()
	if err != nil || st.Size() != 1<<20 {
		t.Fatalf("snapshot size %v, %v", st.Size(), err)
	}
}
