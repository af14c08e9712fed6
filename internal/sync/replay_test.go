package sync

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvreplay"
	"bucketfs/internal/kv/testkv"
	"bucketfs/internal/meta"
	"bucketfs/internal/testlog"
)

// syncOutcome is what replaySyncScenario counts: the importer's and the
// exporter's counters, the log lines of each kind, the change
// notifications, lost+found and the export queue.
type syncOutcome struct {
	imported, importFailures, importConflicts int64
	exported, exportFailures, exportConflicts int64
	logs                                      string
	changes                                   int
	lostFound                                 int
	queued                                    int
}

// replaySyncScenario exports, imports, removes and conflicts through an
// importer and an exporter over a namespace on db, wired as the engine
// wires them (the importer hears of files kept in lost+found).
func replaySyncScenario(t *testing.T, db kv.Store) syncOutcome {
	t.Helper()
	ctx := context.Background()
	var log testlog.Log
	st := newUploadStore(t)
	var im *Importer
	m, err := meta.Open(ctx, db, meta.Options{ExportDelay: time.Minute,
		OnKeptInLostFound: func(ino meta.Ino, name string) { im.KeptInLostFound(ino, name) }})
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	im = NewImporter(m, st.bucket, ImporterConfig{Logger: log.Logger(), OnChange: func(Change) { changes++ }})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{Logger: log.Logger()})
	t.Cleanup(e.Wait)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Exports: a new file, then a rename of it.
	newFile(t, m, "a", []byte("exported"))
	must(e.Flush(ctx))
	_, err = m.Rename(ctx, meta.RootIno, "a", meta.RootIno, "b", 0, nil)
	must(err)
	must(e.Flush(ctx))
	// Imports: a new object, then its deletion in the bucket.
	put(t, st.bucket, "g", nil)
	must(im.Revalidate(ctx, "g"))
	g, err := m.Lookup(ctx, meta.RootIno, "g")
	must(err)
	must(st.bucket.Delete(ctx, "g"))
	must(im.Revalidate(ctx, "g"))
	// The file side still held g open and writes to it: the bucket's
	// deletion wins, the file side's version goes to lost+found.
	_, err = m.WriteData(ctx, g.Ino, []byte("file side"), 0, false, time.Now().UnixNano(), meta.Limits{}, nil)
	must(err)
	// A conflict at a name: b changed on both sides.
	b, err := m.Lookup(ctx, meta.RootIno, "b")
	must(err)
	_, err = m.WriteData(ctx, b.Ino, []byte("file side"), 0, false, time.Now().UnixNano(), meta.Limits{}, nil)
	must(err)
	body := []byte("bucket side")
	_, err = st.bucket.Put(ctx, "b", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{})
	must(err)
	must(im.Revalidate(ctx, "b"))
	must(e.Flush(ctx))

	is, es := im.Stats(), e.Stats()
	o := syncOutcome{imported: is.Imported, importFailures: is.Failures, importConflicts: is.Conflicts,
		exported: es.Exported, exportFailures: es.Failures, exportConflicts: es.Conflicts, changes: changes}
	for _, msg := range []string{"export", "import", "conflict"} {
		o.logs += fmt.Sprintf("%s:%d ", msg, len(log.Records(t, msg, nil)))
	}
	o.lostFound, err = m.LostFoundCount(ctx)
	must(err)
	o.queued, _, err = m.QueueStats(ctx)
	must(err)
	return o
}

// The exporter and the importer count, log and announce every export,
// import and conflict once, whether or not the transactions under them
// ran their fn once more on a transaction that was thrown away (kv's
// rule for callers; a PostgreSQL backend retries serialization failures
// so). Among them the conflict the bucket wins over a file the file side
// held open, which meta reports from the transaction that keeps the file.
func TestSyncCountsAndLogsAsOftenWhenEachTransactionRunsTwice(t *testing.T) {
	open := func() kv.Store {
		db, err := testkv.Open(t, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	want := replaySyncScenario(t, open())
	rs := kvreplay.New(open(), kvreplay.Options{})
	got := replaySyncScenario(t, rs)
	if rs.Replays() < 10 {
		t.Fatalf("only %d transactions were replayed", rs.Replays())
	}
	if got != want {
		t.Fatalf("with every transaction run twice:\n%+v\nrun once:\n%+v", got, want)
	}
	if want.importConflicts != 2 || want.lostFound != 2 {
		t.Fatalf("the scenario counted %d conflicts, %d in lost+found; want 2", want.importConflicts, want.lostFound)
	}
}
