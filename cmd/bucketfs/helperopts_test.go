package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/fusetest"
)

// What the mount helper lets through (issue 22, item 8).

// The mount helper refuses a path option that is not absolute: mount(8)
// and fstab have no working directory to resolve it against, and the
// helper would have used its caller's.
func TestTheMountHelperRefusesRelativePaths(t *testing.T) {
	for _, opt := range []string{"state_dir=st", "tls_cert=server.pem", "tls_key=./server.key"} {
		_, err := helperArgs([]string{"bucketfs", "/mnt/b", "-o", "_netdev," + opt})
		if err == nil || !strings.Contains(err.Error(), opt) || !strings.Contains(err.Error(), "absolute path") {
			t.Errorf("helper option %s: %v, want it refused as not absolute", opt, err)
		}
	}
	p := newFS(t)
	helper := filepath.Join(t.TempDir(), "mount.bucketfs")
	if err := os.Symlink(binary, helper); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helper, "bucketfs", p.mnt, "-o", "state_dir=st,s3_listen="+p.s3Addr)
	cmd.Dir = p.stateDir
	out, err, running := startOrRefusal(t, cmd, p.mnt, p.stateDir, func(string) bool { return fusetest.Mounted(p.mnt) })
	if running || fusetest.Mounted(p.mnt) {
		t.Fatalf("mounted with state_dir=st:\n%s", out)
	}
	oneLine(t, "mount.bucketfs -o state_dir=st", out, err, "state_dir=st", "absolute path")
}

// bucketfs never updates an access time when a file is read (the kernel
// leaves atime to a FUSE server, and bucketfs changes it only when asked
// to, by utimes): every mount is noatime, and says so in /proc/mounts.
// The helper accepts noatime and nodiratime and refuses the options that
// ask for access-time updates, which it used to accept and drop.
func TestEveryMountIsNoatimeAndTheHelperRefusesAtimeUpdates(t *testing.T) {
	for _, opt := range []string{"atime", "relatime", "strictatime", "diratime"} {
		_, err := helperArgs([]string{"bucketfs", "/mnt/b", "-o", "rw," + opt})
		if err == nil || !strings.Contains(err.Error(), opt) || !strings.Contains(err.Error(), "noatime") {
			t.Errorf("helper option %s: %v, want it refused, pointing to noatime", opt, err)
		}
	}
	helper := filepath.Join(t.TempDir(), "mount.bucketfs")
	if err := os.Symlink(binary, helper); err != nil {
		t.Fatal(err)
	}
	p := newFS(t)
	out, err, _ := startOrRefusal(t, exec.Command(helper, "bucketfs", p.mnt, "-o",
		"noatime,nodiratime,state_dir="+p.stateDir+",s3_listen="+p.s3Addr), p.mnt, p.stateDir, func(string) bool { return false })
	if err != nil || !fusetest.Mounted(p.mnt) {
		t.Fatalf("mount.bucketfs -o noatime,nodiratime: %v\n%s", err, out)
	}
	opts := mountOptionsOf(t, p.mnt)
	if !slices.Contains(opts, "noatime") {
		t.Errorf("the mount's options %q lack noatime", opts)
	}
	file := filepath.Join(p.mnt, "read.txt")
	if err := os.WriteFile(file, []byte("read me"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "read me" {
		t.Fatalf("read: %q %v", b, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(old) {
		t.Errorf("a read moved the access time from %v to %v", old, got)
	}
}

// mountOptionsOf is the option list /proc/self/mountinfo shows for the
// mount at dir.
func mountOptionsOf(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == dir {
			return strings.Split(f[5], ",")
		}
	}
	t.Fatalf("%s is not mounted", dir)
	return nil
}

// A background start (--background, and the mount helper mount(8) runs)
// over a non-empty directory says so on its caller's terminal, not only
// in the log.
func TestABackgroundStartOverANonEmptyDirectoryNotesItOnTheTerminal(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "mount.bucketfs")
	if err := os.Symlink(binary, helper); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"mount --background", "mount.bucketfs"} {
		t.Run(how, func(t *testing.T) {
			p := newFS(t)
			if err := os.WriteFile(filepath.Join(p.mnt, "hidden.txt"), []byte("under the mount"), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, "mount", "--background", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr, p.mnt)
			if how == "mount.bucketfs" {
				cmd = exec.Command(helper, "bucketfs", p.mnt, "-o", "state_dir="+p.stateDir+",s3_listen="+p.s3Addr)
			}
			out, err, _ := startOrRefusal(t, cmd, p.mnt, p.stateDir, func(string) bool { return false })
			if err != nil || !fusetest.Mounted(p.mnt) {
				t.Fatalf("%s: %v\n%s", how, err, out)
			}
			if !strings.Contains(out, p.mnt+" is not empty; its 1 entry is hidden") {
				t.Errorf("%s over a non-empty directory said nothing to its caller:\n%s", how, out)
			}
		})
	}
}
