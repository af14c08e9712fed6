package fuse_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"bucketfs/internal/engine"
	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3test"
)

// The metadata-heavy workloads through one server on PostgreSQL beside the
// same server on its own Pebble store (issue 23's benchmarks), with what
// each operation asks of the database: round trips, Updates, Views and
// Updates run again, per op. Compare ns/op between the two; the counts
// say where PostgreSQL's time goes (each round trip is a wait, each
// Update's COMMIT a flush of the database's log):
//
//	go test -run '^$' -bench PostgreSQL ./internal/frontend/fuse/

// pgBenchMounts runs fn on a mount of a server on Pebble and on one on a
// real PostgreSQL, both with an export delay of an hour.
func pgBenchMounts(b *testing.B, fn func(b *testing.B, dir string)) {
	b.Run("pebble", func(b *testing.B) {
		e := newEnv(b, withExportDelay(time.Hour))
		withCPU(b, func() { fn(b, e.mnt) })
	})
	b.Run("postgres", func(b *testing.B) {
		mnt, e := postgresMount(b)
		ps := e.KV.(*postgres.Store)
		before := ps.Stats()
		withCPU(b, func() { fn(b, mnt) })
		after := ps.Stats()
		n := float64(b.N)
		b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/n, "rt/op")
		b.ReportMetric(float64(after.Updates-before.Updates)/n, "updates/op")
		b.ReportMetric(float64(after.Views-before.Views)/n, "views/op")
		b.ReportMetric(float64(after.Attempts-after.Updates-(before.Attempts-before.Updates))/n, "retries/op")
		b.ReportMetric(float64(after.Stale-before.Stale)/n, "stale/op")
	})
}

// postgresMount starts one server on a new database of a real PostgreSQL
// and mounts it with the kernel cache timeouts of newEnv's mount.
func postgresMount(tb testing.TB) (string, *engine.Engine) {
	tb.Helper()
	url := pgtest.Start(tb).NewDatabase(tb)
	srv, bucketName := s3test.NewBucket(tb)
	e, err := engine.Open(context.Background(), engine.Config{StateDir: tb.TempDir(), Meta: url,
		Bucket: bucketName, Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		ExportDelay: time.Hour, PollInterval: -1, RevalidateTTL: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	e.Start()
	mnt := tb.TempDir()
	fsrv, err := bfuse.Mount(e.FS, mnt, bfuse.Options{Name: "bucketfs-bench", AttrTimeout: time.Second, EntryTimeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := fsrv.Unmount(); err != nil {
			tb.Errorf("unmount: %v", err)
		}
	})
	return mnt, e
}

// BenchmarkPostgreSQLCreate: open(O_CREAT), one 4 KiB write, close.
func BenchmarkPostgreSQLCreate(b *testing.B) {
	data := make([]byte, 4096)
	pgBenchMounts(b, func(b *testing.B, dir string) {
		for i := 0; b.Loop(); i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%07d", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Four writers creating 4 KiB files in one directory at once: every
// create changes the directory, so a create's guess of it (kv/postgres
// guess.go) is often stale by its commit; stale/op says how often.
func BenchmarkPostgreSQLCreateFourWritersInOneDirectory(b *testing.B) {
	data := make([]byte, 4096)
	pgBenchMounts(b, func(b *testing.B, dir string) {
		var next atomic.Int64
		b.SetParallelism(2) // 2 CPUs here: 4 writers
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				name := filepath.Join(dir, fmt.Sprintf("f%07d", next.Add(1)))
				if err := os.WriteFile(name, data, 0o644); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
