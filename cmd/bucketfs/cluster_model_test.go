package main

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// fsModel is the file system the cluster should be: what every answer of
// the differential test is checked against. Paths are slash-separated
// and relative to the root ("" is the root, which is always there).
//
// Invariant: every path's parent is a directory of the model, and the
// files of two paths are the same *modelFile exactly when the paths are
// hard links of one file.
type fsModel struct {
	nodes map[string]*modelNode
}

type modelNode struct {
	dir  bool
	mode uint32     // directories; a file's mode is its modelFile's
	file *modelFile // files
}

// modelFile is one file, shared by its hard links.
type modelFile struct {
	data  []byte
	mode  uint32
	nlink int
}

func newModel() *fsModel { return &fsModel{nodes: map[string]*modelNode{}} }

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// parentErr is the error of reaching p's parent: ENOENT for a missing
// component, ENOTDIR for a file on the way.
func (m *fsModel) parentErr(p string) syscall.Errno {
	parts := strings.Split(p, "/")
	q := ""
	for _, part := range parts[:len(parts)-1] {
		q = joinPath(q, part)
		n := m.nodes[q]
		if n == nil {
			return syscall.ENOENT
		}
		if !n.dir {
			return syscall.ENOTDIR
		}
	}
	return 0
}

// lookupErr is the error of reaching p itself: its parent's, or ENOENT.
func (m *fsModel) lookupErr(p string) syscall.Errno {
	if p == "" {
		return 0 // the root
	}
	if e := m.parentErr(p); e != 0 {
		return e
	}
	if m.nodes[p] == nil {
		return syscall.ENOENT
	}
	return 0
}

