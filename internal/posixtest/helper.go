package posixtest

// The binary as its own helper process. A workload that needs another
// process starts os.Executable() with helperEnv set to the helper's role;
// init below sees it, does the role's part and exits, before main or any
// test machinery runs. Roles:
//
//   - "fcntl-lock PATH": write-lock bytes [0, 100) of PATH, print "locked"
//     on stdout, hold the lock until stdin is closed.
//   - "nobody OP OPERAND...": drop to uid and gid nobody (and no
//     supplementary groups), do one operation (see nobodyOp), print what it
//     read and exit 0, or print "errno N" and exit helperFailed.
//
// Any other exit status means the helper itself broke; it says why on
// stderr.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	helperEnv = "BUCKETFS_POSIXTEST_HELPER"
	// helperFailed is the exit status of a helper whose operation failed
	// with the errno it printed.
	helperFailed = 3
	// nobody is the uid and gid of the unprivileged user.
	nobody = 65534
)

func init() {
	role := os.Getenv(helperEnv)
	if role == "" {
		return
	}
	os.Exit(serveAsHelper(role, os.Args[1:]))
}

func serveAsHelper(role string, args []string) int {
	switch {
	case role == "fcntl-lock" && len(args) == 1:
		return holdFcntlLock(args[0])
	case role == "nobody" && len(args) >= 2:
		if err := becomeNobody(); err != nil {
			fmt.Fprintf(os.Stderr, "become nobody: %v\n", err)
			return 2
		}
		out, err := nobodyOp(args[0], args[1], args[2:])
		var errno syscall.Errno
		switch {
		case err == nil:
			os.Stdout.WriteString(out)
			return 0
		case errors.As(err, &errno):
			fmt.Printf("errno %d\n", int(errno))
			return helperFailed
		default:
			fmt.Fprintf(os.Stderr, "%s: %v\n", args[0], err)
			return 2
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q %q\n", role, args)
		return 2
	}
}

// holdFcntlLock write-locks bytes [0, 100) of path, says "locked" on
// stdout, and holds the lock until stdin is closed.
func holdFcntlLock(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 100}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		fmt.Printf("error: F_SETLK: %v\n", err)
		return 1
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	f.Close()
	return 0
}

// becomeNobody drops every privilege of the process for those of nobody.
// The binary cannot simply be started as nobody: go test keeps it in a
// directory only root may search.
func becomeNobody() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(nobody); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(nobody); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	if os.Geteuid() != nobody || os.Getegid() != nobody {
		return fmt.Errorf("still euid %d egid %d", os.Geteuid(), os.Getegid())
	}
	return nil
}

// nobodyOp does op on path with the system calls a shell tool would use,
// and returns what it read.
func nobodyOp(op, path string, operands []string) (string, error) {
	arg := func(i int) string {
		if i < len(operands) {
			return operands[i]
		}
		return ""
	}
	switch op {
	case "stat":
		_, err := os.Lstat(path)
		return "", err
	case "read": // cat
		b, err := os.ReadFile(path)
		return string(b), err
	case "list": // ls: one name a line
		ents, err := os.ReadDir(path)
		var b strings.Builder
		for _, e := range ents {
			b.WriteString(e.Name() + "\n")
		}
		return b.String(), err
	case "create": // touch of a new file
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			return "", err
		}
		return "", f.Close()
	case "write": // echo data > path
		return "", os.WriteFile(path, []byte(arg(0)), 0o666)
	case "append": // echo data >> path
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
		if err != nil {
			return "", err
		}
		_, err = f.WriteString(arg(0))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return "", err
	case "remove":
		return "", syscall.Unlink(path)
	case "chmod":
		mode, err := strconv.ParseUint(arg(0), 8, 32)
		if err != nil {
			return "", err
		}
		return "", syscall.Chmod(path, uint32(mode))
	case "chown": // of the owner only
		uid, err := strconv.Atoi(arg(0))
		if err != nil {
			return "", err
		}
		return "", os.Chown(path, uid, -1)
	case "truncate":
		size, err := strconv.ParseInt(arg(0), 10, 64)
		if err != nil {
			return "", err
		}
		return "", os.Truncate(path, size)
	case "access": // test -r, test -w
		mode := map[string]uint32{"r": unix.R_OK, "w": unix.W_OK}[arg(0)]
		if mode == 0 {
			return "", fmt.Errorf("access mode %q", arg(0))
		}
		return "", unix.Access(path, mode)
	case "touch": // both times to now
		now := unix.Timespec{Nsec: unix.UTIME_NOW}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{now, now}, 0)
	case "set-times": // both times to the Unix time given
		sec, err := strconv.ParseInt(arg(0), 10, 64)
		if err != nil {
			return "", err
		}
		ts := unix.Timespec{Sec: sec}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{ts, ts}, 0)
	}
	return "", fmt.Errorf("unknown operation %q", op)
}

// helperCommand is a command that runs this binary as the helper role with
// args, in "/", so that a process that changed its working directory (the
// embedded S3 store does) starts it the same.
func helperCommand(t testing.TB, role string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("the helper is this binary: %v", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+role)
	cmd.Dir = "/"
	return cmd
}

// asNobody does op on path as the user nobody, in a helper process, and
// returns what it read and the syscall.Errno it failed with, or nil.
func asNobody(t testing.TB, op, path string, operands ...string) (string, error) {
	t.Helper()
	cmd := helperCommand(t, "nobody", append([]string{op, path}, operands...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), nil
	case errors.As(err, &exit) && exit.ExitCode() == helperFailed:
		var n int
		if _, err := fmt.Sscanf(stdout.String(), "errno %d", &n); err != nil {
			t.Fatalf("%s %s as nobody: helper said %q", op, path, stdout.String())
		}
		return "", syscall.Errno(n)
	default:
		t.Fatalf("%s %s as nobody: helper: %v (stderr %q)", op, path, err, stderr.String())
		return "", nil
	}
}

// lockHolder is a helper process that holds an fcntl write lock on bytes
// [0, 100) of a file.
type lockHolder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	exited bool
}

// holdFcntlLockElsewhere starts a helper process that write-locks bytes
// [0, 100) of path and returns once it holds the lock. The lock goes when
// release is called or t ends.
func holdFcntlLockElsewhere(t testing.TB, path string) *lockHolder {
	t.Helper()
	h := &lockHolder{cmd: helperCommand(t, "fcntl-lock", path)}
	h.cmd.Stderr = &h.stderr
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !h.exited {
			h.stdin.Close()
			h.cmd.Process.Kill()
			h.cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "locked\n" {
			t.Fatalf("helper said %q (stderr %q)", s, h.stderr.String())
		}
	case <-time.After(patience):
		t.Fatalf("helper did not take its lock (stderr %q)", h.stderr.String())
	}
	return h
}

func (h *lockHolder) pid() int { return h.cmd.Process.Pid }

// release ends the helper, which lets go of its lock as it exits.
func (h *lockHolder) release(t testing.TB) {
	t.Helper()
	h.stdin.Close()
	err := h.cmd.Wait()
	h.exited = true
	if err != nil {
		t.Fatalf("helper: %v (stderr %q)", err, h.stderr.String())
	}
}
