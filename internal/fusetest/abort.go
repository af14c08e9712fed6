// Package fusetest holds what tests that kill a FUSE server need.
package fusetest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Abort aborts the kernel's connection to the FUSE server of the mount at
// mnt, if it is mounted. A FUSE server killed with SIGKILL can hang in its
// exit (a zombie whose last thread waits in fuse_flush): closing a file of
// its own mount that it had open sends a flush to the server that just
// died, and nobody answers. A lazy unmount does not fail that request;
// aborting the connection does. Needs root (it mounts fusectl if needed).
func Abort(mnt string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != mnt {
			continue
		}
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
			}
		}
		if sep < 0 || sep+1 >= len(f) || !strings.HasPrefix(f[sep+1], "fuse") {
			continue
		}
		_, minor, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		const dir = "/sys/fs/fuse/connections"
		if _, err := os.Stat(dir + "/" + minor); err != nil {
			if out, err := exec.Command("mount", "-t", "fusectl", "fusectl", dir).CombinedOutput(); err != nil {
				return fmt.Errorf("mount fusectl: %v: %s", err, out)
			}
		}
		return os.WriteFile(dir+"/"+minor+"/abort", []byte("1"), 0)
	}
	return nil
}

// Mounted reports whether a FUSE file system is mounted at dir.
func Mounted(dir string) bool {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == dir && strings.HasPrefix(f[2], "fuse") {
			return true
		}
	}
	return false
}