// children are the names directly in directory p, sorted.
func (m *fsModel) children(p string) []string {
	var out []string
	prefix := p + "/"
	if p == "" {
		prefix = ""
	}
	for q := range m.nodes {
		if rest, ok := strings.CutPrefix(q, prefix); ok && rest != "" && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	sort.Strings(out)
	return out
}

// info is what a stat of p should say.
func (m *fsModel) info(p string) fileInfo {
	n := m.nodes[p]
	if n.dir {
		return fileInfo{dir: true, mode: n.mode}
	}
	return fileInfo{size: int64(len(n.file.data)), mode: n.file.mode, nlink: uint32(n.file.nlink)}
}

// sameInfo compares a stat with the model's; a directory's size and link
// count are the server's to choose.
func sameInfo(got, want fileInfo) bool {
	if got.dir || want.dir {
		return got.dir == want.dir && got.mode == want.mode
	}
	return got == want
}

// paths lists every path of the model, sorted.
func (m *fsModel) paths() []string {
	var out []string
	for p := range m.nodes {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// subtree lists p and every path under it.
func (m *fsModel) subtree(p string) []string {
	out := []string{p}
	for q := range m.nodes {
		if strings.HasPrefix(q, p+"/") {
			out = append(out, q)
		}
	}
	return out
}

// op is one operation of the differential test.
type op struct {
	kind   string // write, read, mkdir, rename, unlink, rmdir, link, truncate, chmod, stat, readdir
	a, b   string
	data   []byte
	size   int64
	mode   uint32
	sync   bool
	server int
}

func (o op) String() string {
	switch o.kind {
	case "write":
		return fmt.Sprintf("write %s (%d bytes, sync %v)", o.a, len(o.data), o.sync)
	case "rename", "link":
		return fmt.Sprintf("%s %s %s", o.kind, o.a, o.b)
	case "truncate":
		return fmt.Sprintf("truncate %s %d", o.a, o.size)
	case "chmod", "mkdir":
		return fmt.Sprintf("%s %s %04o", o.kind, o.a, o.mode)
	}
	return o.kind + " " + o.a
}

// errs is the set of errnos an operation may fail with; empty means it
// must succeed.
type errs []syscall.Errno

func (e errs) add(more ...syscall.Errno) errs {
	for _, x := range more {
		if x != 0 && !slices.Contains(e, x) {
			e = append(e, x)
		}
	}
	return e
}

// expect returns the errnos o may fail with on the model as it stands
// (none: it must succeed), through NFS or through FUSE. Where several
// conditions fail at once, any of their errnos is accepted: the order in
// which a server checks them is its own.
func (m *fsModel) expect(o op, nfs bool) errs {
	var e errs
	switch o.kind {
	case "write":
		if e = e.add(m.parentErr(o.a)); len(e) > 0 {
			return e
		}
		if n := m.nodes[o.a]; n != nil && n.dir {
			if nfs {
				return e.add(syscall.EISDIR, syscall.EEXIST)
			}
			return e.add(syscall.EISDIR)
		}
	case "read":
		if e = e.add(m.lookupErr(o.a)); len(e) > 0 {
			return e
		}
		if m.nodes[o.a].dir {
			return e.add(syscall.EISDIR)
		}
	case "mkdir":
		if e = e.add(m.parentErr(o.a)); len(e) > 0 {
			return e
		}
		if m.nodes[o.a] != nil {
			return e.add(syscall.EEXIST)
		}
	case "rename":
		e = e.add(m.lookupErr(o.a), m.parentErr(o.b))
		if len(e) > 0 {
			return e
		}
		src, dst := m.nodes[o.a], m.nodes[o.b]
		if o.a == o.b {
			return nil
		}
		if src.dir && strings.HasPrefix(o.b, o.a+"/") {
			e = e.add(syscall.EINVAL)
		}
		if strings.HasPrefix(o.a, o.b+"/") {
			// Onto an ancestor: Linux answers ENOTEMPTY before it looks
			// at the kinds (rename(2)).
			e = e.add(syscall.ENOTEMPTY, syscall.EEXIST)
		}
		if dst != nil {
			switch {
			case !src.dir && !dst.dir && src.file == dst.file:
				// Two links of one file: rename does nothing.
			case src.dir && !dst.dir:
				e = e.add(syscall.ENOTDIR)
				if nfs {
					e = e.add(syscall.EEXIST)
				}
			case !src.dir && dst.dir:
				e = e.add(syscall.EISDIR)
				if nfs {
					e = e.add(syscall.EEXIST)
				}
			case src.dir && dst.dir && len(m.children(o.b)) > 0:
				e = e.add(syscall.ENOTEMPTY, syscall.EEXIST)
			}
		}
	case "unlink", "rmdir":
		if e = e.add(m.lookupErr(o.a)); len(e) > 0 {
			return e
		}
		n := m.nodes[o.a]
		switch {
		case nfs && n.dir && len(m.children(o.a)) > 0: // REMOVE either way
			e = e.add(syscall.ENOTEMPTY, syscall.EEXIST)
		case nfs:
		case o.kind == "unlink" && n.dir:
			e = e.add(syscall.EISDIR, syscall.EPERM)
		case o.kind == "rmdir" && !n.dir:
			e = e.add(syscall.ENOTDIR)
		case o.kind == "rmdir" && len(m.children(o.a)) > 0:
			e = e.add(syscall.ENOTEMPTY, syscall.EEXIST)
		}
	case "link":
		e = e.add(m.lookupErr(o.a), m.parentErr(o.b))
		if len(e) > 0 {
			return e
		}
		if m.nodes[o.b] != nil {
			e = e.add(syscall.EEXIST)
		}
		if m.nodes[o.a].dir {
			e = e.add(syscall.EPERM, syscall.EISDIR)
		}
	case "truncate":
		if e = e.add(m.lookupErr(o.a)); len(e) > 0 {
			return e
		}
		if m.nodes[o.a].dir {
			e = e.add(syscall.EISDIR, syscall.EINVAL)
		}
	case "chmod", "stat":
		e = e.add(m.lookupErr(o.a))
	case "readdir":
		if e = e.add(m.lookupErr(o.a)); len(e) > 0 || o.a == "" {
			return e
		}
		if !m.nodes[o.a].dir {
			e = e.add(syscall.ENOTDIR)
		}
	}
	return e
}

// apply changes the model as o, which succeeded, changed the file system.
func (m *fsModel) apply(o op, nfs bool) {
	switch o.kind {
	case "write":
		if n := m.nodes[o.a]; n != nil {
			n.file.data = slices.Clone(o.data)
			return
		}
		m.nodes[o.a] = &modelNode{file: &modelFile{data: slices.Clone(o.data), mode: 0o644, nlink: 1}}
	case "mkdir":
		m.nodes[o.a] = &modelNode{dir: true, mode: o.mode}
	case "rename":
		src, dst := m.nodes[o.a], m.nodes[o.b]
		if o.a == o.b || (dst != nil && !src.dir && !dst.dir && src.file == dst.file) {
			return
		}
		if dst != nil && !dst.dir {
			dst.file.nlink--
		}
		delete(m.nodes, o.b)
		moved := map[string]*modelNode{}
		for _, q := range m.subtree(o.a) {
			moved[o.b+strings.TrimPrefix(q, o.a)] = m.nodes[q]
			delete(m.nodes, q)
		}
		for q, n := range moved {
			m.nodes[q] = n
		}
	case "unlink", "rmdir":
		n := m.nodes[o.a]
		if !n.dir {
			n.file.nlink--
		}
		delete(m.nodes, o.a)
	case "link":
		f := m.nodes[o.a].file
		f.nlink++
		m.nodes[o.b] = &modelNode{file: f}
	case "truncate":
		f := m.nodes[o.a].file
		if int(o.size) <= len(f.data) {
			f.data = f.data[:o.size]
		} else {
			f.data = append(f.data, make([]byte, int(o.size)-len(f.data))...)
		}
	case "chmod":
		if n := m.nodes[o.a]; n.dir {
			n.mode = o.mode
		} else {
			n.file.mode = o.mode
		}
	}
}

// diffTree compares a tree read through a server (walk) with the model
// and describes the first few differences; "" when they agree.
func (m *fsModel) diffTree(infos map[string]fileInfo, datas map[string][]byte) string {
	var out []string
	for _, p := range m.paths() {
		got, ok := infos[p]
		want := m.info(p)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s missing", p))
		case !sameInfo(got, want):
			out = append(out, fmt.Sprintf("%s is %+v, want %+v", p, got, want))
		case !want.dir && !bytes.Equal(datas[p], m.nodes[p].file.data):
			out = append(out, fmt.Sprintf("%s holds other bytes (%d, want %d)", p, len(datas[p]), len(m.nodes[p].file.data)))
		}
	}
	for p := range infos {
		if m.nodes[p] == nil {
			out = append(out, fmt.Sprintf("%s should not exist", p))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}
