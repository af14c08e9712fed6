package posixtest_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"bucketfs/internal/posixtest"
)

// TestEveryWorkloadHoldsOnALocalDirectory is the control: the workloads
// check real POSIX rules, so a local file system keeps them all.
func TestEveryWorkloadHoldsOnALocalDirectory(t *testing.T) {
	dir := t.TempDir()
	// The workloads that act as nobody need every directory above theirs
	// searchable; t.TempDir makes its own and its parent 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := posixtest.Env{Lacks: map[posixtest.Feature]string{}}
	if err := unix.Setxattr(dir, "user.probe", []byte("x"), 0); errors.Is(err, syscall.ENOTSUP) {
		env.Lacks[posixtest.UserXattrs] = "the local file system of the temporary directory takes no user " +
			"extended attributes (tmpfs before Linux 6.6)"
	}
	posixtest.Run(t, dir, env)
}

// TestEachWorkloadIsTheFunctionOfItsName: a caller that runs one workload
// by itself calls the function of the workload's name.
func TestEachWorkloadIsTheFunctionOfItsName(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range posixtest.Workloads {
		fn := runtime.FuncForPC(reflect.ValueOf(w.Run).Pointer()).Name()
		if !strings.HasSuffix(fn, "/posixtest."+w.Name) {
			t.Errorf("workload %s runs %s", w.Name, fn)
		}
		if seen[w.Name] {
			t.Errorf("workload %s is listed twice", w.Name)
		}
		seen[w.Name] = true
	}
}

// TestTheLinuxNFSClientSkipsWhatItLacksWithTheReason: a workload that needs
// what the client lacks is skipped, and says why; one that needs nothing
// runs.
func TestTheLinuxNFSClientSkipsWhatItLacksWithTheReason(t *testing.T) {
	byName := map[string]posixtest.Workload{}
	for _, w := range posixtest.Workloads {
		byName[w.Name] = w
	}
	for _, tc := range []struct {
		minor    int
		workload string
		want     string // in the reason; "" if it runs
	}{
		{2, "Renameat2HonoursNoReplaceAndExchange", "EINVAL"},
		{2, "AFileUnlinkedWhileOpenHasNoLinksLeft", "silly rename"},
		{2, "FallocateWithKeepSizeLeavesTheSizeAlone", "FALLOC_FL_KEEP_SIZE"},
		{2, "FallocateGrowsAFileAndPunchesAHole", ""},
		{2, "SeekDataAndSeekHoleFindTheDataOfASparseFile", ""},
		{2, "UserExtendedAttributesCanBeSetListedAndRemoved", ""},
		{1, "SeekDataAndSeekHoleFindTheDataOfASparseFile", "NFSv4.1"},
		{0, "FallocateGrowsAFileAndPunchesAHole", "NFSv4.0"},
		{1, "UserExtendedAttributesCanBeSetListedAndRemoved", "RFC 8276"},
		{0, "UnlinkAndRmdirRemoveOnlyWhatTheyMay", ""},
	} {
		w, ok := byName[tc.workload]
		if !ok {
			t.Fatalf("no workload %s", tc.workload)
		}
		why := posixtest.LinuxNFSClient(tc.minor).SkipReason(w)
		if (why == "") != (tc.want == "") || !strings.Contains(why, tc.want) {
			t.Errorf("NFSv4.%d, %s: skip reason %q, want one with %q", tc.minor, tc.workload, why, tc.want)
		}
	}
	if why := (posixtest.Env{}).SkipReason(byName["Renameat2HonoursNoReplaceAndExchange"]); why != "" {
		t.Errorf("the zero Env skips a workload: %q", why)
	}
}
