package fuse_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/s3test"
)

// An operation that needs a store that cannot be reached fails with EIO,
// and only once the store has made no progress for the operation timeout
// (issue 12; README "Store errors"), whatever the socket said: reset or
// refused connections are not the caller's errno, and a few quick
// failures are not an outage.
func TestAReadDuringAStoreOutageIsEIOAfterTheOperationTimeout(t *testing.T) {
	const opTimeout = 4 * time.Second
	p := newStoreProxy(t, s3test.Store(t).Endpoint)
	e := newEnv(t, withEndpoint(p.url), withOpTimeout(opTimeout))
	for _, name := range []string{"reset-file", "hole-file"} {
		e.put(name, []byte("only in the bucket"), nil)
	}
	for _, name := range []string{"reset-file", "hole-file"} {
		if _, err := os.Stat(e.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		mode proxyMode
		name string
	}{{reset, "reset-file"}, {blackhole, "hole-file"}} {
		p.set(tc.mode)
		start := time.Now()
		err := bounded(t, "reading "+tc.name, func() error { _, err := os.ReadFile(e.path(tc.name)); return err })
		took := time.Since(start)
		var errno syscall.Errno
		if !errors.As(err, &errno) || errno != syscall.EIO {
			t.Errorf("reading %s with the store away (mode %d): %v, want EIO", tc.name, tc.mode, err)
		}
		if took < opTimeout*9/10 {
			t.Errorf("reading %s failed after %v, before the operation timeout of %v", tc.name, took, opTimeout)
		}
	}
	p.set(forward)
	if got := readFile(t, e.path("reset-file")); string(got) != "only in the bucket" {
		t.Errorf("after the outage: %q", got)
	}
}
