//go:build kernelnfs

package guest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	envControlPort = "KN_CONTROL_PORT" // where the host restarts servers on request
	envRestartVers = "KN_RESTART_VERS" // minor versions to restart under, separated by '/'
)

// askHost has the host restart a server ("restart-term NAME" or
// "restart-kill NAME") and waits until it listens again.
func askHost(t *testing.T, req string) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort(serverAddr, os.Getenv(envControlPort)))
	if err != nil {
		t.Fatalf("reaching the host's control port: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintln(c, req)
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || reply != "ok\n" {
		t.Fatalf("host: %s %q, %v", req, reply, err)
	}
}

// syncClock sets the guest's clock to the host's. The guest starts from
// QEMU's clock, whole seconds off; the servers stamp times by the host's,
// and UTIME_NOW over NFS is the server's now, which the POSIX workloads
// compare with the client's.
func syncClock() error {
	c, err := net.Dial("tcp", net.JoinHostPort(serverAddr, os.Getenv(envControlPort)))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	sent := time.Now()
	fmt.Fprintln(c, "time")
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	var host int64
	if _, err := fmt.Sscan(reply, &host); err != nil {
		return fmt.Errorf("the host's time %q: %w", reply, err)
	}
	now := host + int64(time.Since(sent)/2)
	ts := unix.NsecToTimespec(now)
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// kernelLog is the guest kernel's message buffer.
func kernelLog(t *testing.T) string {
	t.Helper()
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	n, err = unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestOpenFilesLocksAndUnsyncedWritesOutliveAServerRestart holds an open
// file with writes the client has not sent yet and a byte-range lock
// across a SIGTERM restart and a kill -9 of the server: the client
// reclaims its open and lock in the grace period, the rest of the writes
// and an fsync succeed on the same descriptor, the file reads back whole
// from the server, and the kernel logs no lost state.
func TestOpenFilesLocksAndUnsyncedWritesOutliveAServerRestart(t *testing.T) {
	port := os.Getenv(envTrustedPort)
	if port == "" || os.Getenv(envControlPort) == "" {
		t.Skip("no trusted server or control port")
	}
	for _, vers := range strings.Split(os.Getenv(envRestartVers), "/") {
		if vers == "" {
			continue
		}
		t.Run("v"+vers, func(t *testing.T) {
			mnt := "/mnt/restart-v" + vers
			mountNFS(t, port, mnt, mountSpec{vers: vers})
			for _, how := range []string{"restart-term", "restart-kill"} {
				t.Run(how, func(t *testing.T) {
					before := kernelLog(t)
					p := filepath.Join(mnt, "restart-v"+vers+"-"+how)
					first, second := content(p+"#1", 1<<20+7), content(p+"#2", 1<<20+9)
					f, err := os.Create(p)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					if _, err := f.Write(first); err != nil { // in the client's page cache
						t.Fatal(err)
					}
					lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 100}
					if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
						t.Fatalf("lock: %v", err)
					}
					askHost(t, how+" trusted")
					start := time.Now()
					if _, err := f.Write(second); err != nil {
						t.Fatalf("a write after the restart: %v", err)
					}
					if err := f.Sync(); err != nil {
						t.Fatalf("fsync after the restart: %v", err)
					}
					lk.Type = unix.F_UNLCK
					if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
						t.Fatalf("unlock after the restart: %v", err)
					}
					if err := f.Close(); err != nil {
						t.Fatalf("close after the restart: %v", err)
					}
					t.Logf("write, fsync, unlock and close after the restart took %s", time.Since(start).Round(time.Millisecond))
					dropCaches(t)
					readBack(t, p, append(append([]byte{}, first...), second...))
					after := strings.TrimPrefix(kernelLog(t), before)
					for _, bad := range []string{"lost", "reclaim", "unhandled error", "Lock reclaim failed"} {
						if strings.Contains(after, bad) {
							t.Errorf("the kernel logged %q during the restart:\n%s", bad, after)
						}
					}
				})
			}
			unmountNFS(t, mnt)
		})
	}
}
