// Package posixtest holds the POSIX rules a bucketfs mount must keep, written
// as workloads against a directory rather than against a mount, so that the
// same checks run through FUSE (internal/frontend/fuse), through the Linux
// kernel NFS client in the kernelnfs guest, and on a plain local directory
// as a control: the rules are real POSIX, and a local file system keeps
// them.
//
// A workload only uses the path it is given and system calls: it knows
// nothing of buckets, engines or the protocol underneath. Each is an
// exported func(t testing.TB, dir string) named after the rule it checks,
// and Workloads lists them all; Run runs the list on fresh subdirectories.
// A workload owns dir: it may create, remove and chmod anything in it and
// change dir's own mode, and leaves it in any state.
//
// Not every client offers every call. A Workload names the Features it
// needs, and an Env says which ones the file system under test lacks and
// why (LinuxNFSClient knows the Linux NFS client's), so that a run skips
// what is missing with its reason instead of failing. Where a client
// differs from a local file system in one detail of a rule (the Linux NFS
// client renames an open file it unlinks instead of dropping its last
// link), that detail is a workload of its own, so the rest of the rule
// still runs there.
//
// Some checks need a second process: fcntl locks belong to a process, and
// permissions are checked as another user. A workload re-executes its own
// binary (os.Executable) as that process: the package's init function
// recognises the child by an environment variable, does the child's part
// and exits before any test machinery runs. So any binary that links this
// package, a go test binary or the guest's static one, is its own helper;
// nothing needs to be set up for it. The workloads that act as another user
// or give files to other owners need root and skip without it.
//
// Nothing here sleeps to synchronise: a workload waits for the other
// process by reading what it says, and polls with a generous deadline only
// for what the file system does on its own time (a lock released by a dead
// process). No workload asserts speed.
package posixtest
