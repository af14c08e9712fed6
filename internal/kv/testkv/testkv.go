// Package testkv opens the metadata store of a test: Pebble in a directory,
// as bucketfs runs by default, or with BUCKETFS_TEST_KV=postgres a fresh
// database of a real PostgreSQL server, so that the same tests check both
// backends:
//
//	go test ./internal/meta                            # on Pebble
//	BUCKETFS_TEST_KV=postgres go test ./internal/meta  # on PostgreSQL
//
// A test names its store by a directory, as it would for Pebble. On
// PostgreSQL the first Open of a directory creates a database for it on the
// test process's shared server (pgtest.Shared), dropped when that test
// ends, and every later Open of the same directory reaches the same
// database: a test that closes its store and opens it again (a restart)
// finds what it left, as on Pebble. A package whose tests use testkv runs
// them from a TestMain that calls pgtest.Main (or wraps m in pgtest.M), so
// that no server outlives the tests.
//
// Tests that check something only Pebble has (its files, its directory
// lock, a crashable file system under it, a process killed while it holds
// a Pebble directory) say so with SkipOnPostgres, in one line.
package testkv

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"bucketfs/internal/kv"
	kvpebble "bucketfs/internal/kv/pebble"
	"bucketfs/internal/kv/postgres"
	"bucketfs/internal/pgtest"
)

// EnvVar chooses the backend of the tests' stores: unset (or "pebble") for
// Pebble, "postgres" for PostgreSQL.
const EnvVar = "BUCKETFS_TEST_KV"

// Postgres reports whether the tests run their stores on PostgreSQL.
func Postgres() bool { return backend() == "postgres" }

func backend() string {
	switch v := os.Getenv(EnvVar); v {
	case "", "pebble":
		return "pebble"
	case "postgres":
		return v
	default:
		panic(EnvVar + "=" + v + ": want pebble or postgres")
	}
}

// SkipOnPostgres skips tb when the stores run on PostgreSQL, saying why:
// for a test of something only a Pebble store has.
func SkipOnPostgres(tb testing.TB, why string) {
	tb.Helper()
	if Postgres() {
		tb.Skipf("Pebble only (%s=postgres): %s", EnvVar, why)
	}
}

// databases maps each directory a test opened a store in to the URL of its
// database on the shared server.
var databases = struct {
	mu   sync.Mutex
	urls map[string]string
}{urls: map[string]string{}}

// Open opens the store named by dir, as kvpebble.Open(dir, Options{}) does
// on Pebble. The caller closes it. An error is returned as kvpebble.Open
// returns it (a directory locked by another open store, for one).
func Open(tb testing.TB, dir string) (kv.Store, error) {
	tb.Helper()
	return OpenOptions(tb, dir, kvpebble.Options{})
}

// OpenOptions is Open with options for Pebble (on PostgreSQL they have no
// meaning and are ignored, but for FS, which only Pebble can run on: a
// test that passes one is skipped on PostgreSQL).
func OpenOptions(tb testing.TB, dir string, opt kvpebble.Options) (kv.Store, error) {
	tb.Helper()
	if !Postgres() {
		return kvpebble.Open(dir, opt)
	}
	if opt.FS != nil {
		SkipOnPostgres(tb, "the store runs on a file system of the test's (kvpebble.Options.FS)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Commits durable only after Sync, as on Pebble and as the engine
	// opens the store.
	return postgres.Open(ctx, databaseFor(tb, dir), postgres.Options{AsyncCommit: true})
}

// databaseFor returns the URL of dir's database, creating it (for the
// length of tb) on the first call for dir.
func databaseFor(tb testing.TB, dir string) string {
	tb.Helper()
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	databases.mu.Lock()
	defer databases.mu.Unlock()
	if url, ok := databases.urls[dir]; ok {
		return url
	}
	url := pgtest.Shared(tb).NewDatabase(tb)
	databases.urls[dir] = url
	tb.Cleanup(func() {
		databases.mu.Lock()
		delete(databases.urls, dir)
		databases.mu.Unlock()
	})
	return url
}

// MustOpen is Open failing tb on an error, with the store closed when tb
// ends.
func MustOpen(tb testing.TB, dir string) kv.Store {
	tb.Helper()
	db, err := Open(tb, dir)
	if err != nil {
		tb.Fatalf("open the metadata store: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// ForEngine returns what a test puts in engine.Config.KV for an engine
// whose state directory is stateDir: nil on Pebble, where the engine opens
// its own store under stateDir as it does in production, and on PostgreSQL
// the store of stateDir's database, closed when tb ends (an engine does
// not close a store it is given). An engine given a store needs an
// external bucket (engine.Config.Bucket).
func ForEngine(tb testing.TB, stateDir string) kv.Store {
	tb.Helper()
	if !Postgres() {
		return nil
	}
	return MustOpen(tb, filepath.Join(stateDir, "meta"))
}
