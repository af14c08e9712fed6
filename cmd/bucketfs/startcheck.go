package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Checks made before a start opens anything, so that a start that cannot
// work is one line instead of a file system that runs broken.

// checkStateDirApart refuses a mountpoint that is the state directory,
// lies inside it, or holds it: the mount would hide bucketfs's own state
// from itself, or bucketfs would keep its state in the file system it
// serves. Paths are compared as real paths (absolute, symlinks resolved;
// a state directory not made yet by its nearest existing parent).
func checkStateDirApart(stateDir, mountpoint string) error {
	state, mnt := realPath(stateDir), realPath(mountpoint)
	switch {
	case state == mnt:
		return fmt.Errorf("the mountpoint %s is the state directory: the mount would hide bucketfs's own state; choose another mountpoint or --state-dir", mountpoint)
	case within(mnt, state):
		return fmt.Errorf("the mountpoint %s is inside the state directory %s: the mount would hide bucketfs's own state; choose a mountpoint outside it", mountpoint, state)
	case within(state, mnt):
		return fmt.Errorf("the state directory %s is inside the mountpoint %s: bucketfs cannot keep its state in the file system it serves; choose a --state-dir outside it", state, mnt)
	}
	return nil
}

// within reports whether path lies strictly inside dir (both clean and
// absolute).
func within(path, dir string) bool {
	return path != dir && strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// realPath is p made absolute with every symlink resolved. Of a path that
// does not exist (yet), or cannot be looked at (a dead mount), the
// longest leading part that resolves is resolved and the rest kept.
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	dir, rest := abs, ""
	for {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// listenError is the one line for a listen on addr (given by flag) that
// failed: when the address is in use, it names what holds it.
func listenError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s is in use by %s: stop it or choose another address", flag, addr, portHolder(addr))
	}
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err // the address is in the line already
	}
	return fmt.Errorf("%s %s: %w", flag, addr, err)
}

// portHolder names the processes listening on addr's TCP port, as
// "pid N (NAME)", or "another program" when it cannot tell (another
// user's process, another network namespace).
func portHolder(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "another program"
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil {
		return "another program"
	}
	sockets := map[string]bool{} // "socket:[INODE]" of the listening sockets
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st ... uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if n, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(n) == port && fields[9] != "0" {
				sockets["socket:["+fields[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(sockets) == 0 {
		return "another program"
	}
	who := processesUsing(true, nil, func(t string) bool { return sockets[t] })
	if len(who) == 0 {
		return "another program"
	}
	return "pid " + strings.Join(who, ", pid ")
}
