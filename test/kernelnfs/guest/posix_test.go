//go:build kernelnfs

package guest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bucketfs/internal/posixtest"
)

// TestThePOSIXWorkloadsHoldThroughTheKernelClient runs the POSIX
// conformance workloads that the FUSE tests run (internal/posixtest) on a
// server that trusts the client's root (--root-squash=false), at each
// minor version, through the Linux client. What the client itself does
// not offer at a version (posixtest.LinuxNFSClient) is skipped with its
// reason; everything else must hold as it does on FUSE.
func TestThePOSIXWorkloadsHoldThroughTheKernelClient(t *testing.T) {
	port := os.Getenv(envTrustedPort)
	if port == "" {
		t.Skip("no trusted server")
	}
	for _, vers := range []string{"4.0", "4.1", "4.2"} {
		t.Run("v"+vers, func(t *testing.T) {
			minor, _ := strconv.Atoi(strings.TrimPrefix(vers, "4."))
			if err := syncClock(); err != nil {
				t.Fatalf("setting the clock by the host's: %v", err)
			}
			mnt := "/mnt/trusted-v" + vers
			mountNFS(t, port, mnt, mountSpec{vers: vers})
			dir := filepath.Join(mnt, "posix-v"+vers)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.Run(t, dir, posixtest.LinuxNFSClient(minor))
		})
	}
}
