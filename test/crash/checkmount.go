package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Rules, as the report names them.
const (
	ruleFsync      = "fsync'ed means kept"
	ruleExported   = "exported means kept"
	ruleReal       = "only real versions"
	ruleLostFound  = "only real versions (lost+found)"
	ruleBucket     = "only real versions in the bucket"
	ruleConverged  = "after the flush the bucket equals the mount"
	ruleMultipart  = "no incomplete multipart uploads after restart + flush"
	ruleWriter     = "no call fails while bucketfs is alive"
	ruleRestart    = "bucketfs restarts on its state after the kill"
	lostFoundStart = ".bucketfs-lost+found-"
)

// A violation is one broken rule, with what the report prints about it.
type violation struct {
	rule     string
	file     int // -1 when no one file is concerned
	name     string
	expected string
	read     string
	note     string
}

// readFile is one file read back from the mount.
type readFile struct {
	path string // relative to the mount
	data []byte
	err  error
}

// observation is the tree the mount shows after the restart.
type observation struct {
	files     map[string]readFile // names of the pool
	unknown   []readFile          // any other file outside lost+found
	lostFound []readFile
	noSubdir  bool // the directory d, made and fsync'ed before the writer started, is gone
}

// observe reads every file of the mount.
func observe(mnt string) (*observation, error) {
	obs := &observation{files: map[string]readFile{}, noSubdir: true}
	var walk func(rel string, lostFound bool) error
	walk = func(rel string, lostFound bool) error {
		ents, err := os.ReadDir(filepath.Join(mnt, rel))
		if err != nil {
			return fmt.Errorf("list %q: %w", rel, err)
		}
		for _, e := range ents {
			p := filepath.Join(rel, e.Name())
			switch {
			case e.IsDir():
				lf := lostFound || (rel == "" && strings.HasPrefix(e.Name(), lostFoundStart))
				if p == subdir {
					obs.noSubdir = false
				} else if !lf {
					obs.unknown = append(obs.unknown, readFile{path: p + "/", err: errors.New("unknown directory")})
				}
				if err := walk(p, lf); err != nil {
					return err
				}
				continue
			case lostFound:
				obs.lostFound = append(obs.lostFound, readBack(mnt, p))
			case inPool(p):
				obs.files[p] = readBack(mnt, p)
			default:
				obs.unknown = append(obs.unknown, readBack(mnt, p))
			}
		}
		return nil
	}
	return obs, walk("", false)
}

// readBack reads one file, giving up after two minutes (bucketfs answers
// EIO after 30 s without progress from the store).
func readBack(mnt, rel string) readFile {
	done := make(chan readFile, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(mnt, rel))
		done <- readFile{path: rel, data: b, err: err}
	}()
	select {
	case rf := <-done:
		return rf
	case <-time.After(2 * time.Minute):
		return readFile{path: rel, err: errors.New("read did not return within 2 minutes")}
	}
}

func (rf readFile) describe() string {
	if rf.err != nil {
		return "read error: " + rf.err.Error()
	}
	return describeBytes(rf.data)
}

