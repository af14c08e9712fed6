package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// A word names one write: the file it went to and the write's version
// number in that file. Its 8 bytes are "f<file>v<version, 5 digits>", and a
// write fills its whole range with the word repeated, aligned to the file
// offset: byte p of the file holds byte p%8 of the word. Any aligned 8 bytes
// of a file therefore say which write they came from, and a word never
// contains a zero byte, so zeros are always told apart from written data.
type word struct{ file, ver int }

func (w word) bytes() [8]byte {
	var b [8]byte
	copy(b[:], fmt.Sprintf("f%dv%05d", w.file, w.ver))
	return b
}

func (w word) String() string { return fmt.Sprintf("f%dv%d", w.file, w.ver) }

// parseWord reads a whole aligned word; ok is false for anything else.
func parseWord(b []byte) (word, bool) {
	if len(b) != 8 || b[0] != 'f' || b[2] != 'v' || b[1] < '0' || b[1] > '9' {
		return word{}, false
	}
	v := 0
	for _, c := range b[3:] {
		if c < '0' || c > '9' {
			return word{}, false
		}
		v = v*10 + int(c-'0')
	}
	return word{file: int(b[1] - '0'), ver: v}, true
}

// fillWord fills buf, which stands for the file range starting at off, with
// w's pattern.
func fillWord(buf []byte, off int64, w word) {
	p := w.bytes()
	for i := range buf {
		buf[i] = p[(off+int64(i))%8]
	}
}

// An extent is a range [off, end) of a file filled by one write.
type extent struct {
	off, end int64
	w        word
}

// content describes the bytes of a file compactly: its size and the
// extents written; every byte below size outside the extents is zero (a
// hole, a punched range or a zero extension by truncate). Values are
// immutable: the operations return a new content.
type content struct {
	size int64
	ext  []extent // sorted, disjoint, inside [0, size)
}

// write is the content after writing n bytes of w's pattern at off.
func (c content) write(off, n int64, w word) content {
	if n <= 0 {
		return c
	}
	out := c.cut(off, off+n)
	out.ext = append(out.ext, extent{off, off + n, w})
	slices.SortFunc(out.ext, func(a, b extent) int { return int(a.off - b.off) })
	out.size = max(c.size, off+n)
	return out
}

// cut returns c with [from, to) zeroed and the same size.
func (c content) cut(from, to int64) content {
	out := content{size: c.size}
	for _, e := range c.ext {
		if e.end <= from || e.off >= to {
			out.ext = append(out.ext, e)
			continue
		}
		if e.off < from {
			out.ext = append(out.ext, extent{e.off, from, e.w})
		}
		if e.end > to {
			out.ext = append(out.ext, extent{to, e.end, e.w})
		}
	}
	return out
}

// truncate is the content after truncating (or extending with zeros) to n.
func (c content) truncate(n int64) content {
	out := c.cut(n, max(n, c.size))
	out.size = n
	return out
}

// punch is the content after punching a hole, keeping the size.
func (c content) punch(off, n int64) content { return c.cut(off, off+n) }

// equal reports whether data is exactly this content.
func (c content) equal(data []byte) bool {
	if int64(len(data)) != c.size {
		return false
	}
	var pat []byte
	pos := int64(0)
	zeroUpTo := func(end int64) bool {
		for ; pos < end; pos++ {
			if data[pos] != 0 {
				return false
			}
		}
		return true
	}
	for _, e := range c.ext {
		if !zeroUpTo(e.off) {
			return false
		}
		if pat == nil {
			pat = make([]byte, 64<<10+8)
		}
		fillWord(pat, 0, e.w)
		for pos < e.end {
			n := min(e.end-pos, 64<<10)
			if !bytes.Equal(data[pos:pos+n], pat[pos%8:pos%8+n]) {
				return false
			}
			pos += n
		}
	}
	return zeroUpTo(c.size)
}

// bytes materialises the content (tests and small files only).
func (c content) bytes() []byte {
	b := make([]byte, c.size)
	for _, e := range c.ext {
		fillWord(b[e.off:e.end], e.off, e.w)
	}
	return b
}

// A run is a range of a file that holds one kind of bytes: a word, zeros
// or something else.
type run struct {
	from, to int64
	kind     string // "zeros", a word ("f3v7") or "other"
}

func (r run) String() string { return fmt.Sprintf("[%d,%d) %s", r.from, r.to, r.kind) }

