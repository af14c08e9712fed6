package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"bucketfs/internal/fusetest"
)

// bucketfs runs the binary and returns its output and error.
func bucketfs(args ...string) (string, error) {
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// flush PATH works on files of the mount (found from the path, no
// --state-dir needed) and refuses a path elsewhere, which used to flush
// whichever file of the mount had the same inode number (issue 13).
func TestFlushTakesPathsOnTheMountOnly(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	inside := filepath.Join(p.mnt, "inside.txt")
	writeSynced(t, inside, []byte("on the mount"))
	outside := filepath.Join(t.TempDir(), "outside.txt")
	if err := os.WriteFile(outside, []byte("elsewhere"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := bucketfs("flush", "--state-dir", p.stateDir, outside)
	if err == nil || !strings.Contains(out, "is not on the bucketfs mount at "+p.mnt) {
		t.Errorf("flush of a path outside the mount: %v\n%s", err, out)
	}
	if _, ok := p.object("inside.txt"); ok {
		t.Fatal("a flush of another path exported a file of the mount")
	}
	if out, err := bucketfs("flush", inside); err != nil {
		t.Fatalf("flush %s without --state-dir: %v\n%s", inside, err, out)
	}
	if b, ok := p.object("inside.txt"); !ok || string(b) != "on the mount" {
		t.Errorf("after flush the bucket has %q (%v)", b, ok)
	}
	if out, err := bucketfs("status", p.mnt); err != nil || !strings.Contains(out, "running") {
		t.Errorf("status %s: %v\n%s", p.mnt, err, out)
	}
	if out, err := bucketfs("flush", outside); err == nil || !strings.Contains(out, "is not on a bucketfs mount") {
		t.Errorf("flush of a path on no mount, without --state-dir: %v\n%s", err, out)
	}
}

// bucketfs unmount --flush exports what is pending, unmounts and waits for
// the process; without --flush it says what is left for the next start.
func TestUnmountExportsPendingChangesWhenAskedAndWaitsForTheProcess(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	writeSynced(t, filepath.Join(p.mnt, "a.txt"), []byte("flushed at unmount"))
	out, err := bucketfs("unmount", "--flush", p.mnt)
	if err != nil {
		t.Fatalf("unmount --flush: %v\n%s", err, out)
	}
	if fusetest.Mounted(p.mnt) {
		t.Error("still mounted after unmount")
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the mount's process: %v\n%s", err, p.log)
	}

	// The embedded store runs in the mount's process: start it again to
	// look into the bucket.
	p.start("--export-delay", "1h")
	if b, ok := p.object("a.txt"); !ok || string(b) != "flushed at unmount" {
		t.Errorf("after unmount --flush the bucket has %q (%v)", b, ok)
	}
	writeSynced(t, filepath.Join(p.mnt, "b.txt"), []byte("left pending"))
	out, err = bucketfs("unmount", p.mnt)
	if err != nil || !strings.Contains(out, "1 change not yet exported goes out at the next start") {
		t.Errorf("unmount with a change pending: %v\n%s", err, out)
	}
	p.cmd.Wait()
}

// Ctrl-C while another process works in the mount neither leaves a dead
// mount nor ends the process: it says who holds the mount; a second
// Ctrl-C detaches it (issue 13).
func TestCtrlCOnABusyMountNamesTheHolderAndASecondDetaches(t *testing.T) {
	p := newFS(t)
	p.start()
	holder := exec.Command("sleep", "60")
	holder.Dir = p.mnt
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	p.cmd.Process.Signal(syscall.SIGINT)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.log.String(), "is busy, in use by") {
		if time.Now().After(deadline) {
			t.Fatalf("no busy message after a Ctrl-C:\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.log.String(), "(sleep)") {
		t.Errorf("the busy message does not name the holder:\n%s", p.log)
	}
	assertOneLineBusyMessage(t, p.log.String())
	if !fusetest.Mounted(p.mnt) || p.cmd.ProcessState != nil {
		t.Fatalf("the first Ctrl-C ended the mount:\n%s", p.log)
	}
	if _, err := os.ReadDir(p.mnt); err != nil {
		t.Errorf("the mount stopped serving after the first Ctrl-C: %v", err)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	waitForStop(t, p, "the second Ctrl-C (a lazy detach)")
}

// waitForStop waits up to 30 s for the mount's process to exit, which it
// must do with status 0, and checks that the mount is gone; what says what
// was to end it.
func waitForStop(t *testing.T, p *fsProc, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("bucketfs after %s: %v\n%s", what, err, p.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end bucketfs:\n%s", what, p.log)
	}
	if fusetest.Mounted(p.mnt) {
		t.Errorf("%s is still mounted after %s", p.mnt, what)
	}
}

// assertOneLineBusyMessage checks that the lines of out that say a mount is
// busy are each one line naming who holds it, with none of fusermount3's
// own text (issue 22).
func assertOneLineBusyMessage(t *testing.T, out string) {
	t.Helper()
	busy := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "is busy") {
			busy++
			if !strings.Contains(line, "in use by ") {
				t.Errorf("a busy message that names no holder: %q", line)
			}
		}
	}
	if busy == 0 {
		t.Errorf("no line says the mount is busy:\n%s", out)
	}
	for _, raw := range []string{"fusermount", "code exit status", "Device or resource busy"} {
		if strings.Contains(out, raw) {
			t.Errorf("the output carries %q:\n%s", raw, out)
		}
	}
}

// SIGTERM, what service managers send, ends bucketfs even while another
// process holds the mount (issue 22): it detaches the mount lazily, exports
// what is pending, ends the connection (the holders get errors, not a dead
// mount) and exits; what was written before is in the bucket.
func TestSIGTERMOnABusyMountExportsDetachesLazilyAndExits(t *testing.T) {
	p := newFS(t)
	p.start("--export-delay", "1h")
	holder := exec.Command("sleep", "60")
	holder.Dir = p.mnt
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	f, err := os.Create(filepath.Join(p.mnt, "open.txt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write([]byte("written while the mount was busy")); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitForStop(t, p, "SIGTERM on a busy mount (else systemd would SIGKILL it and leave a dead mount)")
	log := p.log.String()
	assertOneLineBusyMessage(t, log)
	if !strings.Contains(log, "(sleep)") || !strings.Contains(log, "detached it lazily") ||
		!strings.Contains(log, "after exporting everything pending") && !strings.Contains(log, "out at the next start") {
		t.Errorf("the log does not say who held the mount, that it was detached lazily and what became of the changes:\n%s", log)
	}
	_, err = f.Write([]byte(" and after"))
	if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.EIO) {
		t.Errorf("a write to a file held open across the detach: %v, want ENOTCONN (the connection is gone)", err)
	}
	p.start("--export-delay", "1h") // the embedded store runs in the mount's process
	if b, ok := p.object("open.txt"); !ok || string(b) != "written while the mount was busy" {
		t.Errorf("after SIGTERM on a busy mount the bucket has %q (%v)", b, ok)
	}
	p.stop()
}

// A dead mount left by a killed process is cleared by the next start
// instead of failing with "transport endpoint is not connected"; mounting
// over a directory that holds files says so.
func TestStartClearsADeadMountAndNotesANonEmptyMountpoint(t *testing.T) {
	p := newFS(t)
	p.start()
	p.cmd.Process.Signal(syscall.SIGKILL)
	fusetest.Abort(p.mnt)
	p.cmd.Wait()
	var st syscall.Statfs_t // statfs asks the server; a stat may be answered from the kernel's cache
	if err := syscall.Statfs(p.mnt, &st); err != syscall.ENOTCONN {
		t.Fatalf("after kill -9 statfs of the mountpoint gives %v, want ENOTCONN (a dead mount)", err)
	}
	p.start() // returns at once: the dead mount is still listed
	waitFor(t, "the new mount", func() bool { return strings.Contains(p.log.String(), "mounted at") })
	if !strings.Contains(p.log.String(), "held a dead bucketfs mount") {
		t.Errorf("the start did not say it cleared a dead mount:\n%s", p.log)
	}
	p.stop()

	if err := os.WriteFile(filepath.Join(p.mnt, "hidden.txt"), []byte("under the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	if !strings.Contains(p.log.String(), "is not empty; its 1 entry is hidden") {
		t.Errorf("mounting over a non-empty directory said nothing:\n%s", p.log)
	}
	p.stop()
}

// The start line says a file system is read-only.
func TestTheStartLineSaysReadOnly(t *testing.T) {
	p := newFS(t)
	p.start("--read-only")
	waitFor(t, "the start line", func() bool { return strings.Contains(p.log.String(), "mounted at") })
	if !strings.Contains(p.log.String(), p.mnt+", read-only: nothing is exported") {
		t.Errorf("the start line of a read-only mount:\n%s", p.log)
	}
	p.stop()
}
