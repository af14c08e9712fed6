// Package s3test gives tests a real S3 store: the embedded versitygw store of
// package s3local, started once per test binary and shared by every test in
// it.
//
// Only one embedded store can run per process (versitygw's posix backend
// changes the process working directory and resolves object paths against
// it), so tests cannot each start their own. Instead Store starts one lazily
// on first use, in a fresh directory under os.TempDir, and NewBucket hands
// every caller its own versioned bucket with a unique name, which keeps
// parallel tests apart without any cleanup between them.
//
// Because the store changes the working directory, tests in a binary that
// uses this package must use absolute paths (t.TempDir already returns one).
//
// The store lives until the process exits. A package whose tests should also
// remove its directory calls Main from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(s3test.Main(m)) }
//
// Events lets a test watch the object events of one bucket; the store's
// single OnEvent callback fans them out by bucket name.
//
// Proxy puts a fault-injecting proxy in front of the store, for an
// interleaving a real store shows only under a race; ListHolder, built on
// it, holds back the store's answer to one chosen LIST.
package s3test