// runs describes the content as runs, the way runsOf describes read bytes.
func (c content) runs() []run {
	var rs []run
	pos := int64(0)
	for _, e := range c.ext {
		if e.off > pos {
			rs = appendRun(rs, run{pos, e.off, "zeros"})
		}
		rs = appendRun(rs, run{e.off, e.end, e.w.String()})
		pos = e.end
	}
	if c.size > pos {
		rs = appendRun(rs, run{pos, c.size, "zeros"})
	}
	return rs
}

func appendRun(rs []run, r run) []run {
	if n := len(rs); n > 0 && rs[n-1].kind == r.kind && rs[n-1].to == r.from {
		rs[n-1].to = r.to
		return rs
	}
	return append(rs, r)
}

// runsOf tells, for bytes read back, which write each range came from. Each
// aligned 8-byte block is a whole word, zeros, or (where a write started or
// ended inside the block) a prefix of one kind and a suffix of another,
// taken from the neighbouring blocks; anything else is "other". A block
// that splits that way is split even when it also reads as a word (a
// prefix of "f1v00007" and a suffix of "f1v00008" read "f1v00008"). A
// write too short to fill an aligned block of its own cannot be named: it
// shows as "other".
func runsOf(data []byte) []run {
	n := (len(data) + 7) / 8
	kinds := make([]string, n)
	words := map[string]word{}
	for b := range n {
		blk := data[b*8 : min(b*8+8, len(data))]
		switch w, ok := parseWord(blk); {
		case isZero(blk):
			kinds[b] = "zeros"
		case ok:
			kinds[b] = w.String()
			words[kinds[b]] = w
		}
	}
	matches := func(blk []byte, off int64, kind string) bool {
		if kind == "zeros" {
			return isZero(blk)
		}
		w, ok := words[kind]
		if !ok {
			return false
		}
		p := w.bytes()
		for i, c := range blk {
			if c != p[(off+int64(i))%8] {
				return false
			}
		}
		return true
	}
	// split finds k and the kinds of [from, from+k) and [from+k, to).
	split := func(blk []byte, from int64, prev, next string) (int64, string, string, bool) {
		for _, a := range []string{prev, "zeros"} {
			for _, z := range []string{next, "zeros", prev} {
				if a == "" || z == "" || a == z {
					continue
				}
				for k := int64(1); k < int64(len(blk)); k++ {
					if matches(blk[:k], from, a) && matches(blk[k:], from+k, z) {
						return k, a, z, true
					}
				}
			}
		}
		return 0, "", "", false
	}
	var rs []run
	for b := range n {
		from, to := int64(b*8), int64(min(b*8+8, len(data)))
		var prev, next string
		if b > 0 {
			prev = kinds[b-1]
		}
		if b+1 < n {
			next = kinds[b+1]
		}
		blk := data[from:to]
		if k, a, z, ok := split(blk, from, prev, next); ok && (kinds[b] == "" || kinds[b] != prev && kinds[b] != next) {
			rs = appendRun(rs, run{from, from + k, a})
			rs = appendRun(rs, run{from + k, to, z})
			continue
		}
		switch {
		case kinds[b] != "":
			rs = appendRun(rs, run{from, to, kinds[b]})
		case prev != "" && matches(blk, from, prev): // the last, partial block
			rs = appendRun(rs, run{from, to, prev})
		default:
			rs = appendRun(rs, run{from, to, "other"})
		}
	}
	return rs
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// describeRuns prints runs briefly: "size 8192: [0,4096) f3v7, [4096,8192) zeros".
func describeRuns(size int64, rs []run) string {
	const most = 8
	var parts []string
	for i, r := range rs {
		if i == most {
			parts = append(parts, fmt.Sprintf("... %d more runs", len(rs)-most))
			break
		}
		parts = append(parts, r.String())
	}
	if size == 0 {
		return "size 0 (empty)"
	}
	return fmt.Sprintf("size %d: %s", size, strings.Join(parts, ", "))
}

func (c content) String() string { return describeRuns(c.size, c.runs()) }

func describeBytes(data []byte) string { return describeRuns(int64(len(data)), runsOf(data)) }

// wordFiles lists the files whose words appear in data, most bytes first.
func wordFiles(data []byte) []int {
	bytesOf := map[int]int64{}
	for _, r := range runsOf(data) {
		if w, ok := parseRunWord(r.kind); ok {
			bytesOf[w.file] += r.to - r.from
		}
	}
	var ids []int
	for id := range bytesOf {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b int) int { return int(bytesOf[b] - bytesOf[a]) })
	return ids
}

func parseRunWord(kind string) (word, bool) {
	var w word
	if _, err := fmt.Sscanf(kind, "f%dv%d", &w.file, &w.ver); err != nil {
		return word{}, false
	}
	return w, true
}
