package posixtest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A Feature is a call, or a detail of one, that a file system or its client
// may not offer. A Workload that needs it skips where the Env lacks it.
type Feature string

const (
	// SeekDataAndHole: lseek with SEEK_DATA and SEEK_HOLE finds the data
	// and the holes of a sparse file.
	SeekDataAndHole Feature = "lseek SEEK_DATA and SEEK_HOLE"
	// Fallocate: fallocate mode 0 (allocate, growing the file) and
	// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE.
	Fallocate Feature = "fallocate (allocate and punch hole)"
	// FallocateKeepSize: fallocate with FALLOC_FL_KEEP_SIZE alone
	// (allocate past the end without growing the file).
	FallocateKeepSize Feature = "fallocate FALLOC_FL_KEEP_SIZE"
	// RenameFlags: renameat2 with RENAME_NOREPLACE and RENAME_EXCHANGE.
	RenameFlags Feature = "renameat2 RENAME_NOREPLACE and RENAME_EXCHANGE"
	// UserXattrs: extended attributes in the user namespace.
	UserXattrs Feature = "user extended attributes"
	// UnlinkedOpenFileHasNoLinks: a file unlinked while open reports nlink
	// 0 through its descriptor.
	UnlinkedOpenFileHasNoLinks Feature = "nlink 0 for a file unlinked while open"
)

// Env describes the file system under test. The zero Env lacks nothing.
type Env struct {
	// Lacks maps each feature the file system under test does not offer to
	// why, which a skipped workload reports.
	Lacks map[Feature]string
}

// LinuxNFSClient is the Env of a directory mounted by the Linux kernel NFS
// client with NFSv4.minor: what the client itself does not offer, whatever
// the server does.
func LinuxNFSClient(minor int) Env {
	env := Env{Lacks: map[Feature]string{
		RenameFlags: "the Linux NFS client answers EINVAL to any renameat2 flag (nfs_rename); " +
			"NFSv4 has no exchange and no atomic no-replace",
		UnlinkedOpenFileHasNoLinks: "the Linux NFS client renames a file unlinked while open to .nfsXXXX " +
			"(silly rename), so it keeps a link until its last close",
		FallocateKeepSize: "the Linux NFS client answers EOPNOTSUPP to FALLOC_FL_KEEP_SIZE alone: " +
			"NFSv4.2 ALLOCATE grows the file",
	}}
	if minor < 2 {
		why := fmt.Sprintf("NFSv4.%d: ", minor)
		env.Lacks[SeekDataAndHole] = why + "SEEK is an NFSv4.2 operation; before it the Linux client reports the whole file as data"
		env.Lacks[Fallocate] = why + "ALLOCATE and DEALLOCATE are NFSv4.2 operations; before them the Linux client answers EOPNOTSUPP"
		env.Lacks[UserXattrs] = why + "extended attributes over NFS (RFC 8276) need NFSv4.2"
	}
	return env
}

// SkipReason says why w cannot run in env, or "" if it can.
func (env Env) SkipReason(w Workload) string {
	var why []string
	for _, f := range w.Needs {
		if r, ok := env.Lacks[f]; ok {
			why = append(why, fmt.Sprintf("needs %s: %s", f, r))
		}
	}
	return strings.Join(why, "; ")
}

// A Workload is the checks of one rule.
type Workload struct {
	// Name is the rule as a sentence, and the name of the exported func
	// that Run is.
	Name string
	// Needs lists the features the workload uses.
	Needs []Feature
	Run   func(t testing.TB, dir string)
}

