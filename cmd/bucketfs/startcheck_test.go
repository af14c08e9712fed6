package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/engine"
	"bucketfs/internal/fusetest"
)

// What a new user trips on at the start (issue 22): a start that cannot
// work is refused with one line before anything is mounted.

// startOrRefusal runs cmd (in dir, if set) until it exits or up() says
// it is serving (given the output so far). It returns the output and the
// exit error of a process that ended, or running=true for one that came
// up. At cleanup it is killed, any mount at mnt is ended, and stateDir is
// waited for until no process holds it.
func startOrRefusal(t *testing.T, cmd *exec.Cmd, mnt, stateDir string, up func(out string) bool) (out string, err error, running bool) {
	t.Helper()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
		stopBackgroundMount(t, mnt, stateDir)
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			return buf.String(), err, false
		case <-time.After(20 * time.Millisecond):
		}
		if up(buf.String()) {
			return buf.String(), nil, true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v neither ended nor came up:\n%s", cmd.Args, buf.String())
		}
	}
}

// stopBackgroundMount ends the bucketfs mount at mnt, if there is one,
// and waits until no process holds stateDir (a background process ends
// once unmounted).
func stopBackgroundMount(t *testing.T, mnt, stateDir string) {
	if mnt != "" && fusetest.Mounted(mnt) {
		if err := syscall.Unmount(mnt, 0); err != nil {
			fusetest.Abort(mnt)
			exec.Command("fusermount3", "-u", "-z", mnt).Run()
		}
	}
	f, err := os.Open(filepath.Join(stateDir, "lock"))
	if err != nil {
		return // never locked
	}
	defer f.Close()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			t.Errorf("a bucketfs process still holds %s", stateDir)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oneLine checks that out is one line that contains every part of want.
func oneLine(t *testing.T, what, out string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error\n%s", what, out)
		return
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the message does not say %q:\n%s", what, w, out)
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("%s: %d lines, want one:\n%s", what, strings.Count(out, "\n"), out)
	}
}

// A --metrics-listen address another program holds stops `mount` (in the
// foreground and with --background) and `serve` with one line that names
// the address and its holder, before anything is mounted. It used to
// mount, report success and silently turn off the admin socket, so that
// status, flush and unmount --flush found no bucketfs running.
func TestABusyMetricsAddressStopsTheStartWithOneLineNamingItsHolder(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	holder := fmt.Sprintf("pid %d (", os.Getpid()) // this test holds it
	for _, tc := range []struct {
		name  string
		args  func(p *fsProc) []string
		isNFS bool
	}{
		{"mount", func(p *fsProc) []string {
			return []string{"mount", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr, "--metrics-listen", addr, p.mnt}
		}, false},
		{"mount --background", func(p *fsProc) []string {
			return []string{"mount", "--background", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr, "--metrics-listen", addr, p.mnt}
		}, false},
		{"serve", func(p *fsProc) []string {
			return []string{"serve", "--state-dir", p.stateDir, "--s3-listen", p.s3Addr, "--nfs-listen", freeAddr(t), "--metrics-listen", addr}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFS(t)
			sock := engine.AdminSocket(p.stateDir)
			up := func(out string) bool {
				if tc.isNFS {
					return strings.Contains(out, "serving")
				}
				return fusetest.Mounted(p.mnt)
			}
			out, err, running := startOrRefusal(t, exec.Command(binary, tc.args(p)...), p.mnt, p.stateDir, up)
			if _, serr := os.Stat(sock); running || up(out) {
				if serr != nil {
					out += "(no admin socket)\n"
				}
				flushed, _ := bucketfs("flush", "--state-dir", p.stateDir)
				t.Fatalf("started with --metrics-listen %s held by another program:\n%s\nflush then says: %s", addr, out, flushed)
			}
			oneLine(t, tc.name, out, err, "--metrics-listen "+addr, "in use", holder)
		})
	}
}

// The state directory, a directory inside it, or a directory that holds
// it is refused as the mountpoint with one line, before anything is
// opened or mounted: paths are compared as real paths (relative ones made
// absolute, symlinks resolved, a state directory not made yet by its
// nearest existing parent). Mounted over its own state, bucketfs used to
// log "no space left on device" every 10 s and ignore SIGTERM.
func TestTheStateDirectoryAndTheMountpointMayNotContainEachOther(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"st/meta", "m/sub"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("st", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(t.TempDir(), "mount.bucketfs")
	if err := os.Symlink(binary, helper); err != nil {
		t.Fatal(err)
	}
	s3Addr := freeAddr(t)
	for _, tc := range []struct {
		args []string // run in base; the last is the mountpoint
		want string
	}{
		{[]string{"mount", "--state-dir", "st", "st"}, "is the state directory"},
		{[]string{"mount", "--state-dir", "st", "st/meta"}, "is inside the state directory " + base + "/st"},
		{[]string{"mount", "--state-dir", "st", "link"}, "is the state directory"},
		{[]string{"mount", "--state-dir", "link/", "st/meta"}, "is inside the state directory"},
		{[]string{"mount", "--state-dir", base + "/m/../st", base + "/st/./meta"}, "is inside the state directory"},
		{[]string{"mount", "--state-dir", "m/sub", "m"}, "is inside the mountpoint " + base + "/m"},
		{[]string{"mount", "--state-dir", "m/new/st", "m"}, "is inside the mountpoint"},
		{[]string{"mount", "--state-dir", "link/new", "link"}, "is inside the mountpoint"},
		{[]string{"mount", "--background", "--state-dir", "st", "st"}, "is the state directory"},
		{[]string{"mount.bucketfs", "bucketfs", base + "/st", "-o", "state_dir=" + base + "/st"}, "is the state directory"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			mnt := tc.args[len(tc.args)-1]
			var cmd *exec.Cmd
			if tc.args[0] == "mount.bucketfs" {
				mnt = tc.args[2]
				cmd = exec.Command(helper, append(tc.args[1:], "-o", "s3_listen="+s3Addr)...)
			} else {
				cmd = exec.Command(binary, append([]string{tc.args[0], "--s3-listen", s3Addr}, tc.args[1:]...)...)
			}
			cmd.Dir = base
			if !filepath.IsAbs(mnt) {
				mnt = filepath.Join(base, mnt)
			}
			if real, err := filepath.EvalSymlinks(mnt); err == nil {
				mnt = real
			}
			out, err, running := startOrRefusal(t, cmd, mnt, filepath.Join(base, "st"), func(string) bool { return fusetest.Mounted(mnt) })
			if running || fusetest.Mounted(mnt) {
				t.Fatalf("mounted at %s:\n%s", mnt, out)
			}
			oneLine(t, strings.Join(tc.args, " "), out, err, tc.want)
			for _, made := range []string{"st/lock", "st/s3", "st/new", "m/new", "m/sub/lock"} {
				if _, err := os.Stat(filepath.Join(base, made)); err == nil {
					t.Errorf("the refused start made %s", made)
				}
			}
		})
	}
}
