//go:build kernelnfs

// Package guest holds the tests that run inside the kernelnfs guest, a Linux
// 6.1 machine under QEMU whose kernel NFS client mounts `bucketfs serve`
// running on the host (see test/kernelnfs). This test binary is the guest's
// /init; the host builds it, boots it and reads what it reports.
package guest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The guest learns its job from the kernel command line (parameters the
// kernel does not know reach init as environment variables).
const (
	envDefaultPort = "KN_DEFAULT_PORT" // port of a serve run with default flags
	envTrustedPort = "KN_TRUSTED_PORT" // port of a serve run with --root-squash=false
	envMounts      = "KN_MOUNTS"       // the mounts to make (mountSpecs)
	envUserDir     = "KN_USER_DIR"     // set in the child that works as the unprivileged user
	envRun         = "KN_RUN"          // a -test.run pattern: only these tests (kernelnfs -kernelnfs.run)
)

// The unprivileged user the smoke workload runs as: the owner of the
// default server's root (serve --uid/--gid), with a second group.
const (
	userUID    = 1000
	userGID    = 1000
	otherGroup = 1001
	nobody     = 65534
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(envUserDir) != "":
		// The unprivileged child (userSide): only TestAsTheUnprivilegedUser runs.
		os.Exit(m.Run())
	case os.Getpid() != 1:
		fmt.Println("skipped: these tests run as the init of the kernelnfs guest (go test -tags kernelnfs ./test/kernelnfs)")
		os.Exit(0)
	}
	code := 1
	err := setUp()
	if err == nil && os.Getenv(envControlPort) != "" {
		err = syncClock()
	}
	if err != nil {
		fmt.Printf("KERNELNFS-SETUP-FAILED %v\n", err)
	} else {
		flag.Set("test.v", "true")
		if run := os.Getenv(envRun); run != "" {
			flag.Set("test.run", run)
		}
		code = m.Run()
	}
	fmt.Printf("KERNELNFS-EXIT %d\n", code)
	powerOff()
}

// A mountSpec is one way the smoke workload mounts a server: an NFS minor
// version and extra mount options. KN_MOUNTS lists them as
// VERS or VERS:OPTION:OPTION..., separated by spaces turned into '/'
// (the kernel command line splits on spaces).
type mountSpec struct {
	vers string
	opts []string
}

func (s mountSpec) name() string {
	return strings.Join(append([]string{"v" + s.vers}, s.opts...), "-")
}

func mountSpecs(t *testing.T) []mountSpec {
	var specs []mountSpec
	for _, f := range strings.Split(os.Getenv(envMounts), "/") {
		if f == "" {
			continue
		}
		parts := strings.Split(f, ":")
		specs = append(specs, mountSpec{vers: parts[0], opts: parts[1:]})
	}
	if len(specs) == 0 {
		t.Fatalf("%s names no mounts", envMounts)
	}
	return specs
}

// mountNFS mounts the server on port at dir, the way mount.nfs4 does it:
// text options, the server and client addresses given (the kernel resolves
// no names).
func mountNFS(t *testing.T, port, dir string, s mountSpec) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append([]string{"vers=" + s.vers, "addr=" + serverAddr, "clientaddr=" + guestAddr, "port=" + port}, s.opts...)
	if err := unix.Mount(serverAddr+":/", dir, "nfs4", 0, strings.Join(opts, ",")); err != nil {
		t.Fatalf("mount -t nfs4 -o %s %s:/ %s: %v", strings.Join(opts, ","), serverAddr, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	// The kernel says what it mounted: the version asked for, not one it
	// fell back to, with the options given.
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != dir {
			continue
		}
		got := "," + f[3] + ","
		for _, o := range append([]string{"vers=" + s.vers}, s.opts...) {
			if !strings.Contains(got, ","+o+",") && !strings.Contains(got, ","+o+"=") {
				t.Errorf("%s is mounted with %s, not %s", dir, f[3], o)
			}
		}
		return
	}
	t.Fatalf("%s is not in /proc/mounts", dir)
}

func unmountNFS(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatalf("umount %s: %v", dir, err)
	}
}

// dropCaches makes the next read of every file come from the server.
func dropCaches(t *testing.T) {
	t.Helper()
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		t.Fatal(err)
	}
}

