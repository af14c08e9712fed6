package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// logRecords is a log to test what was logged: a JSON handler at debug
// writes to it, and records decodes the lines.
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

// records returns the records with message msg logged so far.
func (l *logRecords) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.buf.String()
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// waitRounds waits until the summary has looked at n more intervals.
func waitRounds(t *testing.T, e *Engine, n int64) {
	t.Helper()
	want := e.summaryRounds.Load() + n
	for deadline := time.Now().Add(10 * time.Second); e.summaryRounds.Load() < want; {
		if time.Now().After(deadline) {
			t.Fatalf("the summary looked at %d intervals in 10s, want %d", e.summaryRounds.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTheSummaryIsLoggedAfterActivityAndNotWhenIdle(t *testing.T) {
	var log logRecords
	e := openEngineCfg(t, func(c *Config) { c.Logger = log.logger() })
	e.summaryInterval = 20 * time.Millisecond
	e.Start()
	ctx := context.Background()

	waitRounds(t, e, 3)
	if rs := log.records(t, "sync summary"); len(rs) != 0 {
		t.Fatalf("an idle file system logged summaries: %v", rs)
	}

	_, f, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, "a.txt", 0o644, uint32(os.O_RDWR))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, []byte("hello summary"), 0); err != nil {
		t.Fatal(err)
	}
	f.Release(ctx)
	if err := e.Exporter.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The interval the flush ended in has closed once two more have begun.
	waitRounds(t, e, 2)
	rs := log.records(t, "sync summary")
	var exports, up float64
	for _, r := range rs {
		if r["level"] != "INFO" {
			t.Errorf("summary at %v, want INFO: %v", r["level"], r)
		}
		for _, k := range []string{"interval", "exports", "imports", "conflicts", "evictions", "failures", "bytes_up", "bytes_down"} {
			if _, ok := r[k]; !ok {
				t.Errorf("summary without %s: %v", k, r)
			}
		}
		e, _ := r["exports"].(float64)
		b, _ := r["bytes_up"].(float64)
		exports, up = exports+e, up+b
	}
	if len(rs) == 0 || exports < 1 || up < 13 {
		t.Fatalf("after an export of 13 bytes the summaries say %v exports, %v bytes up: %v", exports, up, rs)
	}
	if n := len(log.records(t, "export")); n < 1 {
		t.Errorf("the export logged %d debug lines", n)
	}

	// Idle again: no more summaries.
	waitRounds(t, e, 3)
	if again := log.records(t, "sync summary"); len(again) != len(rs) {
		t.Fatalf("idle after the export, the summaries went from %d to %d: %v", len(rs), len(again), again[len(rs):])
	}
}

func TestAnEvictionLogsTheFileAndTheBytesAtDebug(t *testing.T) {
	var log logRecords
	e := openEngineCfg(t, func(c *Config) { c.Logger = log.logger(); c.TierCapacity = 1 << 20 })
	ctx := context.Background()
	for _, name := range []string{"old", "new"} {
		_, f, err := e.FS.Create(ctx, vfs.Root, meta.RootIno, name, 0o644, uint32(os.O_RDWR))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(ctx, bytes.Repeat([]byte(name[:1]), 700<<10), 0); err != nil {
			t.Fatal(err)
		}
		f.Release(ctx)
		if err := e.Exporter.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.evict(ctx)
	rs := log.records(t, "tier evicted")
	if len(rs) != 1 || rs[0]["key"] != "old" || rs[0]["bytes"] != float64(700<<10) || rs[0]["level"] != "DEBUG" {
		t.Fatalf("eviction logged %v, want one debug line for old, 700 KiB", rs)
	}
	if got := e.activity().evictions; got != 1 {
		t.Errorf("%d evictions counted for the summary, want 1", got)
	}
}
