package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/engine"
	"bucketfs/internal/fusetest"
)

func TestHelperArgumentsBecomeMountFlags(t *testing.T) {
	got, err := helperArgs([]string{"s3://data/team", "/mnt/data", "-o",
		"rw,_netdev,noatime,x-systemd.automount,state_dir=/var/lib/bucketfs,export_delay=30s,ro", "-n", "-v"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"mount", "--background", "--bucket", "s3://data/team", "--state-dir", "/var/lib/bucketfs",
		"--export-delay", "30s", "--read-only", "/mnt/data"}
	if !slices.Equal(got, want) {
		t.Errorf("helper args\n got %q\nwant %q", got, want)
	}
	for _, src := range []string{"bucketfs", "embedded", "none", "/usr/local/bin/bucketfs"} {
		if got, _ := helperArgs([]string{src, "/mnt/b"}); !slices.Equal(got, []string{"mount", "--background", "/mnt/b"}) {
			t.Errorf("embedded source %q: %q", src, got)
		}
	}
	for _, bad := range [][]string{{"/mnt/only"}, {"ftp://x", "/mnt"}, {"bucketfs", "/mnt", "-o"}} {
		if _, err := helperArgs(bad); err == nil {
			t.Errorf("helper args %q: no error", bad)
		}
	}
}

// `mount -t bucketfs SOURCE DIR -o OPTIONS` runs mount.bucketfs (a
// symlink to the binary) like this; it returns once the file system is
// mounted, leaving bucketfs in the background, and `umount DIR` stops it
// cleanly (issue 13). mount(8) itself looks for helpers only in /sbin,
// which a test does not change: the helper is called as mount(8) would.
func TestTheMountHelperMountsInTheBackgroundAndUmountStopsIt(t *testing.T) {
	dir := t.TempDir()
	helper := filepath.Join(dir, "mount.bucketfs")
	if err := os.Symlink(binary, helper); err != nil {
		t.Fatal(err)
	}
	p := newFS(t)
	opts := "rw,_netdev,noatime,state_dir=" + p.stateDir + ",s3_listen=" + p.s3Addr + ",export_delay=100ms"
	start := time.Now()
	out, err := exec.Command(helper, "bucketfs", p.mnt, "-o", opts).CombinedOutput()
	if err != nil {
		t.Fatalf("mount.bucketfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if fusetest.Mounted(p.mnt) {
			fusetest.Abort(p.mnt)
			exec.Command("fusermount3", "-u", "-z", p.mnt).Run()
		}
	})
	if !fusetest.Mounted(p.mnt) {
		t.Fatalf("mount.bucketfs returned (after %v) before the file system was mounted:\n%s", time.Since(start), out)
	}
	if err := os.WriteFile(filepath.Join(p.mnt, "via-helper.txt"), []byte("mounted by the helper"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("umount", p.mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	// The background process finishes: its state directory is free.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := engine.OfflineStatus(context.Background(), p.stateDir, time.Minute)
		if err == nil {
			if st.Running {
				t.Errorf("status after umount says running")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background bucketfs did not finish after umount: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if log, err := os.ReadFile(filepath.Join(p.stateDir, "bucketfs.log")); err != nil || !strings.Contains(string(log), "unmounted "+p.mnt) {
		t.Errorf("the background log: %v\n%s", err, log)
	}

	// A start that fails in the background reports its error to the
	// helper's caller.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out, err = exec.Command(helper, "bucketfs", p.mnt, "-o", "state_dir="+p.stateDir+",s3_listen="+taken.Addr().String()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "embedded store") || fusetest.Mounted(p.mnt) {
		t.Errorf("a failing background start: %v\n%s", err, out)
	}
}

// Under systemd (Type=notify) bucketfs says READY=1 once the mount is up
// and STOPPING=1 when it stops.
func TestSystemdIsToldWhenTheMountIsReadyAndStopping(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := newFS(t)
	p.env = []string{"NOTIFY_SOCKET=" + sock}
	p.start()
	read := func() string {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 256)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1" {
		t.Errorf("first notification %q, want READY=1", got)
	}
	if !fusetest.Mounted(p.mnt) {
		t.Error("READY=1 before the mount")
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification at stop %q, want STOPPING=1", got)
	}
	p.cmd.Wait()
}
