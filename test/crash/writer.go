package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// errStopped ends the writer: the kill made a call fail, or the model was
// frozen while a call hung.
var errStopped = errors.New("writer stopped by the kill")

// writer is the journaled writer. It runs a random mix of operations over
// the files of the model, one system call at a time, and records every
// call in the model's journal before it is made and every state the call
// gives a file once it returns. It runs on one goroutine with the model's
// lock held except during a system call and a pause.
type writer struct {
	m   *model
	mnt string
	rng *rand.Rand
	// crashing is set just before the kill: a call that fails from then on
	// is in flight (maybe applied), one that failed earlier is a writer
	// error.
	crashing *atomic.Bool
	stop     *atomic.Bool // ends the writer between operations
	big      bool         // also make files of 8 to 24 MiB (multipart exports)
	buf      []byte
}

// call makes one system call as a journal step. apply changes the model
// the way the call changes the file system; it runs with inflight set when
// the call failed after the kill started, or never returned.
func (w *writer) call(desc string, files []int, sys func() error, apply func(seq int, inflight bool)) error {
	m := w.m
	if m.frozen {
		return errStopped
	}
	seq := len(m.journal)
	m.journal = append(m.journal, step{seq: seq, at: time.Since(m.started), desc: desc, files: files, outcome: "..."})
	m.pending = &pendingStep{idx: seq, apply: func(inflight bool) { apply(seq, inflight) }}
	m.mu.Unlock()
	err := sys()
	m.mu.Lock()
	if m.frozen {
		return errStopped
	}
	m.pending = nil
	switch {
	case err == nil:
		apply(seq, false)
		m.journal[seq].outcome = "ok"
		return nil
	case w.crashing.Load():
		apply(seq, true)
		m.journal[seq].outcome = "in flight (" + err.Error() + ")"
		return errStopped
	default:
		apply(seq, true)
		m.journal[seq].outcome = "FAILED while bucketfs was alive: " + err.Error()
		m.writerErrors = append(m.writerErrors, m.journal[seq])
		return fmt.Errorf("%s: %w", desc, err)
	}
}

func noChange(int, bool) {}

// run writes until stopped or the kill makes a call fail.
//
// Its thread blocks every signal: a FUSE request is interrupted when its
// caller's thread gets a signal, and the Go runtime's preemption signals
// (SIGURG) would then make bucketfs answer EINTR to calls nobody
// interrupted, leaving it open whether they applied.
func (w *writer) run() error {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	var all unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &all, nil); err != nil {
		return fmt.Errorf("block signals in the writer: %w", err)
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	for !w.stop.Load() && !w.crashing.Load() {
		if err := w.op(); err != nil {
			return err
		}
		if w.rng.IntN(10) == 0 {
			// Now and then a pause longer than the export delay, so
			// that files are exported (and killed mid-export) while
			// the writer runs. Pacing, not synchronisation.
			d := time.Duration(w.rng.IntN(400)) * time.Millisecond
			w.m.mu.Unlock()
			time.Sleep(d)
			w.m.mu.Lock()
		}
	}
	return nil
}

// op runs one random operation on a random file, then maybe fsyncs a few
// other files.
func (w *writer) op() error {
	id := w.rng.IntN(numFiles)
	var err error
	if w.m.files[id].cur().name == "" {
		err = w.create(id)
	} else {
		switch r := w.rng.IntN(100); {
		case r < 18:
			err = w.rewrite(id)
		case r < 36:
			err = w.append(id)
		case r < 56:
			err = w.overwrite(id)
		case r < 66:
			err = w.truncate(id)
		case r < 76:
			err = w.punch(id)
		case r < 90:
			err = w.rename(id)
		default:
			err = w.unlink(id)
		}
	}
	if err != nil || w.rng.IntN(4) != 0 {
		return err
	}
	for range 1 + w.rng.IntN(3) {
		if err := w.fsyncByName(w.rng.IntN(numFiles)); err != nil {
			return err
		}
	}
	return nil
}

