package sync

import (
	"bytes"
	"context"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
	"bucketfs/internal/testlog"
)

func TestAnExportAnImportAndAConflictEachLogTheirLineWithTheKey(t *testing.T) {
	var log testlog.Log
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, ImporterConfig{Logger: log.Logger()})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{Logger: log.Logger()})
	t.Cleanup(e.Wait)
	ctx := context.Background()

	// An export: what was uploaded, its version, its size, and how long
	// after the change.
	f := newFile(t, m, "f", nil)
	if _, err := m.WriteData(ctx, f.Ino, []byte("hello"), 0, false, time.Now().UnixNano(), meta.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := st.bucket.Head(ctx, "f", "")
	if err != nil {
		t.Fatal(err)
	}
	r := log.One(t, "the export of f", "export", map[string]any{"key": "f", "level": "DEBUG"})
	if r["action"] != "uploaded" || r["version_id"] != head.VersionID || r["bytes"] != 5.0 || r["since_change"] == nil {
		t.Errorf("the export of f logged %v; want uploaded, version %s, 5 bytes, the time since the change", r, head.VersionID)
	}

	// Imports: a new object, a changed one, a deleted one.
	put(t, st.bucket, "g", nil)
	if err := im.Revalidate(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	r = log.One(t, "the import of g", "import", map[string]any{"key": "g", "action": "new", "level": "DEBUG"})
	if g, _ := st.bucket.Head(ctx, "g", ""); r["version_id"] != g.VersionID || r["bytes"] != float64(g.Size) {
		t.Errorf("the import of g logged %v, want version %s, %d bytes", r, g.VersionID, g.Size)
	}
	put(t, st.bucket, "f", nil)
	if err := im.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	log.One(t, "the import of a changed f", "import", map[string]any{"key": "f", "action": "updated"})
	if err := st.bucket.Delete(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	log.One(t, "the removal of g", "import", map[string]any{"key": "g", "action": "removed"})

	// A conflict: f changed on both sides; what went to lost+found.
	in, err := m.Lookup(ctx, meta.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteData(ctx, in.Ino, []byte("file side"), 0, false, 0, meta.Limits{}, nil); err != nil {
		t.Fatal(err)
	}
	body := []byte("bucket side")
	if _, err := st.bucket.Put(ctx, "f", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	r = log.One(t, "the conflict at f", "conflict", map[string]any{"key": "f"})
	if name, _ := r["lost_found_name"].(string); name == "" || r["file_side_ino"] != float64(in.Ino) {
		t.Errorf("the conflict at f logged %v, want the lost+found name and the inode", r)
	}
	if ents, err := m.ReadDir(ctx, m.LostFound(), "", 10); err != nil || len(ents) != 1 || ents[0].Name != r["lost_found_name"] {
		t.Errorf("lost+found holds %v (%v); the log says %v", ents, err, r["lost_found_name"])
	}
	log.One(t, "the bucket's f after the conflict", "import", map[string]any{"key": "f", "action": "new"})
}

func TestARenameLogsOneExportWithTheNameCopiedToAndTheNameDeleted(t *testing.T) {
	var log testlog.Log
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, ImporterConfig{Logger: log.Logger()})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{Logger: log.Logger()})
	t.Cleanup(e.Wait)
	ctx := context.Background()
	newFile(t, m, "a", []byte("moving"))
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rename(ctx, meta.RootIno, "a", meta.RootIno, "b", 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r := log.One(t, "the export of the rename", "export", map[string]any{"action": "moved"})
	if r["key"] != "b" || !slicesEqual(r["copied_to"], []any{"b"}) || !slicesEqual(r["deleted"], []any{"a"}) {
		t.Errorf("the rename logged %v, want b copied to, a deleted", r)
	}
}

func slicesEqual(got any, want []any) bool {
	g, ok := got.([]any)
	if !ok || len(g) != len(want) {
		return false
	}
	for i := range g {
		if g[i] != want[i] {
			return false
		}
	}
	return true
}
