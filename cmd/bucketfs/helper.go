package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// mount.bucketfs: the binary called by that name (a symlink) is the mount
// helper mount(8) runs for `mount -t bucketfs SOURCE DIR -o OPTIONS` and
// for /etc/fstab lines of type bucketfs:
//
//	mount.bucketfs SOURCE DIR [-sfnv] [-o OPTIONS]
//
// SOURCE is s3://NAME[/PREFIX], or "bucketfs" for the embedded store. Each
// option is a long flag of `bucketfs mount` with '_' for '-'
// (state_dir=/var/lib/bucketfs, export_delay=30s, s3_listen=...); "ro" is
// --read-only; the generic options mount(8) and systemd pass (defaults,
// _netdev, nofail, noauto, user, rw, x-systemd.*, ...) are accepted and
// change nothing. Paths must be absolute: mount(8) and fstab have no
// working directory to resolve them against. Every bucketfs mount is
// noatime (atimeOptions). The helper returns once the file system is
// mounted, leaving bucketfs running in the background (its log in
// STATE_DIR/bucketfs.log); `umount DIR` stops it cleanly.

// genericOptions are mount(8) options that mean nothing to bucketfs.
var genericOptions = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "user": true, "users": true, "nouser": true,
	"owner": true, "group": true, "_netdev": true, "nofail": true, "rw": true, "suid": true,
	"nosuid": true, "dev": true, "nodev": true, "exec": true, "noexec": true, "async": true,
	"sync": true, "lazytime": true, "nolazytime": true, "silent": true, "loud": true,
	"noatime": true, "nodiratime": true, // what every bucketfs mount is (atimeOptions)
}

// atimeOptions ask for access times updated on reads, which bucketfs does
// not do: the kernel leaves atime to a FUSE server, and bucketfs changes
// it only when told to (utimes), so every mount is noatime (and says so).
// They are refused rather than dropped.
var atimeOptions = map[string]bool{"atime": true, "relatime": true, "strictatime": true, "diratime": true}

// pathOptions take a path, which must be absolute.
var pathOptions = map[string]bool{"state_dir": true, "tls_cert": true, "tls_key": true}

// helperArgs turns a mount helper's command line into `bucketfs mount`
// arguments.
func helperArgs(args []string) ([]string, error) {
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o":
			if i+1 >= len(args) {
				return nil, errors.New("-o needs OPTIONS")
			}
			opts = append(opts, strings.Split(args[i+1], ",")...)
			i++
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case a == "-N" || a == "-t":
			i++ // a namespace or a type: not ours to act on
		case strings.HasPrefix(a, "-"):
			// -s (sloppy), -f (fake), -n (no mtab), -v (verbose)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, errors.New("usage: mount.bucketfs SOURCE DIR [-o OPTIONS] (SOURCE: s3://NAME[/PREFIX] or bucketfs)")
	}
	out := []string{"mount", "--background"}
	switch src := pos[0]; {
	case strings.HasPrefix(src, "s3://"):
		out = append(out, "--bucket", src)
	case src == "bucketfs" || src == "embedded" || src == "none",
		// mount(8) turns a source that names an existing file into its
		// absolute path: "bucketfs" run where a file of that name is.
		filepath.IsAbs(src) && (filepath.Base(src) == "bucketfs" || filepath.Base(src) == "embedded"):
	default:
		return nil, fmt.Errorf("source %q: use s3://NAME[/PREFIX], or bucketfs for the embedded store", src)
	}
	for _, o := range opts {
		key, value, hasValue := strings.Cut(strings.TrimSpace(o), "=")
		switch {
		case key == "":
		case genericOptions[key], strings.HasPrefix(key, "x-"), key == "comment":
		case atimeOptions[key]:
			return nil, fmt.Errorf("option %s: bucketfs does not update access times on reads (every bucketfs mount is noatime); drop it or write noatime", key)
		case pathOptions[key] && !filepath.IsAbs(value):
			return nil, fmt.Errorf("option %s=%s: give an absolute path (mount(8) and fstab have no working directory to resolve it against)", key, value)
		case key == "ro":
			out = append(out, "--read-only")
		case hasValue:
			out = append(out, "--"+strings.ReplaceAll(key, "_", "-"), value)
		default:
			out = append(out, "--"+strings.ReplaceAll(key, "_", "-"))
		}
	}
	return append(out, pos[1]), nil
}

// readyFDEnv names the file descriptor a background child reports on: a
// line "ok" once mounted, or the error that stopped it.
const readyFDEnv = "BUCKETFS_READY_FD"

// startInBackground runs `bucketfs mount` again as a detached child with
// the same arguments (without --background) and returns once it reports
// the file system mounted, or its error. The child's output goes to
// logPath.
func startInBackground(args []string, logPath string, stdout io.Writer) error {
	var childArgs []string
	for _, a := range args {
		if a != "--background" && a != "-background" && a != "--background=true" && a != "-background=true" {
			childArgs = append(childArgs, a)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(self, append([]string{"mount"}, childArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	pid := cmd.Process.Pid
	cmd.Process.Release()
	line, err := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ok":
		fmt.Fprintf(stdout, "bucketfs: mounted in the background (pid %d); log in %s\n", pid, logPath)
		return nil
	case line != "":
		return errors.New(line)
	}
	return fmt.Errorf("bucketfs stopped while starting (%v); see %s", err, logPath)
}

// reportReady tells whoever waits for the mount (a mount helper's parent,
// systemd) that it is up.
func reportReady() {
	if fd := os.Getenv(readyFDEnv); fd == "3" {
		f := os.NewFile(3, "ready")
		fmt.Fprintln(f, "ok")
		f.Close()
		os.Unsetenv(readyFDEnv)
	}
	sdNotify("READY=1")
}

// reportFailure tells a background parent why the start failed.
func reportFailure(err error) {
	if fd := os.Getenv(readyFDEnv); fd == "3" {
		f := os.NewFile(3, "ready")
		fmt.Fprintln(f, strings.ReplaceAll(err.Error(), "\n", " "))
		f.Close()
		os.Unsetenv(readyFDEnv)
	}
}

// sdNotify sends a state to systemd when it runs bucketfs as a
// Type=notify service (NOTIFY_SOCKET set); otherwise it does nothing.
func sdNotify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	c, err := net.DialTimeout("unixgram", addr, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}