// size draws a write or truncate size: mostly small, up to about 1 MiB,
// and with big set now and then 8 to 24 MiB.
func (w *writer) size() int64 {
	switch r := w.rng.IntN(100); {
	case r < 35:
		return 1 + w.rng.Int64N(512)
	case r < 65:
		return 512 + w.rng.Int64N(16<<10)
	case r < 88:
		return 16<<10 + w.rng.Int64N(240<<10)
	case r < 97 || !w.big:
		return 256<<10 + w.rng.Int64N(900<<10)
	default:
		return 8<<20 + w.rng.Int64N(16<<20)
	}
}

func (w *writer) path(name string) string { return filepath.Join(w.mnt, name) }

// open opens file id by its name; flags with O_TRUNC make a state.
func (w *writer) open(id int, flags int, desc string) (int, error) {
	f := w.m.files[id]
	name := f.cur().name
	fd := -1
	apply := noChange
	if flags&unix.O_TRUNC != 0 {
		apply = func(seq int, inflight bool) { w.m.setState(id, name, content{}, seq, inflight, nil) }
	}
	err := w.call(fmt.Sprintf("open %s (f%d) %s", name, id, desc), []int{id}, func() error {
		var err error
		fd, err = unix.Open(w.path(name), flags|unix.O_CLOEXEC, 0o644)
		return err
	}, apply)
	return fd, err
}

// finish maybe fsyncs fd, then closes it.
func (w *writer) finish(id, fd int, err error) error {
	if err == nil && w.rng.IntN(3) == 0 {
		err = w.fsync(id, fd)
	}
	cerr := w.call(fmt.Sprintf("close f%d", id), []int{id}, func() error { return unix.Close(fd) }, noChange)
	return errors.Join(err, cerr)
}

func (w *writer) fsync(id, fd int) error {
	return w.call(fmt.Sprintf("fsync f%d", id), []int{id}, func() error { return unix.Fsync(fd) },
		func(_ int, inflight bool) {
			if !inflight { // a fsync that did not return promises nothing
				f := w.m.files[id]
				f.synced = len(f.states) - 1
			}
		})
}

// fsyncByName opens a file (if it exists), fsyncs it and closes it: fsync
// covers the writes made through other descriptors too.
func (w *writer) fsyncByName(id int) error {
	if w.m.files[id].cur().name == "" {
		return nil
	}
	fd, err := w.open(id, unix.O_RDWR, "for fsync")
	if err != nil {
		return err
	}
	err = w.fsync(id, fd)
	cerr := w.call(fmt.Sprintf("close f%d", id), []int{id}, func() error { return unix.Close(fd) }, noChange)
	return errors.Join(err, cerr)
}

// write writes n bytes of a new word at off (at the end for an O_APPEND
// descriptor, where off must be the size).
func (w *writer) write(id, fd int, off, n int64, appending bool) error {
	f := w.m.files[id]
	name, pre := f.cur().name, f.cur().c
	wd := f.newWord()
	if int64(len(w.buf)) < n {
		w.buf = make([]byte, n)
	}
	b := w.buf[:n]
	fillWord(b, off, wd)
	verb := "pwrite"
	if appending {
		verb = "append"
	}
	return w.call(fmt.Sprintf("%s f%d [%d,%d) %v", verb, id, off, off+n, wd), []int{id}, func() error {
		off := off
		for len(b) > 0 {
			var k int
			var err error
			if appending {
				k, err = unix.Write(fd, b)
			} else {
				k, err = unix.Pwrite(fd, b, off)
			}
			if err != nil {
				return err
			}
			if k == 0 {
				return errors.New("write wrote nothing")
			}
			b, off = b[k:], off+int64(k)
		}
		return nil
	}, func(seq int, inflight bool) {
		var torn *tornWrite
		if inflight {
			torn = &tornWrite{pre: pre, off: off, n: n, w: wd}
		}
		w.m.setState(id, name, pre.write(off, n, wd), seq, inflight, torn)
	})
}

