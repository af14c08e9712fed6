package main

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// numFiles is the number of files a round writes to.
const numFiles = 8

// names is the pool of names the files take. File i starts at homeName(i);
// a rename moves it to any other name of the pool, replacing the file that
// had that name, if any. Names outside the pool (and outside lost+found) are
// never made by the writer.
var names = func() []string {
	var ns []string
	for i := range numFiles {
		ns = append(ns, homeName(i))
	}
	return append(ns, "t0", "t1", "d/t0", "d/t1")
}()

// subdir is the one directory the writer uses besides the root.
const subdir = "d"

func homeName(id int) string {
	if id < 5 {
		return fmt.Sprintf("f%d", id)
	}
	return fmt.Sprintf("%s/f%d", subdir, id)
}

func inPool(name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// A state is one full state a file had at some moment: its name ("" when
// it had none: not created yet, unlinked, or replaced by a rename) and its
// content.
type state struct {
	name string
	c    content
	step int // the journal step that made it (-1: the initial absent state)
	// inflight marks the state an operation would have made if the kill
	// let it apply: it was in flight when the kill hit (returned an error
	// or never returned), so it may or may not have happened.
	inflight bool
	// torn is set for an in-flight write: the kernel hands a large write
	// to FUSE in chunks ending on page boundaries, so it may have applied
	// up to any such boundary.
	torn *tornWrite
}

// tornWrite is a write that may have applied only up to a page boundary.
type tornWrite struct {
	pre    content
	off, n int64
	w      word
}

// matches reports whether data is pre with the write applied to [off, e)
// for e the end of the write or a page boundary inside it, and returns e.
func (t *tornWrite) matches(data []byte) (int64, bool) {
	const page = 4096
	// The word is new, so the data hold it from off up to where the cut
	// was, or a few bytes further when pre's bytes there agree with it by
	// chance (two words of one file share their first bytes).
	p := t.w.bytes()
	e := t.off
	for e < t.off+t.n && e < int64(len(data)) && data[e] == p[e%8] {
		e++
	}
	if e == t.off+t.n && t.pre.write(t.off, t.n, t.w).equal(data) {
		return e, true
	}
	b := e - e%page
	if b > t.off && b < t.off+t.n && t.pre.write(t.off, b-t.off, t.w).equal(data) {
		return b, true
	}
	return 0, false
}

// fileModel is everything the writer did to one file.
type fileModel struct {
	id     int
	states []state // states[0] is absent
	synced int     // index of the state at the last successful fsync; -1: none
	// exported is the index of the latest state seen in the bucket before
	// the restart (the earliest state with those bytes under that key);
	// -1: none seen.
	exported int
	nextVer  int
}

func (f *fileModel) cur() state { return f.states[len(f.states)-1] }

func (f *fileModel) newWord() word {
	f.nextVer++
	return word{f.id, f.nextVer}
}

// candidates are the states the file may show after the crash: every state
// from its last fsync or the last state it exported before the kill,
// whichever is later, on (from the start when neither happened), the
// in-flight one included. A state older than that is not among them: the
// fsync'ed (or exported) one must win.
func (f *fileModel) candidates() []int { return f.candidatesFrom(max(f.synced, f.exported, 0)) }

func (f *fileModel) candidatesFrom(floor int) []int {
	var idx []int
	for i := floor; i < len(f.states); i++ {
		idx = append(idx, i)
	}
	return idx
}

// fsyncedLast reports whether the file's last change before the kill was
// fsync'ed, so "fsync'ed means kept" applies to it.
func (f *fileModel) fsyncedLast() bool { return f.synced >= 0 && f.synced == len(f.states)-1 }

// realState reports whether data, read under name (or anywhere when name
// is ""), is a full state this file had at some moment, and which.
func (f *fileModel) realState(name string, data []byte) (int, bool) {
	for i, s := range f.states {
		if s.name == "" || (name != "" && s.name != name) {
			continue
		}
		if s.c.equal(data) {
			return i, true
		}
		if s.torn != nil {
			if _, ok := s.torn.matches(data); ok {
				return i, true
			}
		}
	}
	return -1, false
}

func (f *fileModel) describeState(i int) string {
	s := f.states[i]
	var tags []string
	if i == f.synced {
		tags = append(tags, "fsynced")
	}
	if i == f.exported {
		tags = append(tags, "in the bucket before the restart")
	}
	if s.inflight {
		tags = append(tags, "in flight")
	}
	if s.torn != nil {
		tags = append(tags, "may be cut at a page boundary")
	}
	tag := ""
	if len(tags) > 0 {
		tag = " (" + strings.Join(tags, ", ") + ")"
	}
	if s.name == "" {
		return fmt.Sprintf("#%d absent%s", i, tag)
	}
	return fmt.Sprintf("#%d %s %s%s", i, s.name, s.c, tag)
}

// describeCandidates summarises the allowed states, at most six.
func (f *fileModel) describeCandidates() string {
	idx := f.candidates()
	var parts []string
	if len(idx) > 6 {
		parts = append(parts, fmt.Sprintf("(%d states, showing the first 3 and last 3)", len(idx)))
		idx = append(idx[:3:3], idx[len(idx)-3:]...)
	}
	for _, i := range idx {
		parts = append(parts, f.describeState(i))
	}
	return strings.Join(parts, "\n      ")
}

// A step is one system call of the writer, as the journal records it.
type step struct {
	seq   int
	at    time.Duration // since the writer started
	desc  string
	files []int
	// outcome: "ok", "in flight" (maybe applied), or the error of a call
	// that failed while bucketfs was alive.
	outcome string
}

func (s step) String() string {
	return fmt.Sprintf("#%d +%v %s: %s", s.seq, s.at.Round(time.Millisecond), s.desc, s.outcome)
}

// model is the writer's journal and the states of every file. The writer
// goroutine changes it under mu; once frozen, after the kill, it changes no
// more and the checker reads it.
type model struct {
	mu      sync.Mutex
	frozen  bool
	files   [numFiles]*fileModel
	journal []step
	pending *pendingStep // the step whose call has not returned
	started time.Time
	// writerErrors are calls that failed while bucketfs was alive.
	writerErrors []step
	// inflightOutcome says, once the mount is checked, what became of
	// each in-flight step.
	inflightOutcome []string
}

type pendingStep struct {
	idx   int
	apply func(inflight bool)
}

func newModel() *model {
	m := &model{started: time.Now()}
	for i := range m.files {
		m.files[i] = &fileModel{id: i, synced: -1, exported: -1, states: []state{{step: -1}}}
	}
	return m
}

// holder returns the file that has name now, or -1.
func (m *model) holder(name string) int {
	for _, f := range m.files {
		if f.cur().name == name {
			return f.id
		}
	}
	return -1
}

// setState appends a state to file id; the step in flight marks it so.
func (m *model) setState(id int, name string, c content, seq int, inflight bool, torn *tornWrite) {
	f := m.files[id]
	f.states = append(f.states, state{name: name, c: c, step: seq, inflight: inflight, torn: torn})
}

// freeze stops the model: a step still pending (its call never returned)
// counts as in flight.
func (m *model) freeze() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		return
	}
	if p := m.pending; p != nil {
		p.apply(true)
		m.journal[p.idx].outcome = "in flight (never returned)"
		m.pending = nil
	}
	m.frozen = true
}

// lastSteps returns the last n steps of the journal, and the last n that
// touched file id (if id >= 0) when they are not among them.
func (m *model) lastSteps(n, id int) []string {
	var out []string
	from := max(0, len(m.journal)-n)
	if id >= 0 {
		var own []step
		for _, s := range m.journal[:from] {
			for _, f := range s.files {
				if f == id {
					own = append(own, s)
				}
			}
		}
		if len(own) > n {
			own = own[len(own)-n:]
		}
		for _, s := range own {
			out = append(out, s.String())
		}
		if len(own) > 0 {
			out = append(out, "...")
		}
	}
	for _, s := range m.journal[from:] {
		out = append(out, s.String())
	}
	return out
}
