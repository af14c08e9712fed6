package sync

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"bucketfs/internal/bucket"
	"bucketfs/internal/meta"
)

// logRecords is a log to test what was logged: a JSON handler writes to
// it, and records decodes the lines.
type logRecords struct {
	mu  gosync.Mutex
	buf bytes.Buffer
}

func (l *logRecords) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logRecords) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the records logged so far whose message starts with msg
// and whose attributes include every pair of match.
func (l *logRecords) records(t *testing.T, msg string, match map[string]any) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.buf.String()
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := r["msg"].(string); !strings.HasPrefix(m, msg) {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && r[k] == v
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// one returns the single record that records finds, failing otherwise.
func (l *logRecords) one(t *testing.T, what, msg string, match map[string]any) map[string]any {
	t.Helper()
	rs := l.records(t, msg, match)
	if len(rs) != 1 {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("%s: %d lines %q with %v, want 1; the log:\n%s", what, len(rs), msg, match, l.buf.String())
	}
	return rs[0]
}

func TestAnExportAnImportAndAConflictEachLogTheirLineWithTheKey(t *testing.T) {
	var log logRecords
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, ImporterConfig{Logger: log.logger()})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{Logger: log.logger()})
	ctx := context.Background()

	// An export: what was uploaded, its version, its size, and how long
	// after the change.
	f := newFile(t, m, "f", nil)
	if _, err := m.WriteData(ctx, f.Ino, []byte("hello"), 0, false, time.Now().UnixNano(), meta.Limits{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	head, err := st.bucket.Head(ctx, "f", "")
	if err != nil {
		t.Fatal(err)
	}
	r := log.one(t, "the export of f", "export", map[string]any{"key": "f", "level": "DEBUG"})
	if r["action"] != "uploaded" || r["version_id"] != head.VersionID || r["bytes"] != 5.0 || r["since_change"] == nil {
		t.Errorf("the export of f logged %v; want uploaded, version %s, 5 bytes, the time since the change", r, head.VersionID)
	}

	// Imports: a new object, a changed one, a deleted one.
	put(t, st.bucket, "g", nil)
	if err := im.Revalidate(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	r = log.one(t, "the import of g", "import", map[string]any{"key": "g", "action": "new", "level": "DEBUG"})
	if g, _ := st.bucket.Head(ctx, "g", ""); r["version_id"] != g.VersionID || r["bytes"] != float64(g.Size) {
		t.Errorf("the import of g logged %v, want version %s, %d bytes", r, g.VersionID, g.Size)
	}
	put(t, st.bucket, "f", nil)
	if err := im.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	log.one(t, "the import of a changed f", "import", map[string]any{"key": "f", "action": "updated"})
	if err := st.bucket.Delete(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	log.one(t, "the removal of g", "import", map[string]any{"key": "g", "action": "removed"})

	// A conflict: f changed on both sides; what went to lost+found.
	in, err := m.Lookup(ctx, meta.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteData(ctx, in.Ino, []byte("file side"), 0, false, 0, meta.Limits{}); err != nil {
		t.Fatal(err)
	}
	body := []byte("bucket side")
	if _, err := st.bucket.Put(ctx, "f", bytes.NewReader(body), int64(len(body)), bucket.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := im.Revalidate(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	r = log.one(t, "the conflict at f", "conflict", map[string]any{"key": "f"})
	if name, _ := r["lost_found_name"].(string); name == "" || r["file_side_ino"] != float64(in.Ino) {
		t.Errorf("the conflict at f logged %v, want the lost+found name and the inode", r)
	}
	if ents, err := m.ReadDir(ctx, m.LostFound(), "", 10); err != nil || len(ents) != 1 || ents[0].Name != r["lost_found_name"] {
		t.Errorf("lost+found holds %v (%v); the log says %v", ents, err, r["lost_found_name"])
	}
	log.one(t, "the bucket's f after the conflict", "import", map[string]any{"key": "f", "action": "new"})
}

func TestARenameLogsOneExportWithTheNameCopiedToAndTheNameDeleted(t *testing.T) {
	var log logRecords
	st := newUploadStore(t)
	m := newMeta(t)
	im := NewImporter(m, st.bucket, ImporterConfig{Logger: log.logger()})
	list(t, m, im, "")
	e := NewExporter(m, st.bucket, im, ExporterConfig{Logger: log.logger()})
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
	r := log.one(t, "the export of the rename", "export", map[string]any{"action": "moved"})
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