// content is the recognisable bytes of a file: the same name and size
// give the same bytes on both sides, so the host can check the bucket.
func content(name string, size int) []byte {
	seed := sha256.Sum256([]byte(name))
	var key [32]byte
	copy(key[:], seed[:])
	b := make([]byte, size)
	rand.NewChaCha8(key).Read(b)
	return b
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// An Expectation is what the host must find in the bucket once the server
// has exported everything: an object with these bytes and attributes, or
// no object at all. Keys are paths below the mount's root.
type Expectation struct {
	Server string // "default", "trusted" or "shared" (the two servers of one file system)
	Key    string
	Absent bool   `json:",omitempty"`
	Size   int    `json:",omitempty"`
	SHA256 string `json:",omitempty"`
	Mode   uint32 `json:",omitempty"` // permission bits
	UID    uint32 `json:",omitempty"`
	GID    uint32 `json:",omitempty"`
}

var reportMu sync.Mutex

// expect tells the host what the bucket must hold. It goes to the second
// serial port, which carries nothing else.
func expect(t *testing.T, e Expectation) {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile("/dev/ttyS1", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "KERNELNFS-EXPECT %s\n", b); err != nil {
		t.Fatal(err)
	}
}

func stat(t *testing.T, path string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return &st
}

func readBack(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes (sha256 %s), want %d (%s)", path, len(got), digest(got), len(want), digest(want))
	}
}

// TestTheDefaultServerMountsAtEveryVersionAndKeepsWhatItsUsersWrite mounts
// a `bucketfs serve` run with default flags (root squashed, AUTH_NONE
// refused but for the NULL ping) at each version and mount option set,
// works on it as an unprivileged user, checks what root may do there, and
// remounts to see that the data stayed. The host then checks the bucket
// against what the guest expects.
func TestTheDefaultServerMountsAtEveryVersionAndKeepsWhatItsUsersWrite(t *testing.T) {
	port := os.Getenv(envDefaultPort)
	if port == "" {
		t.Skip("no default server")
	}
	for _, s := range mountSpecs(t) {
		t.Run(s.name(), func(t *testing.T) {
			mnt := "/mnt/default-" + s.name()
			mountNFS(t, port, mnt, s)
			work := filepath.Join(mnt, s.name())
			userSide(t, work)

			// What the user wrote reads back from the server, not the
			// client's cache.
			dropCaches(t)
			readBack(t, filepath.Join(work, "big"), content("big", bigSize))
			readBack(t, filepath.Join(work, "hello"), helloText(s))

			// Root is squashed to nobody: it may create where everyone may
			// (the files are nobody's), not where only the owner may.
			shared := filepath.Join(work, "shared", "by-root")
			if err := os.WriteFile(shared, []byte("root was here\n"), 0o644); err != nil {
				t.Fatalf("root writing into a 0777 directory: %v", err)
			}
			if st := stat(t, shared); st.Uid != nobody || st.Gid != nobody {
				t.Errorf("a file root made belongs to %d:%d, want nobody (%d)", st.Uid, st.Gid, nobody)
			}
			expect(t, Expectation{Server: "default", Key: s.name() + "/shared/by-root", Size: 14,
				SHA256: digest([]byte("root was here\n")), Mode: 0o644, UID: nobody, GID: nobody})
			err := os.WriteFile(filepath.Join(work, "root-here"), nil, 0o644)
			if !errors.Is(err, unix.EACCES) {
				t.Errorf("root creating in the user's 0755 directory: %v, want EACCES (root squash)", err)
			}

			// A remount finds everything where it was.
			unmountNFS(t, mnt)
			mountNFS(t, port, mnt, s)
			readBack(t, filepath.Join(work, "hello"), helloText(s))
			names, err := os.ReadDir(filepath.Join(work, "many"))
			if err != nil || len(names) != manyFiles {
				t.Errorf("after a remount, many/ holds %d entries (%v), want %d", len(names), err, manyFiles)
			}
			unmountNFS(t, mnt)
		})
	}
}

const (
	bigSize   = 8<<20 + 12345
	manyFiles = 100
)

func helloText(s mountSpec) []byte {
	return []byte("hello from the Linux NFS client, " + s.name() + "\nand a line appended\n")
}

// userSide runs TestAsTheUnprivilegedUser in a child process with the
// user's uid, gid and groups, on dir (which it creates).
func userSide(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAsTheUnprivilegedUser$", "-test.v")
	cmd.Env = append(os.Environ(), envUserDir+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: userUID, Gid: userGID, Groups: []uint32{userGID, otherGroup}}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", userUID, out)
	if err != nil {
		t.Fatalf("the unprivileged user's workload failed: %v", err)
	}
}

