package tier

import (
	"math"
	"sort"
)

// Range is a byte range [Off, Off+Len) of one inode's data.
type Range struct{ Off, Len int64 }

// End returns the first byte after r.
func (r Range) End() int64 { return r.Off + r.Len }

// extents is the set of present byte ranges of one inode: sorted by offset,
// non-overlapping, non-empty, and coalesced (no two ranges touch). Every
// method keeps that shape; none of them does I/O or locking.
type extents []Range

// end returns off+n, saturating at math.MaxInt64 so "to the end of the file"
// ranges can be written as Range{off, math.MaxInt64}.
func end(off, n int64) int64 {
	if n > math.MaxInt64-off {
		return math.MaxInt64
	}
	return off + n
}

// add marks [off, off+n) present and returns how many bytes were not present
// before.
func (e *extents) add(off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	s := *e
	hi := end(off, n)
	// i: first range that ends at or after off (touching ranges merge).
	i := sort.Search(len(s), func(k int) bool { return s[k].End() >= off })
	// j: first range that starts after hi.
	j := i + sort.Search(len(s)-i, func(k int) bool { return s[i+k].Off > hi })
	if i == j {
		s = append(s, Range{})
		copy(s[i+1:], s[i:])
		s[i] = Range{off, hi - off}
		*e = s
		return hi - off
	}
	lo := min(off, s[i].Off)
	hi = max(hi, s[j-1].End())
	var had int64
	for _, r := range s[i:j] {
		had += r.Len
	}
	s[i] = Range{lo, hi - lo}
	*e = append(s[:i+1], s[j:]...)
	return (hi - lo) - had
}

// remove drops [off, off+n) and returns how many bytes were present in it.
func (e *extents) remove(off, n int64) int64 {
	if n <= 0 {
		return 0
	}
	s := *e
	hi := end(off, n)
	i := sort.Search(len(s), func(k int) bool { return s[k].End() > off })
	j := i + sort.Search(len(s)-i, func(k int) bool { return s[i+k].Off >= hi })
	if i == j {
		return 0
	}
	var had int64
	for _, r := range s[i:j] {
		had += r.Len
	}
	var keep [2]Range
	k := 0
	if first := s[i]; first.Off < off {
		keep[k] = Range{first.Off, off - first.Off}
		had -= keep[k].Len
		k++
	}
	if last := s[j-1]; last.End() > hi {
		keep[k] = Range{hi, last.End() - hi}
		had -= keep[k].Len
		k++
	}
	tail := len(s) - j
	switch {
	case k > j-i: // one range split in two: grow by one
		s = append(s, Range{})
		copy(s[j+1:], s[j:j+tail])
	case k < j-i:
		copy(s[i+k:], s[j:])
		s = s[:i+k+tail]
	}
	copy(s[i:], keep[:k])
	*e = s
	return had
}

// covers reports whether all of [off, off+n) is present.
func (e extents) covers(off, n int64) bool {
	if n <= 0 {
		return true
	}
	i := sort.Search(len(e), func(k int) bool { return e[k].End() > off })
	return i < len(e) && e[i].Off <= off && e[i].End() >= end(off, n)
}

// missing appends to dst the sub-ranges of [off, off+n) that are not present,
// in order, and returns the extended slice.
func (e extents) missing(off, n int64, dst []Range) []Range {
	if n <= 0 {
		return dst
	}
	hi := end(off, n)
	pos := off
	i := sort.Search(len(e), func(k int) bool { return e[k].End() > off })
	for ; i < len(e) && e[i].Off < hi; i++ {
		if e[i].Off > pos {
			dst = append(dst, Range{pos, e[i].Off - pos})
		}
		pos = e[i].End()
	}
	if pos < hi {
		dst = append(dst, Range{pos, hi - pos})
	}
	return dst
}

// total returns the number of present bytes.
func (e extents) total() int64 {
	var t int64
	for _, r := range e {
		t += r.Len
	}
	return t
}

// last returns the end of the last present range, or 0.
func (e extents) last() int64 {
	if len(e) == 0 {
		return 0
	}
	return e[len(e)-1].End()
}

// clone returns a copy that shares no memory with e.
func (e extents) clone() extents {
	if len(e) == 0 {
		return nil
	}
	return append(extents(nil), e...)
}

// valid reports whether e has the shape every method relies on; used when
// loading a map from disk.
func (e extents) valid() bool {
	var prev int64 = -1
	for _, r := range e {
		if r.Off < 0 || r.Len <= 0 || r.Len > math.MaxInt64-r.Off || r.Off <= prev {
			return false
		}
		prev = r.End()
	}
	return true
}
