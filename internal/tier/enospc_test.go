package tier

import (
	"bytes"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// mountTinyTmpfs mounts a tmpfs of the given size (e.g. "1m") and unmounts it
// in t.Cleanup; register it before anything that must be closed first.
func mountTinyTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := unix.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs to test ENOSPC (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

func TestWriteAtOnAFullDiskFailsWithENOSPCAndKeepsEarlierData(t *testing.T) {
	dir := mountTinyTmpfs(t, "1m")
	tr := openTier(t, dir, Options{})
	const early = 512 << 10
	if err := tr.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tr, 1, fill('e', early), 0)
	if err := tr.Sync(1); err != nil {
		t.Fatal(err)
	}

	n, err := tr.WriteAt(1, fill('x', 1<<20), early)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteAt past the disk size = %d, %v; want an error wrapping ENOSPC", n, err)
	}
	// Only what reached the disk is present; the rest is not claimed.
	mustPresent(t, tr, 1, early+int64(n))
	if got := mustRead(t, tr, 1, 0, early); !bytes.Equal(got, fill('e', early)) {
		t.Fatal("earlier data changed after ENOSPC")
	}

	// A fill from the bucket into the full disk fails the same way.
	if err := tr.Init(2, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := tr.Fill(2, tr.Epoch(2), fill('b', 1<<20), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Fill on a full disk: %v, want an error wrapping ENOSPC", err)
	}

	// Freeing space makes the tier usable again, and synced data survives
	// a reopen.
	if err := tr.Remove(2); err != nil {
		t.Fatal(err)
	}
	if err := tr.Truncate(1, early); err != nil {
		t.Fatal(err)
	}
	if err := tr.Sync(1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	tr = openTier(t, dir, Options{})
	mustPresent(t, tr, 1, early)
	if got := mustRead(t, tr, 1, 0, early); !bytes.Equal(got, fill('e', early)) {
		t.Fatal("earlier data lost across reopen")
	}
}
