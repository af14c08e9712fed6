package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// How a running mount ends: unmounted from outside, or asked by a signal,
// also while processes still use it.

// liveMount is a running FUSE mount, as the code that ends it sees it.
type liveMount struct {
	dir, stateDir string
	// conn names the mount's FUSE connection in fusectl ("" if unknown).
	conn      string
	unmount   func() error
	unmounted <-chan struct{} // closed when the FUSE server has stopped
	// flush exports everything pending (nil when read-only); pending
	// counts what is left to export.
	flush   func(context.Context) error
	pending func() int
	stdout  io.Writer
}

// serveUntilUnmounted keeps the mount up until it is unmounted (umount,
// fusermount3 -u, bucketfs unmount) or a signal asks for it. If the
// mount is busy, SIGTERM (what service managers send) ends it anyway:
// see detach. A first SIGINT (Ctrl-C) does not: it says which processes
// hold the mount and keeps serving; a second one detaches it.
func (m *liveMount) serveUntilUnmounted(sigs <-chan os.Signal) error {
	interrupts := 0
	for {
		select {
		case <-m.unmounted:
			fmt.Fprintf(m.stdout, "bucketfs: unmounted %s\n", m.dir)
			return nil
		case sig := <-sigs:
			err := m.unmount()
			if err != nil {
				// go-fuse's error is fusermount3's text; ask again for
				// one we can read (the mount may also be free by now).
				err = unmountDir(m.dir, false)
			}
			if err == nil {
				<-m.unmounted
				fmt.Fprintf(m.stdout, "bucketfs: unmounted %s\n", m.dir)
				return nil
			}
			who := busyHolders(m.dir)
			if sig != syscall.SIGTERM {
				interrupts++
			}
			switch {
			case sig == syscall.SIGTERM:
				return m.detach(who, true)
			case interrupts > 1:
				return m.detach(who, false)
			case errors.Is(err, syscall.EBUSY):
				fmt.Fprintf(m.stdout, "bucketfs: %s is busy, in use by %s; close them and press Ctrl-C again, or press it again now to detach it lazily\n",
					m.dir, who)
			default:
				fmt.Fprintf(m.stdout, "bucketfs: %v; press Ctrl-C again to detach it lazily\n", err)
			}
		}
	}
}

// detach ends a mount that cannot be unmounted because processes use it
// (who names them). In this order, so that no step can leave a dead mount
// behind: it detaches the mount lazily (it leaves the directory tree at
// once, and nothing new can enter it); with flush, it exports what is
// pending, for at most busyStopFlushLimit, while the processes inside
// still work; then it ends the FUSE connection, so that they get errors
// (ENOTCONN) from then on instead of a server that is about to close. What
// is not exported by then is durable in the state directory and goes out
// at the next start; the line it prints says which.
func (m *liveMount) detach(who string, flush bool) error {
	if err := unmountDir(m.dir, true); err != nil {
		return fmt.Errorf("detach %s: %w", m.dir, err)
	}
	if flush && m.flush != nil {
		ctx, cancel := context.WithTimeout(context.Background(), busyStopFlushLimit)
		err := m.flush(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(m.stdout, "bucketfs: warning: exporting before the stop: %v\n", err)
		}
	}
	if err := abortConnection(m.conn); err == nil {
		select {
		case <-m.unmounted:
		case <-time.After(10 * time.Second):
		}
	}
	line := fmt.Sprintf("bucketfs: %s is busy, in use by %s; detached it lazily", m.dir, who)
	n := m.pending()
	switch {
	case n == 0 && flush && m.flush != nil:
		line += " after exporting everything pending"
	case n > 0:
		line += "; " + count(int64(n), "change not yet exported stays in "+m.stateDir+" and goes out",
			"changes not yet exported stay in "+m.stateDir+" and go out") + " at the next start"
	}
	fmt.Fprintln(m.stdout, line+"; those processes now get errors (ENOTCONN) from it")
	return nil
}

// busyStopFlushLimit bounds the export bucketfs makes when SIGTERM ends a
// busy mount: what is not exported by then stays in the state directory.
const busyStopFlushLimit = time.Minute

// busyHolders names the processes that hold mnt, for a message.
func busyHolders(mnt string) string {
	if who := holders(mnt); len(who) > 0 {
		return strings.Join(who, ", ")
	}
	return "processes bucketfs may not look into (of another user?)"
}

// fuseConnection is the name of the FUSE connection of the mount at mnt in
// fusectl (/sys/fs/fuse/connections/NAME): the minor device number of the
// mount, "" if it is not found.
func fuseConnection(mnt string) string {
	ms, _ := mounts()
	for _, m := range ms {
		if major, minor, ok := strings.Cut(m.dev, ":"); ok && m.dir == mnt && m.fstype == fuseType && major == "0" {
			return minor
		}
	}
	return ""
}

// abortConnection ends the FUSE connection conn: every request waiting on
// it and every later one fails (ENOTCONN), and the FUSE server stops. It
// needs fusectl mounted at /sys/fs/fuse/connections (systemd mounts it;
// root mounts it here if not) and the right to write there (the mount's
// owner, or root).
func abortConnection(conn string) error {
	if conn == "" {
		return errors.New("the mount's FUSE connection is not known")
	}
	const fusectl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(fusectl, conn)); err != nil && os.Geteuid() == 0 {
		syscall.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	return os.WriteFile(filepath.Join(fusectl, conn, "abort"), []byte("1"), 0)
}
