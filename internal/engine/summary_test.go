package engine

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"bucketfs/internal/meta"
	"bucketfs/internal/testlog"
	"bucketfs/internal/vfs"
)

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
	var log testlog.Log
	e := openEngineCfg(t, func(c *Config) { c.Logger = log.Logger() })
	e.summaryInterval = 20 * time.Millisecond
	e.Start()
	ctx := context.Background()

	waitRounds(t, e, 3)
	if rs := log.Records(t, "sync summary", nil); len(rs) != 0 {
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
	rs := log.Records(t, "sync summary", nil)
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
	if n := len(log.Records(t, "export", nil)); n < 1 {
		t.Errorf("the export logged %d debug lines", n)
	}

	// Idle again: no more summaries.
	waitRounds(t, e, 3)
	if again := log.Records(t, "sync summary", nil); len(again) != len(rs) {
		t.Fatalf("idle after the export, the summaries went from %d to %d: %v", len(rs), len(again), again[len(rs):])
	}
}

func TestAnEvictionLogsTheFileAndTheBytesAtDebug(t *testing.T) {
	var log testlog.Log
	e := openEngineCfg(t, func(c *Config) { c.Logger = log.Logger(); c.TierCapacity = 1 << 20 })
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
	rs := log.Records(t, "tier evicted", nil)
	if len(rs) != 1 || rs[0]["key"] != "old" || rs[0]["bytes"] != float64(700<<10) || rs[0]["level"] != "DEBUG" {
		t.Fatalf("eviction logged %v, want one debug line for old, 700 KiB", rs)
	}
	if got := e.activity().evictions; got != 1 {
		t.Errorf("%d evictions counted for the summary, want 1", got)
	}
}
