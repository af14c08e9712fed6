package fuse

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Interrupts. The kernel sends FUSE_INTERRUPT for a request as soon as any
// signal reaches the thread that waits for it, and go-fuse then closes the
// request's cancel channel. Most such signals are caught and harmless: the
// Go runtime signals its threads every few milliseconds to preempt
// goroutines, shells catch SIGCHLD, servers SIGHUP. A local file system
// never fails stat, open, read or readdir with EINTR for them, and since
// the kernel hands an error from a FUSE server back as it is (it cannot
// restart the call), answering EINTR would fail calls that programs do not
// retry. So requests end early only for a caller that is being killed;
// everything else runs to its end:
//
//   - uninterrupted: operations that change the file system. Once begun
//     they finish even for a dying caller, so that no rename, create or
//     write can answer EINTR after its change was made.
//   - untilKilled: operations that only read. They stop when the caller is
//     being killed (a fatal signal is pending), so that kill or Ctrl-C of
//     a reader waiting for a store that does not answer takes effect at
//     once rather than after the operation timeout.
//   - lock waits (F_SETLKW, flock) keep POSIX's rule instead: any signal
//     ends the wait with EINTR, which is how `flock -w` and alarm()
//     timeouts on locks work.

// uninterrupted is the context of an operation that changes the file
// system.
func uninterrupted() (context.Context, context.CancelFunc) {
	return context.Background(), func() {}
}

// untilKilled is the context of a request that only reads: canceled once
// the kernel has interrupted the request and the calling thread has a
// fatal signal pending (or is gone). It costs no goroutine unless someone
// waits on Done, which requests that reach the store do.
func untilKilled(cancel <-chan struct{}, h *fuse.InHeader) (context.Context, context.CancelFunc) {
	c := &killCtx{cancel: cancel, tid: h.Pid}
	return c, c.end
}

// anySignal is canceled by any interrupt of the request.
type anySignal struct {
	context.Context
	done <-chan struct{}
}

func (c anySignal) Done() <-chan struct{} { return c.done }

func (c anySignal) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// killPoll is how often a request interrupted by a harmless signal checks
// again whether its caller is being killed: the kernel interrupts a
// request only once, so a kill that follows a caught signal sends nothing.
const killPoll = 20 * time.Millisecond

type killCtx struct {
	cancel <-chan struct{} // closed by go-fuse on FUSE_INTERRUPT
	tid    uint32          // the calling thread; 0 for the kernel's own requests

	killed  atomic.Bool
	checked atomic.Int64 // unix nanoseconds of the last look at the caller

	once sync.Once
	done chan struct{} // closed when killed; made by the first Done
	stop chan struct{} // closed by end; made with done
}

func (c *killCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *killCtx) Value(any) any               { return nil }

func (c *killCtx) Err() error {
	if c.killed.Load() {
		return context.Canceled
	}
	select {
	case <-c.cancel:
	default:
		return nil
	}
	now := time.Now().UnixNano()
	if last := c.checked.Load(); last != 0 && now-last < int64(killPoll) {
		return nil
	}
	c.checked.Store(now)
	if callerDying(c.tid) {
		c.killed.Store(true)
		return context.Canceled
	}
	return nil
}

func (c *killCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		c.done = make(chan struct{})
		c.stop = make(chan struct{})
		go c.watch()
	})
	return c.done
}

// watch closes done once the caller is being killed, until end.
func (c *killCtx) watch() {
	select {
	case <-c.stop:
		return
	case <-c.cancel:
	}
	t := time.NewTicker(killPoll)
	defer t.Stop()
	for {
		if callerDying(c.tid) {
			c.killed.Store(true)
			close(c.done)
			return
		}
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// end stops the watcher, if one was started; a Done after end never fires.
func (c *killCtx) end() {
	c.once.Do(func() {})
	if c.stop != nil {
		close(c.stop)
	}
}

// Signals whose default action does not end the process.
const harmlessByDefault = 1<<(17-1) | 1<<(18-1) | 1<<(19-1) | 1<<(20-1) | 1<<(21-1) |
	1<<(22-1) | 1<<(23-1) | 1<<(28-1) // SIGCHLD, SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGWINCH

const sigkill = 1 << (9 - 1)

// callerDying reports whether thread tid is being killed: SIGKILL is
// pending for it (the kernel adds it to every thread of a process that a
// fatal signal ends), or a signal is pending that it neither blocks,
// ignores nor catches and whose default action ends it (the ones that
// dump core are not turned into SIGKILL). A thread that is gone is dying;
// tid 0 (the kernel itself) never is.
func callerDying(tid uint32) bool {
	if tid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return os.IsNotExist(err)
	}
	var pending, handled uint64
	for line := range bytes.Lines(b) {
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch string(name) {
		case "State":
			if f := bytes.Fields(val); len(f) > 0 && (f[0][0] == 'Z' || f[0][0] == 'X') {
				return true
			}
		case "SigPnd", "ShdPnd":
			pending |= sigmask(val)
		case "SigBlk", "SigIgn", "SigCgt":
			handled |= sigmask(val)
		}
	}
	return pending&sigkill != 0 || pending&^handled&^harmlessByDefault != 0
}

func sigmask(val []byte) uint64 {
	v, _ := strconv.ParseUint(string(bytes.TrimSpace(val)), 16, 64)
	return v
}