// Workloads lists every workload of the package.
var Workloads = []Workload{
	{Name: "ReadsAndWritesAtArbitraryOffsetsKeepEveryByte", Run: ReadsAndWritesAtArbitraryOffsetsKeepEveryByte},
	{Name: "AppendsFromTwoDescriptorsInterleaveWithoutLoss", Run: AppendsFromTwoDescriptorsInterleaveWithoutLoss},
	{Name: "OpenWithTruncEmptiesAnExistingFile", Run: OpenWithTruncEmptiesAnExistingFile},
	{Name: "FtruncateShrinksAndGrowsAndTheGrownPartReadsZeros", Run: FtruncateShrinksAndGrowsAndTheGrownPartReadsZeros},
	{Name: "ASparseFileReadsZerosInItsHole", Run: ASparseFileReadsZerosInItsHole},
	{Name: "SeekDataAndSeekHoleFindTheDataOfASparseFile", Run: SeekDataAndSeekHoleFindTheDataOfASparseFile,
		Needs: []Feature{SeekDataAndHole}},
	{Name: "FallocateGrowsAFileAndPunchesAHole", Run: FallocateGrowsAFileAndPunchesAHole,
		Needs: []Feature{Fallocate}},
	{Name: "FallocateWithKeepSizeLeavesTheSizeAlone", Run: FallocateWithKeepSizeLeavesTheSizeAlone,
		Needs: []Feature{Fallocate, FallocateKeepSize}},
	{Name: "ASharedWritableMappingReachesTheFile", Run: ASharedWritableMappingReachesTheFile},
	{Name: "EveryKindOfNodeCanBeCreated", Run: EveryKindOfNodeCanBeCreated},
	{Name: "HardLinksCountTheirNamesAndShareContent", Run: HardLinksCountTheirNamesAndShareContent},
	{Name: "UnlinkAndRmdirRemoveOnlyWhatTheyMay", Run: UnlinkAndRmdirRemoveOnlyWhatTheyMay},
	{Name: "AFileUnlinkedWhileOpenHasNoLinksLeft", Run: AFileUnlinkedWhileOpenHasNoLinksLeft,
		Needs: []Feature{UnlinkedOpenFileHasNoLinks}},
	{Name: "RenamingAFileOverAnotherReplacesItAtomically", Run: RenamingAFileOverAnotherReplacesItAtomically},
	{Name: "RenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers", Run: RenamingANonEmptyDirectoryKeepsItsChildrenAndInodeNumbers},
	{Name: "Renameat2HonoursNoReplaceAndExchange", Run: Renameat2HonoursNoReplaceAndExchange,
		Needs: []Feature{RenameFlags}},
	{Name: "RenamingADirectoryIntoItsOwnSubtreeFails", Run: RenamingADirectoryIntoItsOwnSubtreeFails},
	{Name: "ANameLongerThan255BytesIsTooLong", Run: ANameLongerThan255BytesIsTooLong},
	{Name: "ChmodChownAndUtimensChangeAttributes", Run: ChmodChownAndUtimensChangeAttributes},
	{Name: "UserExtendedAttributesCanBeSetListedAndRemoved", Run: UserExtendedAttributesCanBeSetListedAndRemoved,
		Needs: []Feature{UserXattrs}},
	{Name: "NewEntriesInASetGroupIDDirectoryInheritItsGroup", Run: NewEntriesInASetGroupIDDirectoryInheritItsGroup},
	{Name: "FlockLocksConflictBetweenOpenFileDescriptions", Run: FlockLocksConflictBetweenOpenFileDescriptions},
	{Name: "FcntlLocksConflictBetweenProcesses", Run: FcntlLocksConflictBetweenProcesses},
	{Name: "PermissionsAreEnforcedForAnUnprivilegedUser", Run: PermissionsAreEnforcedForAnUnprivilegedUser},
}

// Run runs every workload of Workloads in a subtest of its name, each on a
// fresh directory made under dir, and skips, with the reason, those that
// need what env lacks. dir must be searchable by others (every directory
// above it too) for the workloads that act as another user.
func Run(t *testing.T, dir string, env Env) {
	for _, w := range Workloads {
		t.Run(w.Name, func(t *testing.T) {
			if why := env.SkipReason(w); why != "" {
				t.Skip(why)
			}
			sub, err := os.MkdirTemp(dir, w.Name+".")
			if err != nil {
				t.Fatal(err)
			}
			w.Run(t, sub)
		})
	}
}

// requireRoot skips t unless it runs as root, which what needs says why.
func requireRoot(t testing.TB, needs string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("not root (euid %d): %s", os.Geteuid(), needs)
	}
}

func stat(t testing.TB, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// openFile opens path and closes it when t ends.
func openFile(t testing.TB, path string, flag int, perm os.FileMode) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mkdir(t testing.TB, path string, perm os.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, perm); err != nil {
		t.Fatal(err)
	}
}

// patience bounds every wait for another process or for the file system:
// a deadline against hanging, generous for a slow guest, never a claim on
// speed.
const patience = time.Minute

// eventually polls cond until it holds or patience runs out.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
