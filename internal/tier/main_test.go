package tier

import (
	"os"
	"testing"

	"bucketfs/internal/pgtest"
)

// TestMain stops the PostgreSQL server the tests' stores run on with
// BUCKETFS_TEST_KV=postgres (package testkv) when they have run.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
