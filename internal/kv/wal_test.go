package kv

import (
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A log file's bytes survive a power loss once walFS.flush or Close has
// run, and not on Sync alone (which only marks them written). Files of
// other categories are not wrapped at all.
func TestWALFileFsyncsOnFlushAndClose(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := newWALFS(mem)
	write := func(name string, category vfs.DiskWriteCategory) vfs.File {
		f, err := fs.Create(name, category)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("record")); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	onlySynced := write("/synced-only.log", walCategory)
	flushed := write("/flushed.log", walCategory)
	closed := write("/closed.log", walCategory)
	other := write("/other.sst", vfs.WriteCategoryUnspecified)
	if _, ok := other.(*walFile); ok {
		t.Fatal("a file that is not a log was wrapped")
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := flushed.Write([]byte(" more")); err != nil {
		t.Fatal(err)
	}
	if err := fs.flush(); err != nil {
		t.Fatal(err)
	}
	// synced-only.log was flushed too (fs.flush covers every open log); write
	// to it again and only Sync.
	if _, err := onlySynced.Write([]byte(" lost")); err != nil {
		t.Fatal(err)
	}
	if err := onlySynced.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := mem.MkdirAll("/", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := mem.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	for name, want := range map[string]string{
		"/synced-only.log": "record",
		"/flushed.log":     "record more",
		"/closed.log":      "record",
		"/other.sst":       "record", // an ordinary file's Sync is real
	} {
		f, err := crashed.Open(name)
		if err != nil {
			t.Fatalf("%s after the power loss: %v", name, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(got) != want {
			t.Errorf("%s after the power loss = %q (%v), want %q", name, got, err, want)
		}
	}
}