// checkMount checks the rules on the tree the mount shows after the
// restart:
//
//   - fsync'ed means kept: a file whose last change before the kill was
//     fsync'ed shows exactly that state (name and bytes).
//   - only real versions: every file shows one full state it had at some
//     moment at or after its last fsync; a file never fsync'ed may be
//     absent.
//   - exported means kept: a file also shows a state at or after the last
//     one the bucket had before the restart (the bucket is the source of
//     truth: a file that reached it may not roll back, nor vanish). So
//     only a file that reached neither fsync nor the bucket may be absent. Never a read error, zeros nobody
//     wrote, a mix of two states, or a cut to another size. A name
//     the writer never made, outside lost+found, is a violation.
//   - lost+found: what is kept there is counted as crash damage, and must
//     be a real state of some file too.
//
// Each file may pick any of its allowed states, but two files cannot show
// under one name, so the check looks for one assignment of the names shown
// to the files that explains the whole tree.
func checkMount(m *model, obs *observation) []violation {
	var vs []violation
	if obs.noSubdir {
		vs = append(vs, violation{rule: ruleFsync, file: -1, name: subdir + "/",
			expected: "directory d (made and fsync'ed before the writer started)", read: "absent"})
	}
	for _, rf := range obs.unknown {
		vs = append(vs, violation{rule: ruleReal, file: firstOr(wordFiles(rf.data), -1), name: rf.path,
			expected: "no such name: the writer never made it", read: rf.describe()})
	}
	for _, name := range names {
		if rf, ok := obs.files[name]; ok && rf.err != nil {
			vs = append(vs, violation{rule: ruleReal, file: firstOr(holdersOf(m, name), -1), name: name,
				expected: "a readable file (never EIO while a good copy exists); allowed here: " + allowedUnder(m, name),
				read:     rf.describe()})
		}
	}
	vs = append(vs, assign(m, obs)...)
	for _, rf := range obs.lostFound {
		if rf.err == nil && realAnywhere(m, rf.data) {
			continue
		}
		vs = append(vs, violation{rule: ruleLostFound, file: firstOr(wordFiles(rf.data), -1), name: rf.path,
			expected: "a full state some file had", read: rf.describe()})
	}
	return vs
}

// identify says which state of which file data is, if any: "f6 state #6
// (d/f6), older than its last fsync (#16)".
func identify(m *model, data []byte) string {
	for _, f := range m.files {
		i, ok := f.realState("", data)
		if !ok {
			continue
		}
		s := fmt.Sprintf("the bytes read are f%d's state #%d (as %s)", f.id, i, f.states[i].name)
		if i < f.synced {
			s += fmt.Sprintf(", older than its last fsync (#%d)", f.synced)
		}
		return s
	}
	return ""
}

// realAnywhere reports whether data is a full state some file had, under
// any name.
func realAnywhere(m *model, data []byte) bool {
	for _, f := range m.files {
		if _, ok := f.realState("", data); ok {
			return true
		}
	}
	return false
}

// option is one way a file can explain the tree: showing under name (""
// for absent) as its state idx.
type option struct {
	name string
	idx  int
	cut  int64 // > 0: the in-flight write of state idx applied up to here only
}

// options lists the allowed states of f that agree with what the mount
// shows, one per name.
func options(f *fileModel, obs *observation, candidates []int) []option {
	var opts []option
	seen := map[string]bool{}
	for _, i := range candidates {
		s := f.states[i]
		if seen[s.name] {
			continue
		}
		o := option{name: s.name, idx: i}
		ok := s.name == ""
		if rf, shown := obs.files[s.name]; s.name != "" && shown {
			// A read error is reported on its own; do not let it
			// also make the file look lost.
			ok = rf.err != nil || s.c.equal(rf.data)
			if !ok && s.torn != nil {
				o.cut, ok = s.torn.matches(rf.data)
			}
		}
		if ok {
			seen[s.name] = true
			opts = append(opts, o)
		}
	}
	return opts
}

// describeOutcome says what became of a file's in-flight step.
func describeOutcome(f *fileModel, o option) string {
	last := len(f.states) - 1
	switch {
	case o.idx == last && o.cut > 0:
		return fmt.Sprintf("f%d: in-flight step #%d applied up to byte %d of %d", f.id, f.states[last].step, o.cut, f.states[last].torn.off+f.states[last].torn.n)
	case o.idx == last:
		return fmt.Sprintf("f%d: in-flight step #%d applied", f.id, f.states[last].step)
	default:
		return fmt.Sprintf("f%d: in-flight step #%d not applied (shows state #%d)", f.id, f.states[last].step, o.idx)
	}
}

// rolledBack reports whether a file that breaks the rules shows a real
// state older than the one the bucket had, or vanished (none of its
// allowed names is shown), rather than bytes that are no state at all.
func rolledBack(f *fileModel, obs *observation) bool {
	for _, o := range options(f, obs, f.candidatesFrom(max(f.synced, 0))) {
		if o.name != "" {
			return true
		}
	}
	for _, i := range f.candidates() {
		if _, shown := obs.files[f.states[i].name]; shown {
			return false
		}
	}
	return true
}