func (w *writer) create(id int) error {
	name := homeName(id)
	if w.m.holder(name) >= 0 {
		var free []string
		for _, n := range names {
			if w.m.holder(n) < 0 {
				free = append(free, n)
			}
		}
		if len(free) == 0 {
			return nil
		}
		name = free[w.rng.IntN(len(free))]
	}
	fd := -1
	err := w.call(fmt.Sprintf("create %s (f%d)", name, id), []int{id}, func() error {
		var err error
		fd, err = unix.Open(w.path(name), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		return err
	}, func(seq int, inflight bool) { w.m.setState(id, name, content{}, seq, inflight, nil) })
	if err != nil {
		return err
	}
	return w.finish(id, fd, w.write(id, fd, 0, w.size(), false))
}

// rewrite is the O_TRUNC rewrite: truncate at open, then write anew.
func (w *writer) rewrite(id int) error {
	fd, err := w.open(id, unix.O_WRONLY|unix.O_TRUNC, "O_TRUNC")
	if err != nil {
		return err
	}
	return w.finish(id, fd, w.write(id, fd, 0, w.size(), false))
}

func (w *writer) append(id int) error {
	fd, err := w.open(id, unix.O_WRONLY|unix.O_APPEND, "O_APPEND")
	if err != nil {
		return err
	}
	return w.finish(id, fd, w.write(id, fd, w.m.files[id].cur().c.size, w.size(), true))
}

// overwrite writes in place, now and then past the end.
func (w *writer) overwrite(id int) error {
	fd, err := w.open(id, unix.O_WRONLY, "")
	if err != nil {
		return err
	}
	size := w.m.files[id].cur().c.size
	off := w.rng.Int64N(size + 1)
	if w.rng.IntN(2) == 0 {
		off -= off % 4096
	}
	n := w.size()
	if w.rng.IntN(4) != 0 && off < size {
		n = min(n, size-off)
	}
	return w.finish(id, fd, w.write(id, fd, off, n, false))
}

// truncate cuts the file down or extends it with zeros.
func (w *writer) truncate(id int) error {
	fd, err := w.open(id, unix.O_WRONLY, "")
	if err != nil {
		return err
	}
	f := w.m.files[id]
	name, pre := f.cur().name, f.cur().c
	n := pre.size + w.size()
	if w.rng.IntN(2) == 0 {
		n = w.rng.Int64N(pre.size + 1)
	}
	err = w.call(fmt.Sprintf("ftruncate f%d %d -> %d", id, pre.size, n), []int{id},
		func() error { return unix.Ftruncate(fd, n) },
		func(seq int, inflight bool) { w.m.setState(id, name, pre.truncate(n), seq, inflight, nil) })
	return w.finish(id, fd, err)
}

// punch punches a hole, keeping the size.
func (w *writer) punch(id int) error {
	fd, err := w.open(id, unix.O_WRONLY, "")
	if err != nil {
		return err
	}
	f := w.m.files[id]
	name, pre := f.cur().name, f.cur().c
	off := w.rng.Int64N(pre.size + 1)
	if w.rng.IntN(2) == 0 {
		off -= off % 4096
	}
	n := min(w.size(), pre.size-off)
	if n <= 0 {
		return w.finish(id, fd, nil)
	}
	err = w.call(fmt.Sprintf("punch f%d [%d,%d)", id, off, off+n), []int{id},
		func() error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		},
		func(seq int, inflight bool) { w.m.setState(id, name, pre.punch(off, n), seq, inflight, nil) })
	return w.finish(id, fd, err)
}

// rename moves the file to another name of the pool, replacing the file
// that has it.
func (w *writer) rename(id int) error {
	f := w.m.files[id]
	from, c := f.cur().name, f.cur().c
	to := names[w.rng.IntN(len(names))]
	if to == from {
		return nil
	}
	files := []int{id}
	victim := w.m.holder(to)
	if victim >= 0 {
		files = append(files, victim)
	}
	return w.call(fmt.Sprintf("rename %s -> %s (f%d, replacing %v)", from, to, id, victimName(victim)), files,
		func() error { return unix.Rename(w.path(from), w.path(to)) },
		func(seq int, inflight bool) {
			w.m.setState(id, to, c, seq, inflight, nil)
			if victim >= 0 {
				w.m.setState(victim, "", content{}, seq, inflight, nil)
			}
		})
}

func victimName(id int) string {
	if id < 0 {
		return "nothing"
	}
	return fmt.Sprintf("f%d", id)
}

func (w *writer) unlink(id int) error {
	name := w.m.files[id].cur().name
	return w.call(fmt.Sprintf("unlink %s (f%d)", name, id), []int{id},
		func() error { return unix.Unlink(w.path(name)) },
		func(seq int, inflight bool) { w.m.setState(id, "", content{}, seq, inflight, nil) })
}
