package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// A running mount says where it is mounted in two places: STATE_DIR/
// mountpoint (so `flush PATH` can check that PATH is on this mount), and
// an entry in the mount registry naming its state directory (so `status`,
// `flush` and `unmount` given a path find the mount's state directory
// without --state-dir). Both go when the mount ends; an entry left by a
// killed process names a mount that is gone, which the lookups notice.

const mountFile = "mountpoint"

// registryDir holds one file per running mount: /run/bucketfs/mounts for
// root, $XDG_RUNTIME_DIR/bucketfs/mounts (or a per-user directory under
// the temporary directory) for others.
func registryDir() string {
	if os.Geteuid() == 0 {
		return "/run/bucketfs/mounts"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "bucketfs", "mounts")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("bucketfs-%d", os.Geteuid()), "mounts")
}

func registryEntry(mnt string) string {
	sum := sha256.Sum256([]byte(mnt))
	return filepath.Join(registryDir(), hex.EncodeToString(sum[:12]))
}

// recordMount notes that the file system of stateDir is mounted at mnt.
func recordMount(stateDir, mnt string) error {
	if err := os.WriteFile(filepath.Join(stateDir, mountFile), []byte(mnt+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.MkdirAll(registryDir(), 0o700); err != nil {
		return err
	}
	return os.WriteFile(registryEntry(mnt), []byte(stateDir+"\n"), 0o600)
}

// forgetMount removes what recordMount wrote.
func forgetMount(stateDir, mnt string) {
	os.Remove(filepath.Join(stateDir, mountFile))
	if b, err := os.ReadFile(registryEntry(mnt)); err == nil && strings.TrimSpace(string(b)) == stateDir {
		os.Remove(registryEntry(mnt))
	}
}

// mountedAt is the mountpoint the running mount of stateDir recorded, "" if
// none.
func mountedAt(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, mountFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dir, fstype, source string
	dev                 string // MAJOR:MINOR of the file system
}

// mounts reads /proc/self/mountinfo.
func mounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out = append(out, mountEntry{dir: unescapeMount(fields[4]), fstype: fields[sep+1], source: unescapeMount(fields[sep+2]), dev: fields[2]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

const fuseType = "fuse.bucketfs"

// mountOf is the bucketfs mount that path is on (the longest mountpoint
// that contains it), "" if path is on none.
func mountOf(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	ms, _ := mounts()
	best := ""
	for _, m := range ms {
		if m.fstype != fuseType {
			continue
		}
		if (abs == m.dir || strings.HasPrefix(abs, strings.TrimSuffix(m.dir, "/")+"/")) && len(m.dir) > len(best) {
			best = m.dir
		}
	}
	return best
}

// stateDirOfPath finds the state directory of the bucketfs mount path is
// on.
func stateDirOfPath(path string) (stateDir, mnt string, err error) {
	mnt = mountOf(path)
	if mnt == "" {
		return "", "", fmt.Errorf("%s is not on a bucketfs mount", path)
	}
	b, err := os.ReadFile(registryEntry(mnt))
	if err != nil {
		return "", mnt, fmt.Errorf("%s is a bucketfs mount of another user or an earlier version: give --state-dir", mnt)
	}
	return strings.TrimSpace(string(b)), mnt, nil
}

// onMount checks that path is on the mount at mnt (same device), so that
// an inode number taken from it means a file of that mount.
func onMount(path, mnt string) error {
	var p, m syscall.Stat_t
	if err := syscall.Stat(path, &p); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := syscall.Stat(mnt, &m); err != nil {
		return fmt.Errorf("%s: %w", mnt, err)
	}
	if p.Dev != m.Dev {
		return fmt.Errorf("%s is not on the bucketfs mount at %s", path, mnt)
	}
	return nil
}

// holders lists the processes that use something under mnt (working
// directory, root, open files), as "PID (NAME)".
func holders(mnt string) []string {
	under := func(p string) bool { return p == mnt || strings.HasPrefix(p, mnt+"/") }
	return processesUsing(false, []string{"cwd", "root"}, under)
}

// processesUsing lists, as "PID (NAME)" and sorted, the processes with a
// link among links (of /proc/PID: cwd, root) or an open file whose target
// match accepts; this process too only with self.
func processesUsing(self bool, links []string, match func(target string) bool) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, proc := range procs {
		pid := filepath.Base(proc)
		if pid == me && !self {
			continue
		}
		if uses(proc, links, match) {
			name, _ := os.ReadFile(filepath.Join(proc, "comm"))
			out = append(out, fmt.Sprintf("%s (%s)", pid, strings.TrimSpace(string(name))))
		}
	}
	sort.Strings(out)
	return out
}

// uses tells whether the process at proc (/proc/PID) has a link among
// links or an open file whose target match accepts.
func uses(proc string, links []string, match func(target string) bool) bool {
	for _, link := range links {
		if t, err := os.Readlink(filepath.Join(proc, link)); err == nil && match(t) {
			return true
		}
	}
	fds, _ := os.ReadDir(filepath.Join(proc, "fd"))
	for _, fd := range fds {
		if t, err := os.Readlink(filepath.Join(proc, "fd", fd.Name())); err == nil && match(t) {
			return true
		}
	}
	return false
}

// unmountDir unmounts a FUSE mount: directly as root, through fusermount3
// otherwise. lazy detaches it even while in use.
func unmountDir(mnt string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = syscall.MNT_DETACH
		}
		if err := syscall.Unmount(mnt, flags); err != nil {
			return fmt.Errorf("unmount %s: %w", mnt, err)
		}
		return nil
	}
	args := []string{"-u", mnt}
	if lazy {
		args = []string{"-u", "-z", mnt}
	}
	out, err := exec.Command("fusermount3", args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "busy") {
			return fmt.Errorf("unmount %s: %w", mnt, syscall.EBUSY)
		}
		return fmt.Errorf("unmount %s: %s", mnt, msg)
	}
	return nil
}

// clearDeadMount handles a mountpoint whose FUSE server is gone
// ("transport endpoint is not connected"): a dead bucketfs mount is
// detached, so that a new mount can take its place; anything else is an
// error that says what to run.
func clearDeadMount(mnt string) (cleared bool, err error) {
	// statfs always asks the server (a stat may be answered from the
	// kernel's attribute cache, even after the server died).
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		return false, nil
	}
	ms, _ := mounts()
	for _, m := range ms {
		if m.dir == mnt && m.fstype == fuseType {
			if err := unmountDir(mnt, true); err != nil {
				return false, fmt.Errorf("%s is a dead bucketfs mount and could not be cleared (%v): run fusermount3 -u -z %s", mnt, err, mnt)
			}
			return true, nil
		}
	}
	return false, fmt.Errorf("%s is a dead FUSE mount of another program: run fusermount3 -u -z %s first", mnt, mnt)
}
