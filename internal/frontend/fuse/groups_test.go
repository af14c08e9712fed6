package fuse_test

// Supplementary groups through a real FUSE mount: the kernel does not pass
// them, so the mount reads them from /proc for each caller.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// member is uid 2000 (group 2000) with supplementary group 3000; outsider
// is uid 2001 (group 2001) with supplementary group 4000.
var (
	member   = syscall.Credential{Uid: 2000, Gid: 2000, Groups: []uint32{3000}}
	outsider = syscall.Credential{Uid: 2001, Gid: 2001, Groups: []uint32{4000}}
)

// runAs runs a command as who and returns its combined output and error.
func runAs(who syscall.Credential, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &who}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// openMount lets other users reach the mount's root.
func openMount(t *testing.T, e *env) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(e.mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string, uid, gid int, mode os.FileMode) {
	t.Helper()
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(path, uint32(mode)); err != nil {
		t.Fatal(err)
	}
}

// TestAnOwnerMayChgrpToASupplementaryGroupButNotToAnother: the owner of a
// file changes its group to one of their supplementary groups; a group
// they are not in is refused with EPERM. A set-group-id bit the owner sets
// on a file of their supplementary group stays.
func TestAnOwnerMayChgrpToASupplementaryGroupButNotToAnother(t *testing.T) {
	e := newEnv(t)
	openMount(t, e)
	f := e.path("f")
	writeFile(t, f, []byte("x"))
	chown(t, f, 2000, 2000, 0o644)

	if out, err := runAs(member, "/bin/chgrp", "3000", f); err != nil {
		t.Fatalf("chgrp to a supplementary group by the owner: %v %q", err, out)
	}
	if st := stat(t, f); st.Gid != 3000 {
		t.Fatalf("gid %d after chgrp 3000, want 3000", st.Gid)
	}
	out, err := runAs(member, "/bin/chgrp", "4000", f)
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Fatalf("chgrp to a group the owner is not in: %v %q; want operation not permitted", err, out)
	}
	if st := stat(t, f); st.Gid != 3000 {
		t.Fatalf("gid %d after a refused chgrp 4000, want 3000", st.Gid)
	}
	if out, err := runAs(member, "/bin/chmod", "2755", f); err != nil {
		t.Fatalf("chmod 2755 by the owner: %v %q", err, out)
	}
	if st := stat(t, f); st.Mode&0o7777 != 0o2755 {
		t.Fatalf("mode %o after chmod 2755 by an owner in the file's group, want 2755", st.Mode&0o7777)
	}
}

// TestASupplementaryGroupGrantsTheGroupsPermissions: a file and a
// directory of group 3000 are open to a member of 3000 through the group
// bits, and closed to someone who is not.
func TestASupplementaryGroupGrantsTheGroupsPermissions(t *testing.T) {
	e := newEnv(t)
	openMount(t, e)
	shared, team := e.path("shared"), e.path("team")
	writeFile(t, shared, []byte("team\n"))
	chown(t, shared, 0, 3000, 0o640)
	if err := os.Mkdir(team, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, team, 0, 3000, 0o770)

	out, err := runAs(member, "/bin/cat", shared)
	if err != nil || out != "team\n" {
		t.Fatalf("cat of a 0640 root:3000 file by a member of 3000: %v %q", err, out)
	}
	out, err = runAs(outsider, "/bin/cat", shared)
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("cat of a 0640 root:3000 file by someone not in 3000: %v %q; want permission denied", err, out)
	}
	if out, err := runAs(member, "/usr/bin/touch", team+"/new"); err != nil {
		t.Fatalf("create in a 0770 root:3000 directory by a member of 3000: %v %q", err, out)
	}
	if st := stat(t, team+"/new"); st.Uid != 2000 || st.Gid != 2000 {
		t.Fatalf("file created by 2000:2000 is owned by %d:%d", st.Uid, st.Gid)
	}
	out, err = runAs(outsider, "/usr/bin/touch", team+"/other")
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("create in a 0770 root:3000 directory by someone not in 3000: %v %q; want permission denied", err, out)
	}
}
