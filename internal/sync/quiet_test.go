package sync

import (
	"context"
	"errors"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// Found by the crash checker: the kernel hands one write(2) over in several
// requests, and an export already due that took its snapshot between them
// uploaded a state the writer never asked for. An inode whose queue token
// moved after the queue was read is not exported from that snapshot; it
// waits for its new due time, and then the whole write goes up.
func TestAnExportSkipsAFileChangedSinceTheQueueWasRead(t *testing.T) {
	b := fakeStore(t)
	m := newMeta(t)
	e := NewExporter(m, b, nil, ExporterConfig{})
	ctx := context.Background()
	in := newFile(t, m, "f", nil)
	// The file is due: its quiet period is over, and the exporter reads
	// the queue.
	if err := m.Enqueue(ctx, in.Ino, time.Now().Add(-time.Second), false); err != nil {
		t.Fatal(err)
	}
	due, err := m.Due(ctx, time.Now(), 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("queue: %v, %v", due, err)
	}
	// A write arrives in two requests; the export runs between them.
	if _, err := m.WriteData(ctx, in.Ino, []byte("first half "), 0, false, 0, meta.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcile(ctx, due[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "f", ""); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("an export between the two requests of one write: head = %v, want not found", err)
	}
	if _, err := m.WriteData(ctx, in.Ino, []byte("second half"), 11, false, 0, meta.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 22)
	if n, err := b.ReadAt(ctx, "f", "", got, 0); (err != nil && n != 22) || string(got) != "first half second half" {
		t.Fatalf("after the flush the bucket has %q (%v)", got, err)
	}
}