// assign finds an assignment of the names shown to the files, each file
// taking one of its options and each name shown taken by exactly one file.
// When there is none it says why, file by file.
func assign(m *model, obs *observation) []violation {
	opts := make([][]option, numFiles)
	for i, f := range m.files {
		opts[i] = options(f, obs, f.candidates())
	}
	used := map[string]bool{}
	chosen := make([]option, numFiles)
	var try func(i int) bool
	try = func(i int) bool {
		if i == numFiles {
			for name := range obs.files {
				if !used[name] {
					return false
				}
			}
			return true
		}
		for _, o := range opts[i] {
			if o.name != "" && used[o.name] {
				continue
			}
			used[o.name] = o.name != ""
			chosen[i] = o
			if try(i + 1) {
				return true
			}
			delete(used, o.name)
		}
		return false
	}
	if try(0) {
		for i, f := range m.files {
			if s := f.states[len(f.states)-1]; s.inflight {
				m.inflightOutcome = append(m.inflightOutcome, describeOutcome(f, chosen[i]))
			}
		}
		return nil
	}
	var vs []violation
	explained := map[string]bool{}
	for i, f := range m.files {
		if len(opts[i]) > 0 {
			continue
		}
		rule := ruleReal
		switch {
		case f.fsyncedLast():
			rule = ruleFsync
		case f.exported > f.synced && rolledBack(f, obs):
			rule = ruleExported
		}
		v := violation{rule: rule, file: i, expected: f.describeCandidates()}
		var reads []string
		seen := map[string]bool{}
		for _, idx := range f.candidates() {
			name := f.states[idx].name
			if name == "" || seen[name] {
				continue
			}
			seen[name], explained[name] = true, true
			if v.name == "" {
				v.name = name
			}
			if rf, ok := obs.files[name]; ok {
				reads = append(reads, name+": "+rf.describe())
				if id := identify(m, rf.data); id != "" && rf.err == nil {
					v.note = strings.TrimSpace(v.note + " " + name + ": " + id)
				}
			} else {
				reads = append(reads, name+": absent")
			}
		}
		v.read = strings.Join(reads, "\n      ")
		vs = append(vs, v)
	}
	// Names shown that no file can explain.
	for _, name := range names {
		rf, ok := obs.files[name]
		if !ok || rf.err != nil || explained[name] || coverable(opts, name) { // read errors are reported already
			continue
		}
		v := violation{rule: ruleReal, file: firstOr(wordFiles(rf.data), -1), name: name, read: rf.describe(),
			note: identify(m, rf.data), expected: allowedUnder(m, name)}
		if v.file < 0 {
			v.file = firstOr(holdersOf(m, name), -1)
		}
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		var shown []string
		for name := range obs.files {
			shown = append(shown, name)
		}
		slices.Sort(shown)
		vs = append(vs, violation{rule: ruleReal, file: -1, name: strings.Join(shown, " "),
			expected: "each file one of its states, no two under one name",
			read:     "every file alone could be explained, but not all together"})
	}
	return vs
}

func coverable(opts [][]option, name string) bool {
	for _, os := range opts {
		for _, o := range os {
			if o.name == name {
				return true
			}
		}
	}
	return false
}

// allowedUnder summarises the states files may show under name after the
// crash.
func allowedUnder(m *model, name string) string {
	var parts []string
	for _, f := range m.files {
		for _, i := range f.candidates() {
			if f.states[i].name == name {
				parts = append(parts, fmt.Sprintf("f%d %s", f.id, f.describeState(i)))
			}
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("nothing: no file may have this name now (files that had it: %v)", holdersOf(m, name))
	}
	if len(parts) > 6 {
		parts = append(parts[:3:3], append([]string{fmt.Sprintf("... (%d states)", len(parts))}, parts[len(parts)-3:]...)...)
	}
	return strings.Join(parts, "\n      ")
}

// holdersOf lists the files that had name at some moment.
func holdersOf(m *model, name string) []int {
	var ids []int
	for _, f := range m.files {
		for _, s := range f.states {
			if s.name == name {
				ids = append(ids, f.id)
				break
			}
		}
	}
	return ids
}

func firstOr(ids []int, def int) int {
	if len(ids) == 0 {
		return def
	}
	return ids[0]
}