// TestAsTheUnprivilegedUser is the smoke workload: what a user does with
// files, through the kernel client, with each result checked at once and
// the end state announced to the host for the bucket check.
func TestAsTheUnprivilegedUser(t *testing.T) {
	dir := os.Getenv(envUserDir)
	if dir == "" {
		t.Skip("runs in the child userSide starts")
	}
	name := filepath.Base(dir)
	exp := func(rel string, data []byte, mode uint32, gid uint32) {
		expect(t, Expectation{Server: "default", Key: name + "/" + rel, Size: len(data), SHA256: digest(data),
			Mode: mode, UID: userUID, GID: gid})
	}
	gone := func(rel string) { expect(t, Expectation{Server: "default", Key: name + "/" + rel, Absent: true}) }
	path := func(rel string) string { return filepath.Join(dir, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(dir, 0o755))

	// Create, write, read, append.
	first := []byte("hello from the Linux NFS client, " + name + "\n")
	must(os.WriteFile(path("hello"), first, 0o644))
	f, err := os.OpenFile(path("hello"), os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	_, err = f.WriteString("and a line appended\n")
	must(err)
	must(f.Close())
	whole := append(first, "and a line appended\n"...)
	readBack(t, path("hello"), whole)
	exp("hello", whole, 0o644, userGID)

	// A large file, written in one go and fsynced.
	big := content("big", bigSize)
	f, err = os.Create(path("big"))
	must(err)
	_, err = f.Write(big)
	must(err)
	must(f.Sync())
	must(f.Close())
	exp("big", big, 0o644, userGID)

	// Rename, hard link, symlink.
	moved := content("moved", 3000)
	must(os.WriteFile(path("before"), moved, 0o644))
	must(os.Rename(path("before"), path("after")))
	if _, err := os.Stat(path("before")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old name after a rename: %v", err)
	}
	must(os.Link(path("after"), path("link")))
	if st := stat(t, path("after")); st.Nlink != 2 {
		t.Errorf("a file with two names has nlink %d", st.Nlink)
	}
	readBack(t, path("link"), moved)
	must(os.Symlink("after", path("symlink")))
	if target, err := os.Readlink(path("symlink")); err != nil || target != "after" {
		t.Errorf("readlink: %q, %v", target, err)
	}
	readBack(t, path("symlink"), moved)
	exp("after", moved, 0o644, userGID)
	exp("link", moved, 0o644, userGID)
	gone("before")

	// chmod, chgrp to a group the user is in, truncate down and up,
	// utimes.
	attrs := content("attrs", 5000)
	must(os.WriteFile(path("attrs"), attrs, 0o644))
	must(os.Chmod(path("attrs"), 0o640))
	must(os.Chown(path("attrs"), -1, otherGroup))
	must(os.Truncate(path("attrs"), 100))
	must(os.Truncate(path("attrs"), 6000))
	want := append(append([]byte{}, attrs[:100]...), make([]byte, 5900)...)
	readBack(t, path("attrs"), want)
	must(unix.Utimes(path("attrs"), []unix.Timeval{{Sec: 981173106}, {Sec: 981173106}}))
	st := stat(t, path("attrs"))
	if st.Mode&0o7777 != 0o640 || st.Gid != otherGroup || st.Size != 6000 || st.Mtim.Sec != 981173106 {
		t.Errorf("attrs: mode %o gid %d size %d mtime %d", st.Mode&0o7777, st.Gid, st.Size, st.Mtim.Sec)
	}
	exp("attrs", want, 0o640, otherGroup)

	// A fifo, a directory of many small files, unlink, rmdir.
	must(unix.Mkfifo(path("fifo"), 0o600))
	if st := stat(t, path("fifo")); st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("mkfifo made mode %o", st.Mode)
	}
	must(os.Mkdir(path("many"), 0o755))
	for i := range manyFiles {
		rel := fmt.Sprintf("many/%03d", i)
		must(os.WriteFile(path(rel), content(rel, 100+i), 0o644))
	}
	for _, i := range []int{0, manyFiles / 2, manyFiles - 1} {
		rel := fmt.Sprintf("many/%03d", i)
		readBack(t, path(rel), content(rel, 100+i))
		exp(rel, content(rel, 100+i), 0o644, userGID)
	}
	must(os.WriteFile(path("doomed"), []byte("short-lived\n"), 0o644))
	must(os.Remove(path("doomed")))
	gone("doomed")
	must(os.Mkdir(path("emptied"), 0o755))
	must(os.Remove(path("emptied")))
	gone("emptied/")
	if err := os.Remove(path("many")); !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		t.Errorf("rmdir of a directory with files: %v, want ENOTEMPTY", err)
	}

	// A directory everyone may write in, for root's turn.
	must(os.Mkdir(path("shared"), 0o777))
	must(os.Chmod(path("shared"), 0o777))
}
